"""The default job's seconds outside trials, this tree against an earlier revision, in one run.

Runs the README's first command (all-MiniLM-L6-v2, layers 0..6, seed 0, one epoch on 1,000 pairs) as a
fresh process, once from a copy of `--baseline` (a git revision, `git archive`d into a temporary folder)
and once from this tree, one after the other, each into its own temporary storage path. For each:

- wall: the command's whole wall time;
- trials: the trials' own seconds (`wall_time_s`, set-up, training, evaluation), summed, over the slots
  that ran them side by side (2: one CPU each on two cores);
- outside = wall - trials / slots: Ray's start, worker start-up, imports, tokenising, MLflow, the
  checkpoints Tune writes, the tail where one slot idles, the final report;
- this tree's start-up phases (sweeps/engine/startup.py's marks, seconds since the process started).

    python benchmarks/fixed_costs.py                       # baseline: the branch's first parent on main
    python benchmarks/fixed_costs.py --baseline HEAD~3 --arms candidate
    python benchmarks/fixed_costs.py --smoke --rounds 2    # the start-up only (tiny trials), order alternated
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import results_file  # noqa: E402
from trainables.core.paths import default_data_dir  # noqa: E402

JOB = [
    "sweeps/electra_layers.py",
    "--models",
    "sentence-transformers/all-MiniLM-L6-v2",
    "--seeds",
    "0",
    "--epochs",
    "1",
    "--max-train-samples",
    "1000",
]


def _tree(revision: str, into: Path) -> Path:
    """A copy of the repository at `revision` (tracked files only)."""
    into.mkdir()
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


SMOKE = ["sweeps/electra_layers.py", "--smoke-test"]  # the same start-up around 4 short trials of a tiny model


def run_job(tree: Path, storage: Path, extra: list[str], job: list[str] = JOB) -> dict:
    from mlflow import MlflowClient

    timeline = storage / "timeline.json"
    env = {**os.environ, "PYTHONPATH": str(tree), "EMBSWEEP_TIMELINE": str(timeline)}
    data = ["--data-dir", str(default_data_dir())]  # the baseline's copy has no data beside it
    command = [sys.executable, *job, "--storage-path", str(storage), "--name", "job", *data, *extra]
    load = os.getloadavg()[0]
    started = time.time()
    subprocess.run(command, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.time() - started
    client = MlflowClient(f"sqlite:///{storage / 'mlflow.db'}")
    runs = [
        r
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id])
        if "wall_time_s" in r.data.metrics
    ]
    firsts = min(r.info.start_time / 1000 for r in runs)
    return {
        "wall": wall,
        "trial_s": sum(r.data.metrics["wall_time_s"] for r in runs),
        "trials": len(runs),
        "first_trial_run": firsts - started,
        "phases": json.loads(timeline.read_text()) if timeline.exists() else {},
        "load": (load, os.getloadavg()[0]),
        "scores": {int(r.data.params["layer"]): r.data.metrics.get("test_spearman_at_best_dev") for r in runs},
        # each trial's run (seconds since the command started) and its own seconds: where the tail is
        "trial_runs": sorted(
            (
                int(r.data.params["layer"]),
                round(r.info.start_time / 1000 - started, 1),
                round((r.info.end_time or 0) / 1000 - started, 1),
                round(r.data.metrics["wall_time_s"], 1),
            )
            for r in runs
        ),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="main", help="the git revision to compare with (default: main)")
    parser.add_argument("--arms", default="baseline,candidate", help="baseline, candidate or both")
    parser.add_argument("--slots", type=int, default=2, help="trials side by side (2 CPUs, one per trial)")
    parser.add_argument(
        "--smoke", action="store_true", help="the job's start-up around 4 short trials of a tiny model (--smoke-test)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="run the arms this many times, alternating their order")
    parser.add_argument("extra", nargs="*", help="more flags for the job, after --")
    results_file.add_flag(parser, "fixed_costs")
    args = parser.parse_args(argv)
    results, rows = {}, []
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    with tempfile.TemporaryDirectory(prefix="fixed-costs-") as tmp:
        trees = {
            a: ROOT if a == "candidate" else _tree(args.baseline, Path(tmp, "baseline-tree").resolve()) for a in arms
        }
        for round_ in range(args.rounds):
            for arm in arms if round_ % 2 == 0 else arms[::-1]:
                results[f"{arm}-{round_}"] = r = run_job(
                    trees[arm], Path(tmp, f"{arm}-{round_}"), args.extra, SMOKE if args.smoke else JOB
                )
                outside = r["wall"] - r["trial_s"] / args.slots
                phases = r["phases"]
                rows.append(
                    [
                        f"{arm} ({args.baseline if arm == 'baseline' else 'this tree'}), round {round_ + 1}",
                        f"{r['load'][0]:.1f}, {r['load'][1]:.1f}",
                        f"{r['wall']:.1f} s",
                        f"{r['trial_s']:.1f} ({r['trial_s'] / args.slots:.1f})",
                        f"**{outside:.1f} s**",
                        f"{phases['planned']:.1f} s" if "planned" in phases else "",
                        f"{phases['ray_started']:.1f} s" if "ray_started" in phases else "",
                        f"{r['wall'] - phases['finished']:.1f} s" if "finished" in phases else "",
                    ]
                )
                print(
                    f"{arm}: wall {r['wall']:.1f} s, {r['trials']} trials {r['trial_s']:.1f} trial-s "
                    f"(/{args.slots} = {r['trial_s'] / args.slots:.1f} s), outside trials {outside:.1f} s; "
                    f"first trial's run created at {r['first_trial_run']:.1f} s; load average {r['load'][0]:.1f} "
                    f"then {r['load'][1]:.1f}",
                    flush=True,
                )
                if r["phases"]:
                    done = r["phases"].get("finished")
                    print(
                        "  phases (s since the process started): "
                        + ", ".join(f"{k} {v:.1f}" for k, v in r["phases"].items())
                        + (f"; exit {r['wall'] - done:.1f} s after finished" if done else "")
                    )
    print(json.dumps(results, indent=1))
    results_file.write(
        args.results_json,
        "fixed_costs",
        [
            "run",
            "load average (start, end)",
            "wall",
            f"trial-seconds (/ {args.slots})",
            "outside trials",
            "planned at",
            "Ray up at",
            "exit after the end",
        ],
        rows,
        summary=f"The {'smoke-test start-up' if args.smoke else 'default job'} from {args.baseline} "
        f"and from this tree, "
        f"{args.rounds} round(s) alternating their order; outside trials = wall − trial-seconds / {args.slots}.",
    )


if __name__ == "__main__":
    main()
