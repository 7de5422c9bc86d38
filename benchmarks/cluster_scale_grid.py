"""A paper grid at scale on the local cluster: its trials simulated, the autoscaler adding GPU nodes from 0.

    python benchmarks/cluster_scale_grid.py [--grid default|improvements] [--speedup K] [-- sweep flags]

It starts cluster_local.yaml's cluster (`--workers` x `--gpus-per-worker`, none up at the start), runs the
grid's sweep there with `--simulate --simulate-speedup K`, samples the worker nodes every 2 s, and prints the
time to the first trial, the nodes over time, the trials per GPU id (and the most at once on one), the makespan
against its lower bound, and the simulated GPU-hours against `--dry-run`'s. The lower bound is the larger of
the GPU-seconds the trials held (each trial's wait x its GPU share) over the GPUs, and the longest chain of a
stage then a trial. A simulated trial waits its predicted seconds whatever shares its GPU (a real one would
share the GPU's time), so the bound counts GPU-seconds held, not the cost model's GPU-seconds alone on a GPU.
A simulated stage waits 0 s (stages carry no cost model at run time; `--simulate-seconds` would fix the
trials' waits too), so in the improvements grid the chain is its longest trial. The makespan set against the
bound runs from the first compute (a stage's wait, or a trial) to the last trial's end: the plan, the
autoscaler's start and a stage waiting for its node come before it and are printed as the time to the first
trial. Two list schedules of the run's own waits and shares, without any overhead, split the gap: the grid
costliest first on all GPUs (what packing whole trials costs), and each GPU's trials replayed in the order the
run placed them there (what the placement and Tune's order cost); the rest is Ray's start-up and per-trial
overhead. With --keep, timeline.json holds the samples, the figures and the driver's start and end (Unix seconds).
"""

from __future__ import annotations

import argparse
import heapq
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import results_file  # noqa: E402
from benchmarks.cluster_scale import _env  # noqa: E402

GRIDS = {  # name -> (script, its grid's flags): the default grid; Table 1's improvements grid with its stages
    "default": ("sweeps/electra_layers.py", []),
    "improvements": ("sweeps/improvements.py", ["--preset", "table1"]),
}


