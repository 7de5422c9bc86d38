"""Ray's orchestration overhead on a sweep of short trials.

overhead = sweep wall time / (sum of the trials' own times / trials at once) - 1

and where it goes: the workers' start-up (a one-time cost per worker), the gaps between a
worker's consecutive trials (Tune's per-trial handling, the part that grows with the number of
trials) as a share of the time spent in trials, and what is left: the tail, when fewer trials
than workers remain.

A trial's own time is its `wall_time_s` (model build + training + evaluation, as the trial
measures it); the sweep wall time is the whole Tune run (trial scheduling, worker start-up,
checkpoints, MLflow logging), with Ray already started. Two variants run in the same process:
the project's default (trial actors reused, so worker processes, imported libraries and loaded
models survive between trials) and a fresh worker per trial (`--no-reuse-actors`), the baseline.

    python benchmarks/orchestration.py                    # 16 tiny-model trials, 2 at a time
    python benchmarks/orchestration.py --trials-per-seed 4 --seeds 0-5 --epochs 3
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results_file  # noqa: E402

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def run_variant(label: str, flags: list[str], concurrency: int) -> tuple[float, float, int]:
    import io
    from contextlib import redirect_stdout

    from sweeps.engine.runner import parser_for, plan_sweep, run_sweep

    plan = plan_sweep(parser_for("tmft", prog="orchestration").parse_args(flags), method="tmft", prog="orchestration")
    started, started_at = time.perf_counter(), time.time()
    with redirect_stdout(io.StringIO()):
        results = run_sweep(plan)
    wall = time.perf_counter() - started
    own = sum(r.metrics["wall_time_s"] for r in results if r.metrics)
    ideal = own / concurrency
    split = decompose(results, started_at)
    line = f"{label:<28} {len(results):>6} {wall:>10.1f} {own:>14.1f} {ideal:>10.1f} {100 * (wall / ideal - 1):>9.1f}%"
    if split["workers"] < len(results):  # with one worker per trial there is nothing between trials to measure
        line += f" {split['startup']:>9.1f} {split['gaps']:>9.1f} {100 * split['gaps'] / split['busy']:>11.1f}%"
    print(line)
    return wall, ideal, len(results)


def decompose(results, fit_start: float) -> dict:
    """Where the lost time goes, from the trials' own result timestamps: `startup` = mean time
    from the start of the sweep to each worker's first trial (worker start, imports); `gaps` =
    the time workers sat between two of their trials (Tune's per-trial handling: result and
    checkpoint processing, actor reset, scheduling); `busy` = time inside trials."""
    by_worker = {}
    for result in results:
        frame = result.metrics_dataframe
        begin = float(frame["timestamp"].iloc[0] - frame["time_this_iter_s"].iloc[0])
        by_worker.setdefault(int(frame["pid"].iloc[0]), []).append((begin, float(frame["timestamp"].iloc[-1])))
    startup = sum(min(b for b, _ in spans) - fit_start for spans in by_worker.values()) / len(by_worker)
    busy = sum(end - begin for spans in by_worker.values() for begin, end in spans)
    gaps = sum(max(e for _, e in spans) - min(b for b, _ in spans) for spans in by_worker.values()) - busy
    return {"startup": startup, "gaps": gaps, "busy": busy, "workers": len(by_worker)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", default="0,1,2,3")
    parser.add_argument("--seeds", default="0-3")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train-samples", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=2)
    results_file.add_flag(parser, "orchestration")
    args = parser.parse_args(argv)

    import ray

    from sweeps.engine.runner import QUIET_ENV
    from trainables.core.paths import default_data_dir
    from trainables.data.stsb import load_stsb
    from trainables.encoders.tiny import build_tiny_model

    os.environ.update(QUIET_ENV)
    work = Path(tempfile.mkdtemp(prefix="orchestration-"))
    sentences = [e.sentence1 for e in load_stsb(default_data_dir(), splits=("train",))["train"][:2000]]
    model = build_tiny_model("bert", work / "tiny-bert", layers=4, hidden=64, sentences=sentences)
    ray.init(address="local", num_cpus=args.concurrency, include_dashboard=False, log_to_driver=False)
    common = [
        "--models",
        str(model),
        "--layers",
        args.layers,
        "--seeds",
        args.seeds,
        "--epochs",
        str(args.epochs),
        "--max-train-samples",
        str(args.train_samples),
        "--max-eval-samples",
        "300",
        "--batch-size",
        "16",
        "--cpus-per-trial",
        "1",
        "--gpus-per-trial",
        "0",
        "--storage-path",
        str(work / "runs"),
        "--mlflow-uri",
        f"sqlite:///{work / 'mlflow.db'}",
        "--experiment",
        "orchestration",
    ]
    print(
        f"{'variant':<28} {'trials':>6} {'wall (s)':>10} {'sum trial (s)':>14} {'ideal (s)':>10} {'overhead':>10}"
        f" {'startup':>9} {'gaps (s)':>9} {'gaps/busy':>12}"
    )
    reuse = run_variant("reused actors (default)", [*common, "--name", "reuse"], args.concurrency)
    fresh = run_variant("fresh worker per trial", [*common, "--name", "fresh", "--no-reuse-actors"], args.concurrency)
    per_trial = lambda v: (v[0] - v[1]) * args.concurrency / v[2]
    print(
        f"\nlost per trial: reused {per_trial(reuse):.2f} s, fresh {per_trial(fresh):.2f} s; "
        f"sweep wall time fresh / reused = {fresh[0] / reuse[0]:.2f}x"
    )
    results_file.write(
        args.results_json,
        "orchestration",
        ["variant", "trials", "wall", "ideal (trial-seconds / at once)", "overhead", "lost per trial"],
        [
            [name, v[2], f"{v[0]:.1f} s", f"{v[1]:.1f} s", f"{100 * (v[0] / v[1] - 1):.1f}%", f"{per_trial(v):.2f} s"]
            for name, v in (("reused actors (default)", reuse), ("fresh worker per trial", fresh))
        ],
        summary=f"A sweep of short TMFT trials, {args.concurrency} at once: its wall time against the trials' own "
        f"times over the trials at once; fresh / reused wall time {fresh[0] / reuse[0]:.2f}x.",
    )
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
