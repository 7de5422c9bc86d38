"""Tiny randomly initialised encoders built from configuration classes, for tests and
`--smoke-test` runs on machines without a model hub.

`build_tiny_model(kind, directory)` writes a Hugging Face model folder (config, weights and a
WordPiece tokenizer whose vocabulary comes from STS-B-like English) that loads offline with
`AutoModel` / `AutoTokenizer` like any hub checkpoint.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
KINDS = ("bert", "electra-discriminator", "electra-generator", "mpnet", "deberta-v2")

_BASE_WORDS = (
    "a the man woman is are was on in of and to with playing dog cat guitar person people "
    "two three girl boy car street water running riding eating sitting standing"
).split()

# DeBERTa-v3's architecture (DebertaV2Config arguments besides the sizes and position buckets): relative
# attention, no absolute positions.
DEBERTA_V3 = dict(
    type_vocab_size=0,
    relative_attention=True,
    position_biased_input=False,
    pos_att_type=["p2c", "c2p"],
    max_relative_positions=-1,
    norm_rel_ebd="layer_norm",
    share_att_key=True,
)


def _vocabulary(sentences=(), size: int = 600) -> list[str]:
    counts = Counter(w for s in sentences for w in re.findall(r"[a-z]+", s.lower()))
    words = [w for w, _ in counts.most_common(size)] or []
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,'!?-\"():;")
    pieces = ["##" + c for c in chars]
    seen, vocab = set(), []
    for token in SPECIAL + chars + pieces + _BASE_WORDS + words:
        if token not in seen:
            seen.add(token)
            vocab.append(token)
    return vocab


def _config(kind: str, vocab_size: int, layers: int, hidden: int):
    from transformers import BertConfig, DebertaV2Config, ElectraConfig, MPNetConfig

    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=128,
        pad_token_id=0,
    )
    if kind == "bert":
        return BertConfig(**common)
    if kind == "electra-discriminator":
        return ElectraConfig(embedding_size=hidden // 2, **common)
    if kind == "electra-generator":
        # ELECTRA generators are narrower than their embeddings (electra-base-generator: 256 vs 768).
        return ElectraConfig(
            **{**common, "hidden_size": hidden // 2, "intermediate_size": hidden}, embedding_size=hidden
        )
    if kind == "mpnet":
        return MPNetConfig(**common)
    if kind == "deberta-v2":
        return DebertaV2Config(**common, **DEBERTA_V3, position_buckets=16)
    raise ValueError(f"unknown tiny model kind {kind!r}; choose from {KINDS}")


def build_tiny_model(
    kind: str, directory, layers: int = 4, hidden: int = 32, sentences=(), seed: int = 0, words: int = 600
) -> Path:
    """Write a tiny random `kind` model folder (config, weights, tokenizer) and return its path; its
    vocabulary is the `words` most frequent words of `sentences` plus characters and word pieces."""
    import torch
    from transformers import AutoModel, BertTokenizerFast

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = _vocabulary(sentences, words)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    # transformers 5 takes the vocabulary as `vocab` (a `vocab_file` argument is silently ignored).
    # 126 tokens: MPNet/RoBERTa-style positions start at pad id + 1 = 1 (max_position_embeddings 128).
    tokenizer = BertTokenizerFast(vocab=str(directory / "vocab.txt"), do_lower_case=True, model_max_length=126)
    tokenizer.save_pretrained(str(directory))
    torch.manual_seed(seed)
    model = AutoModel.from_config(_config(kind, len(vocab), layers, hidden))
    model.save_pretrained(str(directory))
    return directory


def smoke_models_dir(storage_path: str) -> Path:
    """`<storage path>/_smoke_models`, or the system temp dir's when the storage path is a URI."""
    import tempfile

    return Path(tempfile.gettempdir() if "://" in str(storage_path) else storage_path, "_smoke_models")


def smoke_model(storage_path: str, data_dir) -> Path:
    """The tiny BERT of `--smoke-test` runs, built once beside the storage path (or in the system
    temp dir when the storage path is a URI), its vocabulary from STS-B training sentences."""
    from trainables.data.stsb import load_stsb

    target = smoke_models_dir(storage_path) / "tiny-bert"
    if not (target / "config.json").is_file():
        sentences = [e.sentence1 for e in load_stsb(data_dir)["train"][:2000]]
        build_tiny_model("bert", target, layers=4, hidden=32, sentences=sentences)
    return target
