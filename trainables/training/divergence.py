"""The one divergence check of every training run, without Ray: every trial after each epoch
(`EpochTrainable._step`, trainables/training/trainable.py) and the upstream stages that train
(`ws`, `tsdae`). A non-finite mean loss, or non-finite weights, end the run with a `TrialFailure`:
a retry would diverge the same way."""

from __future__ import annotations

import math

import torch

from trainables.core.errors import TrialFailure


def weights_finite(parameters) -> bool:
    """Whether every parameter is finite (one device synchronisation for all of them)."""
    checks = [torch.isfinite(p.detach()).all() for p in parameters]
    return bool(torch.stack(checks).all()) if checks else True


def check_converging(epoch: int, loss, parameters=(), lr=None, hint: str = "lower --lr or check the data") -> None:
    """Raise `TrialFailure` when the mean training loss of `epoch` is not finite (a NaN if any step's
    loss was), or when one of `parameters` (the trained weights) is not."""
    at = f" (lr {lr:g})" if isinstance(lr, (int, float)) else ""
    if not math.isfinite(float(loss)):
        raise TrialFailure(f"training diverged: the mean loss of epoch {epoch} is {loss}{at}; {hint}")
    if not weights_finite(parameters):
        raise TrialFailure(f"training diverged: the weights are not finite after epoch {epoch}{at}; {hint}")
