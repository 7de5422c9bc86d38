"""The `token-embeddings` stage: one frozen source encoder's last-layer word vectors of a fixed
list of sentences (STS-B train and dev, then the evaluation suite's), computed once in the stage
store and read, memory-mapped, by the meta-embedding trials (trainables/methods/meta_embeddings/method.py),
which therefore never load a source encoder.

Key (trainables/stages/store.py `make_spec`): the source's id and weights fingerprint, the sentences'
checksums (STS-B files and the suite's sets) and the settings (sets, max length, batch size,
dtype), so every trial, and every later sweep with the same stage store, reads one copy.

Words (docs/methods/meta-embeddings.md M4, as the authors do): the last hidden state's token vectors whose character
offsets touch (end of one == start of the next) are averaged into one word, so subwords and
attached punctuation become one whitespace word; special tokens ([CLS], [SEP], <s>, </s>) and
padding have empty offsets and are dropped.

Files of a stage directory:
- `words.npy`  float16 [W, d]: every sentence's word vectors, one sentence after another;
- `starts.npy` int64 [n + 1]: sentence i's words are rows starts[i]:starts[i + 1].
Size: 2 d bytes per word plus 8 bytes per sentence, i.e. (words per sentence x d x 2 + 8) bytes
per sentence per source (STS sentences average about 10 words: ~7.7 KB at d = 384, ~15.4 KB at
d = 768). `load` memory-maps `words.npy` (numpy `mmap_mode="r"`): a trial copies only the rows a
batch slices, through the page cache, so a cache larger than the memory still works (pages are
read from disk as batches touch them and evicted under memory pressure; the cost is disk reads,
not an error); only `starts.npy` (8 bytes per sentence) is read into memory. Building the cache
is not streamed: `compute` holds every sentence's float32 word vectors and their fp16 copy, about
6 bytes per word per dimension (e.g. ~1.5 GB for 32,000 sentences of a 768-d source).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from trainables.stages.store import local_stage
from trainables.stages.upstream import STAGES, StageKind, encoding_result

WORDS_FILE, STARTS_FILE = "words.npy", "starts.npy"
BATCH_SIZE = 64


def merge_words(offsets, vectors: np.ndarray) -> np.ndarray:
    """One row per word: the mean of the rows of `vectors` (one per token) whose (start, end)
    character offsets touch; tokens with empty offsets (special tokens, padding) are dropped."""
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
        return np.zeros((0, vectors.shape[1]), dtype=np.float32)
    return np.stack([np.asarray(vectors[g], dtype=np.float32).mean(axis=0) for g in groups])


def stage_sentences(sets: list[str], data_dir, max_train_samples: int | None = None) -> list[str]:
    """The stage's sentences, in order: the first `max_train_samples` STS-B train pairs' (all by
    default) and STS-B dev's (unique), then the suite's not among them."""
    from trainables.data.stsb import load_stsb
    from trainables.evaluation.sets import load_suite

    splits = load_stsb(data_dir, ("train", "dev"))
    splits["train"] = splits["train"][:max_train_samples]
    pairs = [s for split in ("train", "dev") for e in splits[split] for s in (e.sentence1, e.sentence2)]
    return list(dict.fromkeys(pairs + load_suite(sets, data_dir).sentences))


def stage_spec(
    source: str, path, sets: list[str], max_train_samples: int | None, checksum: str, root, data_dir
) -> dict:
    """The stage of one source; `checksum`: the STS-B files' and the suite's (with the sets and
    `max_train_samples`, the sentences' identity)."""
    from transformers import AutoTokenizer

    from trainables.encoders.loading import load_config, max_tokens
    from trainables.evaluation.zero_shot import default_max_length
    from trainables.stages.store import make_spec

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    length = min(default_max_length(path, tokenizer), max_tokens(load_config(path), tokenizer))
    config = {
        "stage": "token-embeddings",
        "sets": list(sets),
        "max_train_samples": max_train_samples,
        "max_length": int(length),
        "batch_size": BATCH_SIZE,
        "dtype": "float16",
        "words": "offset-merged, specials dropped",
    }
    return make_spec("token-embeddings", source, path, root, data_dir, checksum, config)


def load(stage_dir) -> tuple[np.ndarray, np.ndarray]:
    """(words memory-mapped, starts in memory) of a finished stage (a folder, or a URI: `local_stage`)."""
    stage_dir = local_stage(stage_dir)
    return np.load(stage_dir / WORDS_FILE, mmap_mode="r"), np.load(stage_dir / STARTS_FILE)


def encode(
    model, tokenizer, sentences: list[str], max_length: int, batch_size: int, device, on_batch=None
) -> list[np.ndarray]:
    """Each sentence's merged word vectors (float32 [words, d]), in the order of `sentences`;
    batches run from the longest sentence to the shortest (less padding)."""
    import torch

    out: list[np.ndarray | None] = [None] * len(sentences)
    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
    model.eval()
    for begin in range(0, len(order), batch_size):
        rows = order[begin : begin + batch_size]
        encoded = tokenizer(
            [sentences[i] for i in rows],
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
            return_offsets_mapping=True,
        )
        offsets = encoded.pop("offset_mapping")
        mask = encoded["attention_mask"]
        offsets = (offsets * mask.unsqueeze(-1)).tolist()  # padding: empty offsets
        inputs = {"input_ids": encoded["input_ids"].to(device), "attention_mask": mask.to(device)}
        with torch.inference_mode():
            hidden = model(**inputs).last_hidden_state.float().cpu().numpy()
        for position, row in enumerate(rows):
            out[row] = merge_words(offsets[position], hidden[position])
        if on_batch is not None:
            on_batch()
    return out


def compute(spec: dict, out_dir: Path) -> dict:
    """Encode the stage's sentences with the source and write `words.npy` and `starts.npy`."""
    import torch
    from transformers import AutoTokenizer

    from trainables.encoders.loading import load_pretrained
    from trainables.stages.progress import StageProgress

    config = spec["config"]
    sentences = stage_sentences(config["sets"], spec["data_dir"], config["max_train_samples"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = load_pretrained(spec["model_path"]).to(device)
    tokenizer = AutoTokenizer.from_pretrained(spec["model_path"])
    started = time.time()
    progress = StageProgress(spec, math.ceil(len(sentences) / config["batch_size"]))
    words = encode(model, tokenizer, sentences, config["max_length"], config["batch_size"], device, progress.step)
    progress.finish()
    return encoding_result(len(sentences), device, started, **save(out_dir, words))


def save(out_dir, words: list[np.ndarray]) -> dict:
    """Write sentences' word vectors as a stage's `words.npy` (fp16) and `starts.npy`; their sizes."""
    starts = np.concatenate([[0], np.cumsum([len(w) for w in words])]).astype(np.int64)
    matrix = np.concatenate(words).astype(np.float16)
    np.save(Path(out_dir) / WORDS_FILE, matrix)
    np.save(Path(out_dir) / STARTS_FILE, starts)
    size = (Path(out_dir) / WORDS_FILE).stat().st_size + (Path(out_dir) / STARTS_FILE).stat().st_size
    return {
        "words": int(starts[-1]),
        "dim": int(matrix.shape[1]),
        "cache_bytes": size,
        "bytes_per_sentence": size / len(words),
    }


@STAGES.register("token-embeddings")
class TokenEmbeddingsStage(StageKind):
    downstream, task = "meta-embeddings", "source-encoding"
    compute = staticmethod(compute)
    recorded = {"sets": "sets", "max_length": "max_length", "max_train_samples": "max_train_samples"}
