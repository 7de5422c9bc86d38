"""The engine's bookkeeping cost against bare Ray Tune, side by side in one run.

    python benchmarks/cluster_scale.py --address <local cluster address> --trials 1000 --concurrent 64

N trials of S seconds each (default 1,000 of 1 s) run twice on the same Ray cluster, with at most
C at once: through bare Ray Tune (a class trainable that sleeps S and reports once, the engine's search
setup: preset points and a BasicVariantGenerator of max_concurrent C, actors reused as the engine's are,
an empty checkpoint at each trial's end, without which Tune reuses no actor, no callbacks), then
through the engine (`sweeps/electra_layers.py --smoke-test --simulate --simulate-seconds S --epochs 1
--gpus-per-trial 0 --max-concurrent C`: plan, MLflow parent and child runs on a SQLite store, a
checkpoint per trial, seals, progress line, summary). It prints the bookkeeping ratio, engine / bare
Tune, of the time spent in `Tuner.fit` (goal: at most 1.25) and of the whole processes (the engine's
also plans, opens the MLflow store and prints its summary), and timers of the engine's MLflow writer
thread: its writes, its CPU time, and how long the sweep's end waited for writes still queued. With
--profile the engine's driver runs under cProfile (its main thread, and the MLflow writer thread on
its own) and the time is summed by where it is spent (MLflow, seals, checkpoints, the progress line,
Ray Tune's own loop, the rest); profiling slows the driver, so the ratio is then an upper bound.

Both arms report the trials they actually had in flight (Tune's RUNNING trials: the most at once,
and the mean over `Tuner.fit`) and how many trial processes ran them: Tune may keep fewer actors busy
than C allows (1-second trials: the loop starts the next trial on a reused actor before it starts a new
process). The ratio compares the arms at equal concurrency: the second arm runs with at most as many
trials at once as the first arm had in flight on average, and a line says so when their means still
differ by more than 10 % (then the ratio also measures how many actors each kept busy).

The data the engine's sweep reads is checked first, by its own `--dry-run` (`--data-dir`, default the
project's data folder): missing data ends the benchmark in one line, exit 2, before either arm runs.

The address defaults to a local Ray started here with C logical CPUs. Without --address both runs
start their own (the same size). Ray's own release test (10,000 one-second trials on 16 CPUs in at
most 800 s, 625 s the floor) is the anchor for bare Tune's figure.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import results_file  # noqa: E402

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


IN_FLIGHT = """
import json as _json, time as _time
from ray import tune as _tune
class InFlight(_tune.Callback):  # the trials Tune has RUNNING, over time, and the processes that ran them
    def __init__(self, path):
        self.path, self.running, self.events, self.pids = path, set(), [], set()
    def _note(self):
        self.events.append((_time.time(), len(self.running)))
    def on_trial_start(self, iteration, trials, trial, **info):
        self.running.add(trial.trial_id)
        self._note()
    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.pids.add(result.get("pid"))
    def _ended(self, trial):
        self.running.discard(trial.trial_id)
        self._note()
    def on_trial_complete(self, iteration, trials, trial, **info):
        self._ended(trial)
    def on_trial_error(self, iteration, trials, trial, **info):
        self._ended(trial)
    def on_experiment_end(self, trials, **info):
        self._note()
        open(self.path, "w").write(_json.dumps({"events": self.events, "processes": len(self.pids - {None})}))
"""


def in_flight(path: str) -> dict:
    """The most trials RUNNING at once, their mean over the run (first start to the end), and the processes."""
    with open(path) as handle:
        facts = json.load(handle)
    events = facts["events"]
    busy = sum(count * (later - now) for (now, count), (later, _) in zip(events, events[1:]))
    span = events[-1][0] - events[0][0] if len(events) > 1 else 0.0
    return {
        "most": max((count for _, count in events), default=0),
        "mean": busy / span if span > 0 else 0.0,
        "processes": facts["processes"],
    }


def bare_tune(
    trials: int, seconds: float, concurrent: int, address: str | None, storage: str, cpu: float
) -> tuple[float, float, dict]:
    """Bare Tune's fit time, its whole process's wall time and its trials in flight (`in_flight`)."""
    flight = os.path.join(storage, "in-flight.json")
    os.makedirs(storage, exist_ok=True)
    code = (
        IN_FLIGHT
        + f"""
