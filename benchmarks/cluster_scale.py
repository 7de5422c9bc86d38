"""The engine's bookkeeping cost against bare Ray Tune, side by side in one run.

    python benchmarks/cluster_scale.py --address <local cluster address> --trials 1000 --concurrent 64

N trials of S seconds each (default 1,000 of 1 s) run twice on the same Ray cluster, with at most
C at once: through the engine (`sweeps/electra_layers.py --smoke-test --simulate --simulate-seconds
S --epochs 1 --gpus-per-trial 0 --max-concurrent C`: plan, MLflow parent and child runs, a checkpoint
per trial, seals, progress line, summary) and through bare Ray Tune (a class trainable that
sleeps S and reports once, `max_concurrent_trials` C, actors reused as the engine's are, no
callbacks, no checkpoints). It prints
both wall times, their ratio (goal: the engine adds at most 25%), and where the engine's driver
spends its time: the engine's sweep runs under cProfile, and the driver's main thread's time is
summed by where it is spent (MLflow, seals, checkpoints, the progress line, Ray Tune's own loop,
the rest). The engine's wall time counts from its first line to its exit, the plan included; the
plan (tokenising the smoke test's data) is printed apart.

The address defaults to a local Ray started here with C logical CPUs. Without --address both runs
start their own (the same size). Ray's own release test (10,000 one-second trials on 16 CPUs in at
most 800 s, 625 s the floor) is the anchor for bare Tune's figure.
"""

from __future__ import annotations

import argparse
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GROUPS = (  # (label, substrings of a profiled function's file): first match wins
    ("MLflow (tracking.py, mlflow)", ("sweeps/engine/tracking.py", "/mlflow/", "sqlalchemy", "sqlite3")),
    ("seals (seal.py)", ("sweeps/engine/seal.py",)),
    ("progress line (progress.py)", ("sweeps/engine/progress.py",)),
    (
        "checkpoints and storage (Tune's, pyarrow.fs)",
        ("ray/train/_internal/storage", "pyarrow", "ray/train/_checkpoint"),
    ),
    ("plan (methods, tokenising, data)", ("trainables/", "transformers/", "tokenizers")),
    ("Ray Tune's loop and Ray", ("/ray/",)),
)


def bare_tune(trials: int, seconds: float, concurrent: int, address: str | None, storage: str, cpu: float) -> float:
    code = f"""
import os, time, ray
from ray import tune
os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
ray.init(address={address!r} or None, num_cpus=None if {address!r} else 8, log_to_driver=False,
         include_dashboard=False)
class Trial(tune.Trainable):  # a class with actor reuse, as the engine's trials: the same processes
    def setup(self, config):
        self.i = config["i"]
    def reset_config(self, config):
        self.i = config["i"]
        return True
    def step(self):
        time.sleep({seconds})
        return {{"score": self.i, "done": True}}
started = time.time()
tune.Tuner(tune.with_resources(Trial, {{"cpu": {cpu}}}), param_space={{"i": tune.grid_search(list(range({trials})))}},
           tune_config=tune.TuneConfig(max_concurrent_trials={concurrent}, reuse_actors=True),
           run_config=tune.RunConfig(storage_path={storage!r}, verbose=0)).fit()
print("BARE", time.time() - started)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env())
    line = [x for x in out.stdout.splitlines() if x.startswith("BARE")]
    if not line:
        raise RuntimeError(out.stderr[-3000:])
    return float(line[0].split()[1])


def engine(
    trials: int, seconds: float, concurrent: int, address: str | None, storage: str, cpu: float
) -> tuple[float, str]:
    layers = 3  # the smoke test's tiny model: layers 0..2
    seeds = max(1, trials // layers)
    profile = os.path.join(storage, "engine.prof")
    command = [
        sys.executable, "-m", "cProfile", "-o", profile, str(ROOT / "sweeps" / "electra_layers.py"),
        "--smoke-test", "--simulate", "--simulate-seconds", str(seconds), "--epochs", "1",
        "--layers", "0,1,2", "--seeds", f"0-{seeds - 1}", "--gpus-per-trial", "0", "--cpus-per-trial", str(cpu),
        "--max-concurrent", str(concurrent), "--storage-path", storage, "--name", "scale",
        *(["--address", address] if address else []),
    ]  # fmt: skip
    started = time.time()
    out = subprocess.run(command, capture_output=True, text=True, env=_env(), cwd=ROOT)
    wall = time.time() - started
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return wall, profile


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}


def top_functions(profile: str, needles: tuple, count: int = 6) -> list[tuple[str, float, int]]:
    stats = pstats.Stats(profile).stats
    rows = [
        (f"{Path(file).name}:{line} {name}", cumtime, calls)
        for (file, line, name), (_, calls, _, cumtime, _) in stats.items()
        if any(n in file for n in needles)
    ]
    return sorted(rows, key=lambda row: -row[1])[:count]


def where_time_goes(profile: str) -> list[tuple[str, float]]:
    stats = pstats.Stats(profile).stats
    totals = {label: 0.0 for label, _ in GROUPS}
    totals["waiting and the rest"] = 0.0
    for (file, _, _), (_, _, tottime, _, _) in stats.items():
        label = next((lab for lab, needles in GROUPS if any(n in file for n in needles)), "waiting and the rest")
        totals[label] += tottime
    return sorted(totals.items(), key=lambda kv: -kv[1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--concurrent", type=int, default=64)
    parser.add_argument("--address", help="a Ray cluster for both runs (python -m sweeps.local_cluster up)")
    parser.add_argument(
        "--cpus-per-trial", type=float, default=0.125, help="each trial's CPU share in both runs (0.125: 64 on 8 CPUs)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cluster-scale-") as folder:
        trials = max(1, args.trials // 3) * 3
        print(f"{trials} trials of {args.seconds:g} s, at most {args.concurrent} at once", flush=True)
        bare = bare_tune(
            trials, args.seconds, args.concurrent, args.address, os.path.join(folder, "bare"), args.cpus_per_trial
        )
        print(f"bare Ray Tune: {bare:.1f} s", flush=True)
        wall, profile = engine(
            trials, args.seconds, args.concurrent, args.address, os.path.join(folder, "engine"), args.cpus_per_trial
        )
        print(f"engine (--simulate): {wall:.1f} s; ratio engine / bare Tune = {wall / bare:.2f}", flush=True)
        floor = trials * args.seconds / args.concurrent
        print(f"floor (trials x seconds / at once): {floor:.1f} s", flush=True)
        print("the engine driver's main thread, by where its CPU time goes (cProfile tottime):")
        for label, seconds in where_time_goes(profile):
            print(f"  {label:<48} {seconds:8.1f} s")
        print("the engine's tracking calls, by cumulative time:")
        for name, seconds, calls in top_functions(profile, ("sweeps/engine/tracking.py",)):
            print(f"  {name:<60} {seconds:8.1f} s  {calls} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
