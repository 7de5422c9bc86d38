"""How many trials share a GPU (`--gpus-per-trial auto`), and what a sweep will cost.

Each method declares a `TrialCost` per trial (trainables/core/method.py: GPU memory in bytes and
seconds on a whole GPU, from its own cost model; the encoder one is trainables/encoders/cost.py).
The rule:

    trials per GPU = min(--max-trials-per-gpu (4), floor(0.9 x GPU memory / trial memory)), at least 1
    gpus per trial = 1 / trials per GPU

so small trials pack up to 4 per GPU and large ones get a GPU each. GPU memory is not isolated
between fractional trials: the 0.9 margin and the cap are what keep them apart. A sweep's
GPU-hours charge each trial its GPU share for its estimated duration.
"""

from __future__ import annotations

import math

GIB = 1024**3


def trials_per_gpu(memory_bytes: float, gpu_memory_gb: float = 24.0, cap: int = 4) -> int:
    fits = math.floor(0.9 * gpu_memory_gb * GIB / memory_bytes)
    return max(1, min(cap, fits))


def gpus_per_trial(memory_bytes: float, gpu_memory_gb: float = 24.0, cap: int = 4) -> float:
    return 1.0 / trials_per_gpu(memory_bytes, gpu_memory_gb, cap)