import os, time, ray
from ray import tune
os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
ray.init(address={address!r} or "local", num_cpus=None if {address!r} else 8, log_to_driver=False,
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
    # an empty checkpoint at the trial's end, as the engine's trials save one: Tune caches a finished trial's
    # actor for the next only if that next trial is already staged, which it is while the end checkpoint is
    # saved; without it every bare trial started a process of its own (300 trials: 300 processes)
    def save_checkpoint(self, checkpoint_dir):
        open(os.path.join(checkpoint_dir, "state.json"), "w").write("{{}}")
    def load_checkpoint(self, checkpoint_dir):
        pass
from ray.tune.search.basic_variant import BasicVariantGenerator
search = BasicVariantGenerator(points_to_evaluate=[{{"i": i}} for i in range({trials})], max_concurrent={concurrent})
started = time.time()
tune.Tuner(tune.with_resources(Trial, {{"cpu": {cpu}}}), param_space={{"i": None}},
           tune_config=tune.TuneConfig(search_alg=search, num_samples={trials}, reuse_actors=True),
           run_config=tune.RunConfig(storage_path={storage!r}, verbose=0, callbacks=[InFlight({flight!r})],
                                     checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=True))).fit()
print("BARE", time.time() - started)
"""
    )
    started = time.time()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(address))
    wall = time.time() - started
    line = [x for x in out.stdout.splitlines() if x.startswith("BARE")]
    if not line:
        raise RuntimeError(out.stderr[-3000:])
    return float(line[0].split()[1]), wall, in_flight(flight)


ENGINE_WRAPPER = (
    IN_FLIGHT
    + """
import atexit, cProfile, json, runpy, sys, time
from ray import tune
from sweeps.engine import tracking
script, report, profile = sys.argv[1], sys.argv[2], sys.argv[3]
sys.argv = sys.argv[:1] + sys.argv[4:]
tuner_init = tune.Tuner.__init__
def counted_init(self, *a, run_config=None, **k):  # the engine's trials in flight, counted as bare Tune's
    if run_config is not None:
        run_config.callbacks = [*(run_config.callbacks or []), InFlight(report + ".in-flight")]
    tuner_init(self, *a, run_config=run_config, **k)
tune.Tuner.__init__ = counted_init
facts = {"fit_s": 0.0, "close_wait_s": 0.0, "writer_cpu_s": 0.0, "writes": 0}
fit, submit = tune.Tuner.fit, tracking.MlflowWriter.submit
close, work = tracking.BackgroundWriter.close, tracking.BackgroundWriter._work
def timed_fit(self, *a, **k):
    started = time.perf_counter()
    try:
        return fit(self, *a, **k)
    finally:
        facts["fit_s"] += time.perf_counter() - started
def timed_close(self):  # how long the end of the sweep waits for writes still queued
    started = time.perf_counter()
    try:
        return close(self)
    finally:
        facts["close_wait_s"] += time.perf_counter() - started
def counted_submit(self, op):
    facts["writes"] += 1
    return submit(self, op)
def timed_work(self):  # the writer thread: its CPU time, and its own profile
    started, writer_profile = time.thread_time(), cProfile.Profile() if profile else None
    if writer_profile:
        writer_profile.enable()
    try:
        work(self)
    finally:
        facts["writer_cpu_s"] += time.thread_time() - started
        if writer_profile:
            writer_profile.disable()
            writer_profile.dump_stats(profile + ".writer")
tune.Tuner.fit, tracking.BackgroundWriter.close, tracking.BackgroundWriter._work = timed_fit, timed_close, timed_work
tracking.MlflowWriter.submit = counted_submit
main_profile = cProfile.Profile() if profile else None
def write_report():  # at exit: a sweep script ends in quick_exit.exit_now (exit handlers, then os._exit)
    if main_profile:
        main_profile.disable()
        main_profile.dump_stats(profile)
    tracking.BackgroundWriter.close_all()
    open(report, "w").write(json.dumps(facts))
atexit.register(write_report)
if main_profile:
    main_profile.enable()
