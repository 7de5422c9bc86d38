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

`--best-dtype float16` (default) stores the finished trial's best-dev weights in half precision:
half the disk, and every loader (transformers, sentence-transformers) reads them back as float32,
as the folder's config says. The trial's own scores come from its float32 weights before they are
stored; what a later evaluation of the folder gives differs by the rounding of the weights
(measured on the tests' models: well under 0.05 Spearman). `float32` keeps them as trained.
"""

from __future__ import annotations

from pathlib import Path

KEEP_CHECKPOINTS = ("best", "last", "all", "none")
DEFAULT = "best"
LEGACY = "last"  # trials planned before the flag existed kept their last whole checkpoint
BEST_DTYPES = ("float16", "float32")
DEFAULT_BEST_DTYPE = "float16"
LEGACY_BEST_DTYPE = "float32"


def keeps_best(keep: str) -> bool:
    return keep != "none"


def keeps_training_state(keep: str) -> bool:
    return keep in ("last", "all")


def checkpoints_to_keep(keep: str) -> int | None:
    """How many checkpoints a trial keeps: every one for `all` (None), else its latest (the engine's
    KeepLatest, sweeps/engine/checkpoint_keeping.py, not Tune's `num_to_keep`)."""
    return None if keep == "all" else 1


def kept_bytes(keep: str, weight_bytes: float, epochs: int = 1, best_dtype: str = DEFAULT_BEST_DTYPE) -> float:
    """Disk a finished trial leaves, for a model of `weight_bytes` (fp32 weights): the best-dev
    folder (half of it in float16), plus the last weights and Adam's two moments for `last`, for
    each epoch for `all`."""
    if keep == "none":
        return 0.0
    best = weight_bytes * (0.5 if best_dtype == "float16" else 1.0)
    earlier = 4 * (max(1, epochs) - 1)  # `all`: every earlier epoch's whole checkpoint, its best/ in float32
    return best + weight_bytes * {"best": 0, "last": 3, "all": 3 + earlier}[keep]


def store_half(folder: Path) -> None:
    """Rewrite the float32 tensors of every safetensors file under `folder` in float16 (each file
    replaced whole, so a reader never sees half a file; a hard link to another folder is left alone)."""
    import os

    import torch
    from safetensors.torch import load_file, save_file

    for path in sorted(Path(folder).rglob("*.safetensors")):
        tensors = load_file(str(path))
        if not any(t.dtype == torch.float32 for t in tensors.values()):
            continue
        half = {k: t.half() if t.dtype == torch.float32 else t for k, t in tensors.items()}
        tmp = path.with_name(f".{path.name}.tmp")
        save_file(half, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, path)


def running_bytes(weight_bytes: float) -> float:
    """Disk a running trial's checkpoints take at most: last weights, optimiser state and best-dev
    folder, twice while Tune writes the next checkpoint before deleting the previous one."""
    return 2 * 4 * weight_bytes
