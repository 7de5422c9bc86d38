"""Trial actors start on a local Ray's prestarted workers with the trial's libraries already imported
(sweeps/engine/warm_workers.py): the settings reach Ray's processes through their environment, not a job
runtime_env, and the raylet preloads the sweep's trainable module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from sweeps.engine import ray_start, warm_workers
from trainables.encoders.cost import CUDA_ALLOCATOR_ENV

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tune_defaults(monkeypatch):
    """Tune's per-actor variables as shipped, restored after the test."""
    from ray.tune.execution import class_cache

    monkeypatch.setattr(class_cache, "DEFAULT_ENV_VARS", {"PL_DISABLE_FORK": "1"})
    monkeypatch.setattr(warm_workers, "_tune_defaults", None)
    return class_cache


def _plan(**args):
    from trainables.methods.tmft.trainable import TMFTTrainable

    return SimpleNamespace(
        args=args, method_cls=SimpleNamespace(trainable=TMFTTrainable), resources={"cpu": 1.0}, ray_log=None
    )


def test_a_local_ray_gets_the_trial_settings_and_the_preload_through_its_environment(monkeypatch, tune_defaults):
    import ray

    seen = {}

    def init(**kwargs):
        seen.update(kwargs=kwargs, environ=dict(os.environ))

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray_start, "ray_logs_to_file", lambda: "ray.log")
    monkeypatch.delenv(warm_workers.PRELOAD_ENV, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    ray_start.init_ray(_plan())
    assert "runtime_env" not in seen["kwargs"]  # a job runtime_env would keep actors off the prestarted workers
    for name, value in {**ray_start.QUIET_ENV, **CUDA_ALLOCATOR_ENV, "PL_DISABLE_FORK": "1"}.items():
        assert seen["environ"][name] == value, name
    assert seen["environ"][warm_workers.PRELOAD_ENV] == "trainables.methods.tmft.trainable"
    assert seen["environ"]["OMP_NUM_THREADS"] == "1"  # a trial's CPUs, before the preload sizes thread pools
    assert warm_workers.PRELOAD_ENV not in os.environ  # only while Ray's processes started
    assert tune_defaults.DEFAULT_ENV_VARS == {}  # Tune's trial actors now ask for the job's own environment


def test_a_sweep_joining_a_cluster_keeps_its_runtime_env(monkeypatch, tune_defaults):
    import ray

    seen = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setattr(ray_start, "ray_logs_to_file", lambda: "ray.log")
    ray_start.init_ray(_plan(address="ray://head:10001"))
    assert seen["runtime_env"]["env_vars"] == {**ray_start.QUIET_ENV, **CUDA_ALLOCATOR_ENV, "PL_DISABLE_FORK": "1"}


def test_tune_defaults_move_once(tune_defaults):
    assert warm_workers.tune_trial_env() == {"PL_DISABLE_FORK": "1"}
    assert warm_workers.tune_trial_env() == {"PL_DISABLE_FORK": "1"}  # the same on a second sweep in one process
    assert tune_defaults.DEFAULT_ENV_VARS == {}


def test_the_preloaded_module_is_the_trainable_the_trials_run():
    assert warm_workers.trainable_module(_plan()) == "trainables.methods.tmft.trainable"
    assert warm_workers.trainable_module(_plan(simulate=True)) == "sweeps.engine.simulated_trial"
    assert warm_workers.preload(SimpleNamespace(args={}, method_cls=SimpleNamespace(trainable=None))) == {}


def test_a_preloading_worker_gets_a_trials_threads_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    plan = _plan()
    plan.resources = {"cpu": 2.5}
    assert warm_workers.preload(plan)["OMP_NUM_THREADS"] == "2"  # Ray's rule: the floor, at least 1
    plan.resources = {"cpu": 0.5}
    assert warm_workers.preload(plan)["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert warm_workers.preload(plan)["OMP_NUM_THREADS"] == "3"


def test_environment_restores_what_was_there(monkeypatch):
    monkeypatch.setenv("EMBSWEEP_WARM_A", "old")
    monkeypatch.delenv("EMBSWEEP_WARM_B", raising=False)
    with warm_workers.environment({"EMBSWEEP_WARM_A": "new", "EMBSWEEP_WARM_B": "set"}):
        assert (os.environ["EMBSWEEP_WARM_A"], os.environ["EMBSWEEP_WARM_B"]) == ("new", "set")
    assert os.environ["EMBSWEEP_WARM_A"] == "old" and "EMBSWEEP_WARM_B" not in os.environ


PROBE = """
import os, time
import numpy, torch  # noqa: F401  (their thread pools, sized at load)
from ray import tune

IMPORTED_AT = time.time()


class Probe(tune.Trainable):
    def step(self):
        return {"done": True, "imported_at": IMPORTED_AT, "pid": os.getpid(),
                "pl_disable_fork": os.environ.get("PL_DISABLE_FORK"),
                "quiet": os.environ.get("TOKENIZERS_PARALLELISM"),
                "pools": sorted({p["num_threads"] for p in __import__("threadpoolctl").threadpool_info()})}

    def save_checkpoint(self, checkpoint_dir):
        return None

    def load_checkpoint(self, checkpoint):
        pass
"""

DRIVER = """
import json, sys, time
from types import SimpleNamespace
import ray
from ray import tune
from sweeps.engine import ray_start
from warm_probe import Probe

plan = SimpleNamespace(args={}, method_cls=SimpleNamespace(trainable=Probe), resources={"cpu": 1.0}, ray_log=None)
ray_start.init_ray(plan)
time.sleep(8)  # the driver's own start-up work (store, parent run, Tune's experiment) takes longer
fit_started = time.time()
grid = tune.Tuner(
    tune.with_resources(Probe, {"cpu": 1}),
    param_space={"x": tune.grid_search([1, 2])},
    tune_config=tune.TuneConfig(reuse_actors=False),
    run_config=tune.RunConfig(storage_path=sys.argv[1], verbose=0),
).fit()
print(json.dumps({"fit_started": fit_started, "trials": [r.metrics for r in grid]}))
ray.shutdown()
"""


@pytest.mark.sweep  # a local Ray and a Tune run: about 30 s
def test_trial_actors_find_their_module_already_imported(tmp_path):
    """The trial's module was imported before Tune asked for the trial actors: by the prestarted workers,
    not by new ones started for the actors."""
    (tmp_path / "warm_probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    env.pop(warm_workers.PRELOAD_ENV, None)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(DRIVER), str(tmp_path / "tune")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert len({t["pid"] for t in out["trials"]}) == 2  # side by side, on two workers
    for trial in out["trials"]:
        assert trial["imported_at"] < out["fit_started"], "the trial's module was imported after Tune started"
        assert trial["pl_disable_fork"] == "1" and trial["quiet"] == "false"  # the trials' settings still arrive
        assert trial["pools"] == [1]  # OpenMP and BLAS sized for the trial's 1 CPU, as in a worker Ray starts


NO_CUDA_AT_IMPORT = """
import torch
asked = []
for name in ("is_available", "device_count", "init", "current_device"):
    original = getattr(torch.cuda, name)
    setattr(torch.cuda, name, lambda *a, _n=name, _o=original, **k: asked.append(_n) or _o(*a, **k))
import trainables.methods
trainables.methods.load()
assert not asked and not torch.cuda.is_initialized(), asked
"""


@pytest.mark.sweep  # imports every method: about 5 s
def test_the_preloaded_modules_leave_cuda_alone():
    """A worker preloads the trainable before Ray gives it its GPUs (CUDA_VISIBLE_DEVICES): importing any
    method's modules must not start CUDA, or the trial would see every GPU of the node."""
    done = subprocess.run(
        [sys.executable, "-c", NO_CUDA_AT_IMPORT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
