"""What makes a sweep faster without changing its results: the costliest trials start first, and
length grouping that keeps the epoch random."""
import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from mlflow_helpers import runs_by_role
from sweeps.electra_layers import main
from trainables.batches import train_batches


def _lengths(n=1600, seed=0):
    return np.random.default_rng(seed).integers(6, 80, size=n).tolist()


def _padded_tokens(batches, lengths):
    return sum(len(b) * max(lengths[i] for i in b) for b in batches)


def test_length_grouping_pads_less_and_keeps_the_epoch_random():
    lengths, batch = _lengths(), 32
    grouped = train_batches(lengths, batch, torch.Generator().manual_seed(1), length_grouped=True)
    plain = train_batches(lengths, batch, torch.Generator().manual_seed(1), length_grouped=False)
    assert sorted(i for b in grouped for i in b) == list(range(len(lengths)))
    assert sum(len(b) < batch for b in grouped) <= 1
    assert _padded_tokens(grouped, lengths) < 0.8 * _padded_tokens(plain, lengths)
    # batches alternate short and long at random: no trend from short to long through the epoch
    longest = [max(lengths[i] for i in b) for b in grouped]
    assert abs(spearmanr(range(len(longest)), longest).statistic) < 0.2
    # transformers' sampler runs each mega-batch (a quarter of this epoch) from long to short
    from transformers.trainer_pt_utils import LengthGroupedSampler

    order = list(LengthGroupedSampler(batch, lengths=lengths, generator=torch.Generator().manual_seed(1)))
    theirs = [max(lengths[i] for i in order[k:k + batch]) for k in range(0, len(order), batch)]
    assert sum(a >= b for a, b in zip(theirs, theirs[1:])) > 0.8 * len(theirs)
    assert sum(a >= b for a, b in zip(longest, longest[1:])) < 0.7 * len(longest)
    for b in grouped:  # sorted inside
        assert [lengths[i] for i in b] == sorted((lengths[i] for i in b), reverse=True)


def test_the_epochs_differ_and_a_seed_repeats_its_epoch():
    lengths = _lengths(200)
    one = train_batches(lengths, 16, torch.Generator().manual_seed(3), True)
    again = train_batches(lengths, 16, torch.Generator().manual_seed(3), True)
    other = train_batches(lengths, 16, torch.Generator().manual_seed(4), True)
    assert one == again and one != other


def test_the_costliest_trials_start_first(sweep_env, tiny_models):
    argv = ["--models", tiny_models["bert"], "--layers", "0,1,2", "--seeds", "0", "--epochs", "1", "--max-concurrent", "1",
            *sweep_env["flags"], "--name", "ordered"]
    assert main(argv) == 0
    _, children = runs_by_role(sweep_env["uri"])
    started = sorted(children, key=lambda c: c.info.start_time)
    assert [c.data.params["layer"] for c in started] == ["2", "1", "0"]
