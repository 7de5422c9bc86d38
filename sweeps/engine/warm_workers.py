"""Trial actors that start on Ray's prestarted workers, with the trial's libraries already imported.

A local Ray starts one idle Python worker per CPU as it comes up, and its raylet can have each worker
import modules before it is used (Ray's `preload_python_modules` setting, read from
`RAY_preload_python_modules` in the environment Ray's processes start with). So torch, transformers and
the method's trainable module load in those workers while the driver still creates the sweep's store,
parent run and Tune experiment, instead of in a new worker after Tune asks for the first trial (about
ten seconds of the default job's start-up).

Ray hands an idle worker to an actor only when both have the same runtime environment. A sweep's
settings for its trial processes (`QUIET_ENV`, `CUDA_ALLOCATOR_ENV`) therefore reach a local Ray's
processes through the environment they inherit, not a job `runtime_env`, and the variables Ray Tune
adds to every trial actor's runtime environment (`ray.tune.execution.class_cache.DEFAULT_ENV_VARS`)
move to the job's environment as well (`tune_trial_env`). A sweep that joins a cluster (`--address`)
keeps its job `runtime_env`: that cluster's nodes were started without the sweep's environment.

Each idle worker holds the libraries' memory (a few hundred MB) until Ray stops at the sweep's end. A
worker preloads before Ray gives it its GPUs (`CUDA_VISIBLE_DEVICES`), so no method's module may start CUDA
when it is imported (tests/test_warm_workers.py checks every method's).
"""

from __future__ import annotations

import contextlib
import math
import os

PRELOAD_ENV = "RAY_preload_python_modules"
_tune_defaults: dict | None = None


def tune_trial_env() -> dict:
    """Ray Tune's own variables for every trial actor, taken off the actors' runtime environment (once;
    the same dict on every call) so that the caller sets them for the whole job instead."""
    global _tune_defaults
    from ray.tune.execution import class_cache

    if _tune_defaults is None:
        _tune_defaults = dict(class_cache.DEFAULT_ENV_VARS)
        class_cache.DEFAULT_ENV_VARS = {}
    return dict(_tune_defaults)


def trainable_module(plan) -> str | None:
    """The module of the class the sweep's trials run (None for a method without trials)."""
    if plan.args.get("simulate"):
        return "sweeps.engine.simulated_trial"  # imports no torch
    trainable = getattr(plan.method_cls, "trainable", None)
    return trainable.__module__ if trainable is not None else None


def preload(plan) -> dict:
    """The variable that makes a local Ray's workers import the sweep's trainable module (and what it
    imports: torch, transformers, the project's training code) as they start; and `OMP_NUM_THREADS` (unless
    set already) at a trial's CPUs, what Ray sets in a worker when it gives it an actor: OpenMP and the BLAS
    libraries size their thread pools when they load, which is now before that (measured: 2 threads each
    on a 2-CPU machine instead of 1, and trials 2 to 8% slower)."""
    module = trainable_module(plan)
    if not module:
        return {}
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, math.floor(float(plan.resources["cpu"]))))
    return {PRELOAD_ENV: module, "OMP_NUM_THREADS": threads}


@contextlib.contextmanager
def environment(variables: dict):
    """`variables` set in this process's environment for the block (e.g. while `ray.init` starts the local
    Ray's processes, which inherit them), then restored as they were."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