runpy.run_path(script, run_name="__main__")
"""
)


def engine_sweep(
    trials: int, seconds: float, concurrent: int, address: str | None, storage: str, cpu: float, data_dir: str | None
) -> list[str]:
    """The engine arm's sweep: its script and flags (the same for its `--dry-run`)."""
    layers = 3  # the smoke test's tiny model: layers 0..2
    seeds = max(1, trials // layers)
    return [
        str(ROOT / "sweeps" / "electra_layers.py"),
        "--smoke-test", "--simulate", "--simulate-seconds", str(seconds), "--epochs", "1",
        "--layers", "0,1,2", "--seeds", f"0-{seeds - 1}", "--gpus-per-trial", "0", "--cpus-per-trial", str(cpu),
        "--max-concurrent", str(concurrent), "--storage-path", storage, "--name", "scale",
        "--mlflow-uri", f"sqlite:///{os.path.join(storage, 'mlflow.db')}",
        *(["--address", address] if address else []), *(["--data-dir", data_dir] if data_dir else []),
    ]  # fmt: skip


def check_engine_sweep(sweep: list[str], address: str | None) -> str | None:
    """The engine's sweep checked by its own `--dry-run` (its data, its flags), before either arm runs: None, or
    its one-line refusal."""
    out = subprocess.run(
        [sys.executable, *sweep, "--dry-run"], capture_output=True, text=True, env=_env(address), cwd=ROOT
    )
    if out.returncode == 0:
        return None
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"the engine's --dry-run failed (exit {out.returncode})"


def engine(
    trials: int,
    seconds: float,
    concurrent: int,
    address: str | None,
    storage: str,
    cpu: float,
    profile: bool,
    data_dir: str | None = None,
) -> tuple[float, dict, str | None]:
    """The engine's wall time (its whole process), its timers (Tune's fit, the wait for queued MLflow writes at
    the end, the writer thread's CPU time, the writes, its trials in flight as `in_flight` counts them) and,
    with `profile`, its driver's cProfile files."""
    os.makedirs(storage, exist_ok=True)
    report = os.path.join(storage, "engine-timers.json")
    profile_path = os.path.join(storage, "engine.prof") if profile else ""
    sweep = engine_sweep(trials, seconds, concurrent, address, storage, cpu, data_dir)
    command = [sys.executable, "-c", ENGINE_WRAPPER, sweep[0], report, profile_path, *sweep[1:]]
    started = time.time()
    out = subprocess.run(command, capture_output=True, text=True, env=_env(address), cwd=ROOT)
    wall = time.time() - started
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    with open(report) as handle:
        facts = json.load(handle)
    facts["in_flight"] = in_flight(report + ".in-flight")
    return wall, facts, profile_path or None


def _env(address: str | None = None) -> dict:
    """The arms' environment: this checkout's code; for this machine's local cluster, its token (local_cluster)."""
    from sweeps import local_cluster

    return {**os.environ, "PYTHONPATH": str(ROOT), **(local_cluster.token_env(address) if address else {})}


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


def overhead(args, folder: str) -> float:
    """Bare Tune, then the engine, on the same trials; prints both, their trials in flight and their ratio
    (returned, at equal concurrency: the second arm at most as many at once as the first had on average), and
    where the engine's time goes."""
    trials = max(1, args.trials // 3) * 3
    print(f"{trials} trials of {args.seconds:g} s, at most {args.concurrent} at once", flush=True)

    def run_bare(concurrent):
        where = os.path.join(folder, "bare")
        return bare_tune(trials, args.seconds, concurrent, args.address, where, args.cpus_per_trial)

    def run_engine(concurrent):
        where = os.path.join(folder, "engine")
        return engine(
            trials, args.seconds, concurrent, args.address, where, args.cpus_per_trial, args.profile, args.data_dir
        )

    def second_cap(flight: dict) -> int:  # equal concurrency: no more at once than the first arm kept on average
        return max(1, min(args.concurrent, round(flight["mean"])))

    if args.engine_first:  # the other order, to see how much the machine's load drifting between runs moves the ratio
        wall, facts, profile = run_engine(args.concurrent)
        print(f"engine (--simulate): {facts['fit_s']:.1f} s in Tuner.fit ({wall:.1f} s its whole process)", flush=True)
        print(f"  {flight_line(facts['in_flight'], args.concurrent)}", flush=True)
        bare_fit, bare_wall, bare_flight = run_bare(second_cap(facts["in_flight"]))
        print(f"bare Ray Tune: {bare_fit:.1f} s in Tuner.fit ({bare_wall:.1f} s its whole process)", flush=True)
        print(f"  {flight_line(bare_flight, second_cap(facts['in_flight']))}", flush=True)
    else:
        bare_fit, bare_wall, bare_flight = run_bare(args.concurrent)
        # printed at once: a failure of the engine's side leaves this figure
        print(f"bare Ray Tune: {bare_fit:.1f} s in Tuner.fit ({bare_wall:.1f} s its whole process)", flush=True)
        print(f"  {flight_line(bare_flight, args.concurrent)}", flush=True)
        wall, facts, profile = run_engine(second_cap(bare_flight))
    ratio = facts["fit_s"] / bare_fit
    print(
        f"engine (--simulate): {facts['fit_s']:.1f} s in Tuner.fit ({wall:.1f} s its whole process: plan, MLflow "
        f"store, summary)\nbookkeeping ratio, engine / bare Tune: {ratio:.2f} in Tuner.fit, "
        f"{wall / bare_wall:.2f} whole processes (goal: at most 1.25)",
        flush=True,
    )
    if not args.engine_first:
        print(f"  engine: {flight_line(facts['in_flight'], second_cap(bare_flight))}", flush=True)
    unequal = equal_concurrency_note(bare_flight, facts["in_flight"])
    if unequal:
        print(unequal, flush=True)
    print(f"floor (trials x seconds / at once): {trials * args.seconds / args.concurrent:.1f} s", flush=True)
    results_file.write(
        args.results_json,
        "cluster_scale",
        [
            "run",
            "bare Tune, `Tuner.fit` (process)",
            "engine, `Tuner.fit` (process)",
            "ratio (processes)",
            "MLflow writer thread",
        ],
        [
            [
                "engine first" if args.engine_first else "bare first",
                f"{bare_fit:.1f} s ({bare_wall:.1f} s)",
                f"{facts['fit_s']:.1f} s ({wall:.1f} s)",
                f"**{ratio:.2f}** ({wall / bare_wall:.2f})",
                f"{facts['writes']:,} writes, {facts['writer_cpu_s']:.1f} s CPU; "
                f"end waited {facts['close_wait_s']:.1f} s",
            ]
        ],
        summary=f"{trials} trials of {args.seconds:g} s, at most {args.concurrent} at once, {args.cpus_per_trial:g} "
        "CPU each, through the engine and through bare Ray Tune on the same cluster; the goal is a ratio of at most "
        "1.25; "
        f"the floor is {trials * args.seconds / args.concurrent:.1f} s.",
    )
    print(
        f"MLflow: {facts['writes']} writes on the writer thread, {facts['writer_cpu_s']:.1f} s of its CPU time; "
        f"the sweep's end waited {facts['close_wait_s']:.1f} s for writes still queued",
        flush=True,
    )
    if profile:
        print("the engine driver's main thread, by where its CPU time goes (cProfile tottime):")
        for label, seconds in where_time_goes(profile):
            print(f"  {label:<48} {seconds:8.1f} s")
        print("the MLflow writer thread's calls, by cumulative time:")
        for name, seconds, calls in top_functions(profile + ".writer", ("sweeps/engine/tracking.py", "mlflow/")):
            print(f"  {name:<60} {seconds:8.1f} s  {calls} calls")
    return ratio


def flight_line(flight: dict, cap: int) -> str:
    return (
        f"trials in flight: {flight['mean']:.1f} on average, at most {flight['most']} at once (cap {cap}), "
        f"on {flight['processes']} trial processes"
    )


def equal_concurrency_note(bare: dict, engine: dict, tolerance: float = 0.10) -> str | None:
    """A line when the arms' mean trials in flight differ by more than `tolerance`: the ratio then also measures
    how many actors each arm kept busy, not only the bookkeeping."""
    low, high = sorted((bare["mean"], engine["mean"]))
    if high <= 0 or (high - low) / high <= tolerance:
        return None
    return (
        f"NOT at equal concurrency: bare Tune had {bare['mean']:.1f} trials in flight on average, the engine "
        f"{engine['mean']:.1f}; the ratio also measures how many actors each kept busy (longer --seconds, or a "
        "lower --concurrent, lets both arms keep their cap)"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--concurrent", type=int, default=64)
    parser.add_argument("--address", help="a Ray cluster for both runs (python -m sweeps.local_cluster up)")
    parser.add_argument(
        "--cpus-per-trial", type=float, default=0.125, help="each trial's CPU share in both runs (0.125: 64 on 8 CPUs)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run the engine's driver under cProfile (main and MLflow writer threads) and print where its time goes; "
        "profiling slows the driver, so the ratio is then an upper bound",
    )
    parser.add_argument("--engine-first", action="store_true", help="run the engine before bare Tune")
    results_file.add_flag(parser, "cluster_scale")
    parser.add_argument(
        "--data-dir", help="the data the engine's sweep reads (its --data-dir; default: the project's data folder)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cluster-scale-") as folder:
        trials = max(1, args.trials // 3) * 3
        sweep = engine_sweep(
            trials, args.seconds, args.concurrent, args.address, os.path.join(folder, "dry"), args.cpus_per_trial,
            args.data_dir,
        )  # fmt: skip
        refused = check_engine_sweep(sweep, args.address)  # before either arm: minutes of bare Tune not lost
        if refused:
            print(f"the engine's sweep cannot run, nothing was run: {refused.removeprefix('Error: ')}", file=sys.stderr)
            return 2
        overhead(args, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
