"""Token-id batches: pad on the fly, optionally group pairs of similar length.

Datasets arrive tokenised once per model and sweep (lists of token-id lists, no padding); a
trial only pads. Length grouping (an option recorded in the run's params) keeps the epoch random:
the shuffled pairs are cut into groups of GROUP_BATCHES batches, each group is sorted by length and
cut into batches, and the batches are shuffled. Padding drops (pairs in a batch are neighbours in
length among a few batches' worth) while every batch still comes from a random slice of the data,
and short and long batches alternate at random through the epoch. (transformers'
`LengthGroupedSampler` runs each of its mega-batches, a quarter of a small epoch, from long to short
batches: a sawtooth order that cost accuracy on small training sets.)

Padding can also be cut without touching the batches: `forward_chunks` splits one batch's
sentences, sorted by length, into chunks encoded one after another; each chunk pads only to its own
longest sentence, and the loss and its gradient are those of the whole batch (mean pooling ignores
padding). This is the default on the CPU, where compute grows with padded tokens; on a GPU a
small model's step is bound by kernel launches, which chunks multiply, so there the batch is
encoded whole. Evaluation encodes each distinct sentence once, in the same length-sorted chunks
(trainables/training/pair_training.py): the order cannot change the scores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def pad(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest sequence; return (input_ids, attention_mask)."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    ids = pad_sequence([torch.tensor(s, dtype=torch.long) for s in sequences], batch_first=True, padding_value=pad_id)
    mask = pad_sequence([torch.ones(len(s), dtype=torch.long) for s in sequences], batch_first=True, padding_value=0)
    return ids, mask


GROUP_BATCHES = 4  # batches per length group


def train_batches(
    lengths: list[int], batch_size: int, generator: torch.Generator, length_grouped: bool
) -> list[list[int]]:
    """Index batches for one epoch: shuffled, or length-grouped (see the module docstring)."""
    import torch

    order = torch.randperm(len(lengths), generator=generator).tolist()
    if not length_grouped:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    group = batch_size * GROUP_BATCHES
    batches = []
    for start in range(0, len(order), group):
        members = sorted(order[start : start + group], key=lambda i: -lengths[i])
        batches += [members[i : i + batch_size] for i in range(0, len(members), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


CPU_FORWARD_CHUNK = 16  # sentences per chunk on the CPU: 2x fewer padded tokens than 64 at once on STS-B


def resolve_forward_chunk(value, device) -> int:
    """Sentences per forward chunk: an int (0 = the whole batch), or "auto" (CPU_FORWARD_CHUNK on the
    CPU, the whole batch on an accelerator)."""
    if value == "auto":
        return CPU_FORWARD_CHUNK if str(device).startswith("cpu") else 0
    chunk = int(value)
    if chunk < 0:
        raise ValueError(f"forward_chunk must be 'auto' or a whole number >= 0 (0 = whole batch), got {value!r}")
    return chunk


def forward_chunks(lengths: list[int], chunk: int) -> list[list[int]]:
    """Indices of one batch's sentences in the chunks to encode: sorted by length, `chunk` at a time
    (0, or a batch no larger than `chunk`: the whole batch in its own order)."""
    if chunk <= 0 or len(lengths) <= chunk:
        return [list(range(len(lengths)))]
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[i : i + chunk] for i in range(0, len(order), chunk)]
