"""The `token-embeddings` stage: one frozen source encoder's last-layer word vectors of a fixed
list of sentences (STS-B train and dev, and the evaluation suite), computed once in the stage
store (keyed by the source's weights fingerprint and the sentences) and read, memory-mapped, by
the meta-embedding trials (trainables/meta_embeddings.py), which therefore never run an encoder.

Words: subword tokens whose character offsets touch are averaged into one word; special tokens
([CLS], [SEP], <s>, </s>: empty offsets) are dropped. The stage directory holds `words.npy`
(float16, all sentences' words one after another) and `starts.npy` (int64, sentence i's words are
rows starts[i]:starts[i+1]).
"""
from __future__ import annotations

import inspect
import math
import time
from pathlib import Path

import numpy as np

WORDS_FILE, STARTS_FILE = "words.npy", "starts.npy"


def merge_words(offsets, vectors: np.ndarray) -> np.ndarray:
    """Average the rows of `vectors` (one per token) whose (start, end) character offsets touch
    into one row per word; tokens with empty offsets (special tokens, padding) are dropped."""
    groups: list[list[int]] = []
    last_end = None
    for row, (start, end) in enumerate(offsets):
        if end <= start:
            continue
        if groups and start == last_end:
            groups[-1].append(row)
        else:
            groups.append([row])
        last_end = end
    if not groups:
        return np.zeros((0, vectors.shape[1]), dtype=vectors.dtype)
    return np.stack([vectors[g].mean(axis=0) for g in groups])


def stage_sentences(config: dict, data_dir) -> list[str]:
    """The stage's sentences, in order: STS-B train and dev (unique), then the suite's."""
    from trainables.data.stsb import load_stsb
    from trainables.eval_sets import load_suite

    splits = load_stsb(data_dir, ("train", "dev"))
    pairs = [s for split in ("train", "dev") for e in splits[split] for s in (e.sentence1, e.sentence2)]
    return list(dict.fromkeys(pairs + load_suite(config["sets"], data_dir).sentences))


def stage_spec(source: str, path, sets: list[str], checksum: str, max_length: int, batch_size: int, root, data_dir) -> dict:
    """`checksum`: the STS-B train/dev and suite checksums (the sentences' identity)."""
    from trainables.stages import make_spec

    config = {"stage": "token-embeddings", "sets": list(sets), "max_length": int(max_length), "batch_size": int(batch_size),
              "dtype": "float16"}
    return make_spec("token-embeddings", source, path, root, data_dir, checksum, config)


def load(stage_dir) -> tuple[np.ndarray, np.ndarray]:
    """(words, starts), the words memory-mapped (read from disk as trials touch them)."""
    stage_dir = Path(stage_dir)
    return np.load(stage_dir / WORDS_FILE, mmap_mode="r"), np.load(stage_dir / STARTS_FILE)


def encode(model, tokenizer, sentences: list[str], max_length: int, batch_size: int, device, on_batch=None) -> list[np.ndarray]:
    """Each sentence's merged word vectors (float32), from the encoder's last hidden state."""
    import torch

    out = []
    model.eval()
    max_length = min(int(max_length), int(tokenizer.model_max_length))
    for begin in range(0, len(sentences), batch_size):
        batch = sentences[begin:begin + batch_size]
        encoded = tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt",
                            return_offsets_mapping=True)
        offsets = encoded.pop("offset_mapping").tolist()
        if "token_type_ids" not in inspect.signature(model.forward).parameters:
            encoded.pop("token_type_ids", None)
        with torch.no_grad():
            hidden = model(**{k: v.to(device) for k, v in encoded.items()}).last_hidden_state.float().cpu().numpy()
        mask = encoded["attention_mask"].numpy()
        for row in range(len(batch)):
            kept = [o if mask[row, i] else (0, 0) for i, o in enumerate(offsets[row])]
            out.append(merge_words(kept, hidden[row]))
        if on_batch is not None:
            on_batch()
    return out


def compute(spec: dict, out_dir: Path) -> dict:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from trainables.stage_progress import StageProgress

    config = spec["config"]
    sentences = stage_sentences(config, spec["data_dir"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = AutoModel.from_pretrained(spec["model_path"]).to(device)
    tokenizer = AutoTokenizer.from_pretrained(spec["model_path"], use_fast=True)
    started = time.time()
    progress = StageProgress(spec, math.ceil(len(sentences) / config["batch_size"]))
    words = encode(model, tokenizer, sentences, config["max_length"], config["batch_size"], device, progress.step)
    progress.finish()
    starts = np.concatenate([[0], np.cumsum([len(w) for w in words])]).astype(np.int64)
    np.save(Path(out_dir) / WORDS_FILE, np.concatenate(words).astype(np.float16))
    np.save(Path(out_dir) / STARTS_FILE, starts)
    return {"sentences": len(sentences), "device": str(device), "history": [],
            "final": {"encode_seconds": time.time() - started, "words": int(starts[-1])}}