def grid_main(argv=None) -> int:
    """`python benchmarks/cluster_scale_grid.py ...`: a paper grid simulated on the local cluster (autoscaling
    from 0 GPU nodes), against its lower bound and the dry run (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="cluster_scale_grid.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", choices=sorted(GRIDS), default="default")
    parser.add_argument("--speedup", type=float, default=10.0, help="--simulate-speedup K of the simulated sweep")
    parser.add_argument("--workers", type=int, default=4, help="GPU worker nodes at most (cluster_local.yaml: 4)")
    parser.add_argument("--gpus-per-worker", type=int, default=8, help="GPUs of a worker node (cluster_local.yaml: 8)")
    parser.add_argument("--max-concurrent", type=int, default=0, help="trials at once (0: as many as fit)")
    parser.add_argument("--keep", type=Path, help="keep the sweep's storage, MLflow store and timeline here")
    results_file.add_flag(parser, "cluster_scale_grid")
    parser.add_argument("flags", nargs=argparse.REMAINDER, help="after `--`: more flags of the sweep (e.g. --models)")
    args = parser.parse_args(argv)
    from sweeps import local_cluster

    script, grid_flags = GRIDS[args.grid]
    flags = [*grid_flags, *[f for f in args.flags if f != "--"]]
    folder = Path(args.keep or tempfile.mkdtemp(prefix="cluster-grid-"))
    folder.mkdir(parents=True, exist_ok=True)
    dry = subprocess.run(
        [sys.executable, str(ROOT / script), *flags, "--dry-run", "--storage-path", str(folder / "dry")],
        capture_output=True, text=True, env=_env(), cwd=ROOT,
    )  # fmt: skip
    dry_hours = _dry_run_gpu_hours(dry.stdout)
    temp = Path(tempfile.mkdtemp(prefix="es-grid-", dir="/tmp"))  # short: Ray's socket paths
    try:
        address = local_cluster.up(temp, max_workers=args.workers, gpus=args.gpus_per_worker, timeout=300)
        mlflow = f"sqlite:///{folder / 'mlflow.db'}"
        command = [
            sys.executable, str(ROOT / script), *flags, "--simulate", "--simulate-speedup", str(args.speedup),
            "--address", address, "--storage-path", str(folder / "runs"), "--mlflow-uri", mlflow,
            "--name", "grid", *(["--max-concurrent", str(args.max_concurrent)] if args.max_concurrent else []),
        ]  # fmt: skip
        gcs = local_cluster.gcs_client(temp)  # sampled in this process: a `ray status` each time costs a CPU-second
        started = time.time()
        timeline = []
        with open(folder / "driver.log", "w") as log:
            driver = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT)
            while driver.poll() is None:
                timeline.append((time.time() - started, local_cluster.worker_nodes(temp, gcs)))
                time.sleep(2)
        ended = time.time()
        if driver.returncode != 0:
            raise RuntimeError((folder / "driver.log").read_text()[-3000:])
    finally:
        local_cluster.down(temp)
        shutil.rmtree(temp, ignore_errors=True)
    stage_seconds = float(flags[flags.index("--simulate-seconds") + 1]) if "--simulate-seconds" in flags else 0.0
    figures = grid_figures(mlflow, started, ended, args.speedup, args.workers * args.gpus_per_worker, stage_seconds)
    print_grid(args, figures, dry_hours, timeline)
    kept = {"timeline": timeline, "figures": figures, "started": started, "ended": ended}
    (folder / "timeline.json").write_text(json.dumps(kept, default=str))
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def _dry_run_gpu_hours(text: str) -> float | None:
    for line in text.splitlines():
        if line.strip().startswith("GPU-hours:"):
            return float(line.split()[1])
    return None


def grid_figures(
    mlflow_uri: str, started: float, ended: float, speedup: float, gpus: int, stage_seconds: float = 0.0
) -> dict:
    """What the grid's MLflow runs say: time to the first trial, the makespan against its lower bound, trials
    per GPU id and the most at once on one, the simulated GPU-hours (the cost model's, undone of the speedup).

    The makespan runs from the first compute (a stage's wait, or a trial) to the last trial's end; the bound is
    the larger of the GPU-seconds held over the GPUs and the longest chain of a stage's wait (`stage_seconds`:
    --simulate-seconds, 0 without it) then its trial's wait. Both are durations, so neither counts the plan, the
    autoscaler's start or a stage waiting for its node."""
    from mlflow import MlflowClient

    client = MlflowClient(mlflow_uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=50000)
    trials = [r for r in runs if r.data.tags.get("embsweep.role") == "trial"]
    stages = [r for r in runs if r.data.tags.get("embsweep.role") not in ("trial", "sweep")]
    spans, per_gpu, held, chain, queues = defaultdict(list), Counter(), 0.0, 0.0, defaultdict(list)
    for run in sorted(trials, key=lambda r: r.info.start_time):
        start, end = run.info.start_time / 1000 - started, (run.info.end_time or 0) / 1000 - started
        waited = run.data.metrics.get("wall_time_s", end - start)
        share = run.data.metrics.get("gpu_share", 0.0)
        held += share * waited
        chain = max(chain, (stage_seconds if run.data.params.get("upstream_run_id") else 0.0) + waited)
        for gpu in run.data.tags.get("gpu_ids", "").split(","):
            if gpu:
                slot = (run.data.tags.get("node_id", "")[-5:], gpu)
                per_gpu[slot] += 1
                spans[slot].append((start, end))
                queues[slot].append((waited, share))
    first = min((r.info.start_time / 1000 - started for r in trials), default=float("nan"))
    computed = min([first, *((s.info.end_time or 0) / 1000 - started - stage_seconds for s in stages)])
    last = max(((r.info.end_time or 0) / 1000 - started for r in trials), default=computed)
    bound = max(held / gpus, chain)
    most = max((_most_at_once(v) for v in spans.values()), default=0)
    costliest = sorted(((r.data.metrics.get("wall_time_s", 0.0), r.data.metrics.get("gpu_share", 0.0)) for r in trials),
                       key=lambda t: -t[0])  # fmt: skip
    return {
        "trials": len(trials),
        "stages": len(stages),
        "first_trial_s": first,
        "makespan_s": ended - started,
        "compute_makespan_s": last - computed if trials else 0.0,
        "bound_s": bound,
        "gpu_seconds_held": held,
        "longest_chain_s": chain,
        "simulated_gpu_hours": sum(r.data.metrics.get("wall_time_s", 0.0) for r in trials) * speedup / 3600,
        "per_gpu": {f"{n}/{g}": c for (n, g), c in sorted(per_gpu.items())},
        "most_at_once_on_a_gpu": most,
        "schedule_costliest_s": list_schedule(costliest, gpus),
        "schedule_as_placed_s": max((list_schedule(queue, 1) for queue in queues.values()), default=0.0),
    }


def list_schedule(trials: list[tuple[float, float]], gpus: int, cap: int = 4) -> float:
    """The makespan of `trials` ((wait, GPU share), in this order) on `gpus` GPUs without any overhead: each
    starts, in turn, as soon as a GPU (the first by id) has its share free and fewer than `cap` trials. The grid
    costliest first (the engine's order) on all the GPUs, against each GPU's trials in the order they started there
    (one GPU each: the run's placement and order, replayed without overhead), splits what the placement and order
    lost from what Ray's start-up and per-trial overhead lost."""
    free, count, running, now = [1.0] * gpus, [0] * gpus, [], 0.0
    for wait, share in trials:
        share = min(share, 1.0)  # a trial of several GPUs: one here (a bound on its own GPUs' time)
        while True:
            gpu = next((g for g in range(gpus) if free[g] >= share - 1e-9 and count[g] < cap), None)
            if gpu is not None:
                break
            now, done, given = heapq.heappop(running)
            free[done], count[done] = free[done] + given, count[done] - 1
        free[gpu], count[gpu] = free[gpu] - share, count[gpu] + 1
        heapq.heappush(running, (now + wait, gpu, share))
    return max((end for end, _, _ in running), default=0.0)


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def print_grid(args, f: dict, dry_hours: float | None, timeline: list) -> None:
    cluster = f"local cluster {args.workers} x {args.gpus_per_worker} GPUs from 0 nodes"
    print(f"grid {args.grid}: {f['trials']} simulated trials, {f['stages']} stages, K = {args.speedup:g}, {cluster}")
    print(f"  time to the first trial: {f['first_trial_s']:.1f} s (from the driver's start, plan included)")
    changes = [(round(t), n) for i, (t, n) in enumerate(timeline) if i == 0 or n != timeline[i - 1][1]]
    print("  worker nodes over time (s, nodes): " + ", ".join(f"{t}:{n}" for t, n in changes))
    ratio = f["compute_makespan_s"] / f["bound_s"] if f["bound_s"] else float("nan")
    span = f"{f['makespan_s']:.1f} s from the driver's start, {f['compute_makespan_s']:.1f} s first compute to last"
    print(f"  makespan: {span}")
    print(
        f"  lower bound {f['bound_s']:.1f} s = max(GPU-seconds held {f['gpu_seconds_held']:.0f} / GPUs, longest "
        f"stage-then-trial chain {f['longest_chain_s']:.1f} s); first compute to last / bound = {ratio:.2f}"
    )
    print(
        f"  without overhead (the same waits and shares, list-scheduled): {f['schedule_costliest_s']:.1f} s "
        f"costliest first on all GPUs, {f['schedule_as_placed_s']:.1f} s each GPU's trials as the run placed them"
    )
    counts = ", ".join(f"{ids} ids ran {n}" for n, ids in sorted(Counter(f["per_gpu"].values()).items()))
    most = f["most_at_once_on_a_gpu"]
    print(f"  trials per GPU id: {len(f['per_gpu'])} GPU ids used; {counts}; at most {most} at once on one")
    dry = "n/a" if dry_hours is None else f"{dry_hours:.2f}"
    print(f"  GPU-hours: simulated {f['simulated_gpu_hours']:.2f} (waits x speedup) against --dry-run's {dry}")
    results_file.write(
        args.results_json,
        "cluster_scale_grid",
        [
            "grid, K, trials at once",
            "first trial",
            "nodes (s: nodes)",
            "makespan / bound",
            "costliest first / as placed, no overhead",
            "GPU ids used (most at once on one)",
            "GPU-hours / dry run",
        ],
        [
            [
                f"{args.grid}, {args.speedup:g}, {args.max_concurrent or 'all'}",
                f"{f['first_trial_s']:.1f} s",
                ", ".join(f"{t}: {n}" for t, n in changes),
                f"{f['compute_makespan_s']:.1f} / {f['bound_s']:.1f} s = **{ratio:.2f}**",
                f"{f['schedule_costliest_s']:.1f} / {f['schedule_as_placed_s']:.1f} s",
                f"{len(f['per_gpu'])} ({most})",
                f"{f['simulated_gpu_hours']:.2f} / {dry}",
            ]
        ],
        summary=f"Grid {args.grid}: {f['trials']} simulated trials, {f['stages']} stages, K = {args.speedup:g}, "
        f"{cluster}; "
        "the makespan runs from the first compute to the last trial's end; the bound is the larger of the GPU-seconds "
        "held over the GPUs and the longest stage-then-trial chain.",
    )


if __name__ == "__main__":
    sys.exit(grid_main())
