"""Ray's orchestration overhead on a sweep of short trials.

overhead = sweep wall time / (sum of the trials' own times / trials at once) - 1

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

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def run_variant(label: str, flags: list[str], concurrency: int) -> tuple[float, float, int]:
    import io
    from contextlib import redirect_stdout

    from sweeps.cli import build_parser
    from sweeps.runner import plan_sweep, run_sweep

    plan = plan_sweep(build_parser("orchestration", "").parse_args(flags), prog="orchestration")
    started = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        results = run_sweep(plan)
    wall = time.perf_counter() - started
    own = sum(r.metrics["wall_time_s"] for r in results if r.metrics)
    ideal = own / concurrency
    print(f"{label:<28} {len(results):>6} {wall:>10.1f} {own:>14.1f} {ideal:>10.1f} {100 * (wall / ideal - 1):>9.1f}%")
    return wall, ideal, len(results)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", default="0,1,2,3")
    parser.add_argument("--seeds", default="0-3")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train-samples", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args(argv)

    import ray

    from sweeps.runner import QUIET_ENV
    from trainables.data.stsb import load_stsb
    from trainables.paths import default_data_dir
    from trainables.tiny import build_tiny_model

    os.environ.update(QUIET_ENV)
    work = Path(tempfile.mkdtemp(prefix="orchestration-"))
    sentences = [e.sentence1 for e in load_stsb(default_data_dir(), splits=("train",))["train"][:2000]]
    model = build_tiny_model("bert", work / "tiny-bert", layers=4, hidden=64, sentences=sentences)
    ray.init(address="local", num_cpus=args.concurrency, include_dashboard=False, log_to_driver=False)
    common = ["--models", str(model), "--layers", args.layers, "--seeds", args.seeds, "--epochs", str(args.epochs),
              "--max-train-samples", str(args.train_samples), "--max-eval-samples", "300", "--batch-size", "16",
              "--cpus-per-trial", "1", "--gpus-per-trial", "0", "--storage-path", str(work / "runs"),
              "--mlflow-uri", f"sqlite:///{work / 'mlflow.db'}", "--experiment", "orchestration"]
    print(f"{'variant':<28} {'trials':>6} {'wall (s)':>10} {'sum trial (s)':>14} {'ideal (s)':>10} {'overhead':>10}")
    reuse = run_variant("reused actors (default)", [*common, "--name", "reuse"], args.concurrency)
    fresh = run_variant("fresh worker per trial", [*common, "--name", "fresh", "--no-reuse-actors"], args.concurrency)
    per_trial = lambda v: (v[0] - v[1]) * args.concurrency / v[2]
    print(f"\nlost per trial: reused {per_trial(reuse):.2f} s, fresh {per_trial(fresh):.2f} s; "
          f"sweep wall time fresh / reused = {fresh[0] / reuse[0]:.2f}x")
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
