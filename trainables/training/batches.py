"""Token-id batches: pad on the fly, optionally group pairs of similar length.

Datasets arrive tokenised once per model and sweep (lists of token-id lists, no padding); a
trial only pads. Length grouping (an option recorded in the run's params) keeps the epoch random:
the shuffled pairs are cut into groups of GROUP_BATCHES batches, each group is sorted by length and
cut into batches, and the batches are shuffled. Padding drops (pairs in a batch are neighbours in
length among a few batches' worth) while every batch still comes from a random slice of the data,
and short and long batches alternate at random through the epoch. (transformers'
`LengthGroupedSampler` runs each of its mega-batches, a quarter of a small epoch, from long to short
batches: a sawtooth order that cost accuracy on small training sets.) Evaluation always sorts by length: the
order cannot change the scores.
"""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import pad_sequence


def pad(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest sequence; return (input_ids, attention_mask)."""
    ids = pad_sequence([torch.tensor(s, dtype=torch.long) for s in sequences], batch_first=True, padding_value=pad_id)
    mask = pad_sequence([torch.ones(len(s), dtype=torch.long) for s in sequences], batch_first=True, padding_value=0)
    return ids, mask


GROUP_BATCHES = 4  # batches per length group


def train_batches(
    lengths: list[int], batch_size: int, generator: torch.Generator, length_grouped: bool
) -> list[list[int]]:
    """Index batches for one epoch: shuffled, or length-grouped (see the module docstring)."""
    order = torch.randperm(len(lengths), generator=generator).tolist()
    if not length_grouped:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    group = batch_size * GROUP_BATCHES
    batches = []
    for start in range(0, len(order), group):
        members = sorted(order[start : start + group], key=lambda i: -lengths[i])
        batches += [members[i : i + batch_size] for i in range(0, len(members), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def eval_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
