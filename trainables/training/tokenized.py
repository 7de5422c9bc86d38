"""Datasets tokenised once per (model, task) per sweep, in the driver, and shipped to trials
through Ray's object store (`tune.with_parameters`): a trial only pads and batches.

A `TokenizedTask` holds, for each split, the token ids of both sentences of every pair (no
padding) and the labels (the task's `label`: a score, a 0/1 label or a class index; see
trainables/training/pair_tasks.py), plus the tokenizer's pad id and the data files' checksums.

Tokenised splits are cached on disk across sweeps (`tokenized_cache_dir()`: $EMBSWEEP_CACHE_DIR
or ~/.cache/embsweep/tokenized, one JSON file of about 1.6 MB per model and task for STS-B), keyed
by the task, the pairs themselves (text and label, after subsetting), the tokenizer's files, the
model's position limit and the transformers version: a changed file, subset or release tokenises
again. A cache file that cannot be read is replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainables.encoders.loading import load_config, max_tokens
from trainables.training.pair_tasks import get_task


@dataclass
class TokenizedPairs:
    s1: list[list[int]]
    s2: list[list[int]]
    labels: list[float]

    def __len__(self) -> int:
        return len(self.labels)

    def pair_lengths(self) -> list[int]:
        return [len(a) + len(b) for a, b in zip(self.s1, self.s2)]


@dataclass
class TokenizedTask:
    task: str
    model_path: str
    pad_id: int
    splits: dict[str, TokenizedPairs]
    checksums: dict[str, str] = field(default_factory=dict)


def load_task(task: str, data_dir):
    """Raw examples {split: [pair example]} and data checksums for a task name (trainables/training/pair_tasks.py)."""
    return get_task(task).load(data_dir)


def subset(examples: list, max_samples: int | None) -> list:
    """A deterministic subset (seed 0, independent of the trial seed), in the original order."""
    if max_samples is None or max_samples >= len(examples):
        return examples
    keep = np.sort(np.random.default_rng(0).permutation(len(examples))[:max_samples])
    return [examples[i] for i in keep]


def tokenize_task(
    task: str, model_path, examples: dict, checksums: dict, max_train_samples: int | None = None
) -> TokenizedTask:
    """The task's pairs tokenised by `model_path`'s tokenizer (from the cache when there)."""
    label = get_task(task).label
    rows = {split: subset(pairs, max_train_samples) if split == "train" else pairs for split, pairs in examples.items()}
    path = tokenized_cache_dir() / f"{_cache_key(task, model_path, rows, label)}.json"
    cached = _read_cache(path)
    if cached is not None:
        pad_id, splits = cached
        return TokenizedTask(task, str(model_path), pad_id, splits, dict(checksums))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    limit = max_tokens(load_config(model_path), tokenizer)
    encode = lambda texts: tokenizer(texts, truncation=True, max_length=limit, add_special_tokens=True)["input_ids"]
    splits = {
        split: TokenizedPairs(
            s1=encode([r.sentence1 for r in pairs]),
            s2=encode([r.sentence2 for r in pairs]),
            labels=[label(r) for r in pairs],
        )
        for split, pairs in rows.items()
    }
    pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    _write_cache(path, pad_id, splits)
    return TokenizedTask(task, str(model_path), pad_id, splits, dict(checksums))


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spm.model",
    "sentencepiece.bpe.model",
    "added_tokens.json",
    "config.json",
)


def tokenized_cache_dir() -> Path:
    return Path(os.environ.get("EMBSWEEP_CACHE_DIR") or "~/.cache/embsweep").expanduser() / "tokenized"


def _cache_key(task: str, model_path, rows: dict, label) -> str:
    import transformers

    digest = hashlib.sha256(f"{task}\n{transformers.__version__}\n".encode())
    folder = Path(str(model_path))
    for name in TOKENIZER_FILES:
        if (folder / name).is_file():
            digest.update(name.encode() + b"\0" + hashlib.sha256((folder / name).read_bytes()).digest())
    for split in sorted(rows):
        digest.update(f"[{split}]".encode())
        for row in rows[split]:
            digest.update(f"{row.sentence1}\t{row.sentence2}\t{label(row)!r}\n".encode())
    return digest.hexdigest()[:32]


def _read_cache(path: Path):
    try:
        stored = json.loads(path.read_text())
        return int(stored["pad_id"]), {split: TokenizedPairs(*columns) for split, columns in stored["splits"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cache(path: Path, pad_id: int, splits: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(
            json.dumps({"pad_id": pad_id, "splits": {split: [p.s1, p.s2, p.labels] for split, p in splits.items()}})
        )
        os.replace(tmp, path)
    except OSError:  # a read-only home: tokenise again next time
        pass
