"""What a finished trial's checkpoint keeps (`--keep-checkpoints`, recorded in every run).

While a trial runs, every checkpoint is whole (weights, optimiser state, best-dev folder), so a
retried or resumed trial continues from its last epoch. Once its last epoch is done:

- `best` (default): the best-dev model folder `best/` only: what evaluation (`runs:/` references),
  CKA and SED's teachers read;
- `last`: the last epoch's whole checkpoint as well (weights and optimiser state), e.g. to train on;
- `all`: as `last`, and Tune keeps every epoch's checkpoint, not only the latest;
- `none`: no weights at all (the scores are in MLflow).

Every kind keeps `trial.json` and a small `state.pt` (the epoch, the best-dev bookkeeping and the
last result), so a finished trial restored by `--resume` reports its result instead of training on.
"""

from __future__ import annotations

KEEP_CHECKPOINTS = ("best", "last", "all", "none")
DEFAULT = "best"
LEGACY = "last"  # trials planned before the flag existed kept their last whole checkpoint


def keeps_best(keep: str) -> bool:
    return keep != "none"


def keeps_training_state(keep: str) -> bool:
    return keep in ("last", "all")


def checkpoints_to_keep(keep: str) -> int | None:
    """Tune's `CheckpointConfig.num_to_keep`: every checkpoint for `all`, else the latest."""
    return None if keep == "all" else 1


def kept_bytes(keep: str, weight_bytes: float, epochs: int = 1) -> float:
    """Disk a finished trial leaves, for a model of `weight_bytes` (fp32 weights): the best-dev
    folder, plus the last weights and Adam's two moments for `last`, for each epoch for `all`."""
    if keep == "none":
        return 0.0
    return weight_bytes * {"best": 1, "last": 4, "all": 4 * max(1, epochs)}[keep]


def running_bytes(weight_bytes: float) -> float:
    """Disk a running trial's checkpoints take at most: last weights, optimiser state and best-dev
    folder, twice while Tune writes the next checkpoint before deleting the previous one."""
    return 2 * 4 * weight_bytes
