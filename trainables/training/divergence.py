"""The one divergence check of every training run, without Ray: every trial after each epoch
(`EpochTrainable._step`, trainables/training/trainable.py) and the upstream stages that train
(`ws`, `tsdae`). A non-finite mean loss, or non-finite weights, end the run with a `TrialFailure`:
a retry would diverge the same way. A method whose steps already read their loss back (meta-embeddings)
checks each step's too (`check_step`), so a diverged trial ends at that step, not after its epoch."""

from __future__ import annotations

import math

import torch

from trainables.core.errors import TrialFailure


def weights_finite(parameters) -> bool:
    """Whether every parameter is finite (one device synchronisation for all of them)."""
    checks = [torch.isfinite(p.detach()).all() for p in parameters]
    return bool(torch.stack(checks).all()) if checks else True


# The settings a diverging run can owe it to, with the value above which each is suspect first.
CAUSES = {"lr": 1e-3, "weight_decay": 1.0, "warmup_ratio": 1.0}


def _cause(settings: dict | None, lr=None, hint: str = "") -> tuple[str, str]:
    """(the run's suspect settings as flags, e.g. ` (--lr 0.01, --weight-decay 1e+20)`; what to do), the most
    suspect setting named first (`settings`: name -> value of the run, of `CAUSES`; else `lr`)."""
    settings = {k: v for k, v in (settings or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if not settings and isinstance(lr, (int, float)):
        settings = {"lr": lr}
    at = ", ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in settings.items())
    at = f" ({at})" if at else ""
    if not hint:
        suspect = sorted(settings, key=lambda k: -abs(settings[k]) / CAUSES.get(k, math.inf))  # the most suspect first
        flags = [f"--{k.replace('_', '-')}" for k in suspect if k in ("lr", "weight_decay")] or ["--lr"]
        hint = f"lower {' or '.join(flags)}, or check the data"
    return at, hint


def check_converging(epoch: int, loss, parameters=(), lr=None, hint: str = "", settings: dict | None = None) -> None:
    """Raise `TrialFailure` when the mean training loss of `epoch` is not finite (a NaN if any step's
    loss was), or when one of `parameters` (the trained weights) is not. The message names the settings
    that can cause it (`settings`: name -> value of the run, of `CAUSES`; else `lr`), a suspect one first."""
    at, hint = _cause(settings, lr, hint)
    if not math.isfinite(float(loss)):
        raise TrialFailure(f"training diverged: the mean loss of epoch {epoch} is {loss}{at}; {hint}")
    if not weights_finite(parameters):
        raise TrialFailure(f"training diverged: the weights are not finite after epoch {epoch}{at}; {hint}")


def check_step(epoch: int, step: int, loss: float, settings: dict | None = None) -> None:
    """Raise `TrialFailure` when the loss of one step (`step`, from 1, of `epoch`) is not finite, before the
    optimiser takes it: the trial ends there, naming the settings that can cause it as `check_converging` does."""
    if not math.isfinite(loss):
        at, hint = _cause(settings)
        raise TrialFailure(f"training diverged: the loss of step {step} of epoch {epoch} is {loss}{at}; {hint}")
