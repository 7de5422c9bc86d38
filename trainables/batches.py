"""Token-id batches: pad on the fly, optionally group pairs of similar length.

Datasets arrive tokenised once per model and sweep (lists of token-id lists, no padding); a
trial only pads. Length grouping uses transformers' `LengthGroupedSampler` (random mega-batches,
sorted inside), which cuts padding a lot on short-sentence data; it is an option recorded in the
run's params. Evaluation always sorts by length: the order cannot change the scores.
"""
from __future__ import annotations

import torch
from torch.nn.utils.rnn import pad_sequence


def pad(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest sequence; return (input_ids, attention_mask)."""
    ids = pad_sequence([torch.tensor(s, dtype=torch.long) for s in sequences], batch_first=True, padding_value=pad_id)
    mask = pad_sequence([torch.ones(len(s), dtype=torch.long) for s in sequences], batch_first=True, padding_value=0)
    return ids, mask


def train_batches(lengths: list[int], batch_size: int, generator: torch.Generator, length_grouped: bool) -> list[list[int]]:
    """Index batches for one epoch: shuffled, or length-grouped (transformers' sampler)."""
    if length_grouped:
        from transformers.trainer_pt_utils import LengthGroupedSampler

        order = list(LengthGroupedSampler(batch_size, lengths=lengths, generator=generator))
    else:
        order = torch.randperm(len(lengths), generator=generator).tolist()
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def eval_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
