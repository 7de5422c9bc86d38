"""Datasets tokenised once per (model, task) per sweep, in the driver, and shipped to trials
through Ray's object store (`tune.with_parameters`): a trial only pads and batches.

A `TokenizedTask` holds, for each split, the token ids of both sentences of every pair (no
padding) and the labels (the task's `label`: a score, a 0/1 label or a class index; see
trainables/tasks.py), plus the tokenizer's pad id and the data files' checksums.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trainables.encoders import load_config, max_tokens
from trainables.tasks import get_task



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
    """Raw examples {split: [pair example]} and data checksums for a task name (trainables/tasks.py)."""
    return get_task(task).load(data_dir)


def subset(examples: list, max_samples: int | None) -> list:
    """A deterministic subset (seed 0, independent of the trial seed), in the original order."""
    if max_samples is None or max_samples >= len(examples):
        return examples
    keep = np.sort(np.random.default_rng(0).permutation(len(examples))[:max_samples])
    return [examples[i] for i in keep]


def tokenize_task(task: str, model_path, examples: dict, checksums: dict, max_train_samples: int | None = None) -> TokenizedTask:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    limit = max_tokens(load_config(model_path), tokenizer)
    label = get_task(task).label
    splits = {}
    for split, rows in examples.items():
        if split == "train":
            rows = subset(rows, max_train_samples)
        encode = lambda texts: tokenizer(texts, truncation=True, max_length=limit, add_special_tokens=True)["input_ids"]
        splits[split] = TokenizedPairs(
            s1=encode([r.sentence1 for r in rows]),
            s2=encode([r.sentence2 for r in rows]),
            labels=[label(r) for r in rows],
        )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return TokenizedTask(task, str(model_path), int(pad_id), splits, dict(checksums))
