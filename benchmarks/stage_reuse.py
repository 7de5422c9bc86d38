"""Stage reuse: wall time of `improvements.py --smoke-test` (WS+TMFT and DAPT+TMFT) with the stage
store, against an estimate of the same sweep without reuse.

Runs, in a fresh storage path, the smoke sweep twice as separate processes (as a user would):

1. the first sweep computes every stage once (one DAPT per model, one WS per model and layer);
2. a second, identical sweep with the same storage path reuses all of them.

Without reuse, every downstream trial would compute its own stage: the estimate is the first sweep's wall time
plus, for every stage, (number of
trials that used it - 1) x its measured compute time (from `<storage>/stages/executions.jsonl`).
Stage times are summed serially, as on one worker; the first stage in a fresh worker process
pays first-call overheads (lazy imports), so the estimate uses each kind's median time for the extra
executions.

    python benchmarks/stage_reuse.py                 # prints the figures
    python benchmarks/stage_reuse.py --keep DIR      # keep the storage path (MLflow store, stages)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results_file  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _sweep(storage: Path, name: str, extra: list[str]) -> float:
    command = [
        sys.executable,
        str(ROOT / "sweeps" / "improvements.py"),
        "--smoke-test",
        "--improvement",
        "both",
        "--storage-path",
        str(storage),
        "--name",
        name,
        "--experiment",
        "stage-reuse",
        *extra,
    ]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds


def _trials_per_stage(storage: Path, sweep: str) -> Counter:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{storage / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("stage-reuse")
    runs = client.search_runs(
        [experiment.experiment_id], filter_string="tags.`embsweep.role` = 'trial'", max_results=10000
    )
    return Counter(r.data.params["stage_key"] for r in runs if r.data.params.get("sweep") == sweep)


def main(argv=None) -> None:
    from trainables.stages.upstream import read_executions

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", default=None, help="storage path to use and keep (default: a temporary one)")
    parser.add_argument("--cpus-per-trial", default="1")
    results_file.add_flag(parser, "stage_reuse")
    args = parser.parse_args(argv)
    storage = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="stage-reuse-"))
    extra = ["--cpus-per-trial", args.cpus_per_trial]
    try:
        first = _sweep(storage, "first", extra)
        executions = read_executions(storage / "stages")
        second = _sweep(storage, "second", extra)
        after = read_executions(storage / "stages")
        uses = _trials_per_stage(storage, "first")
    finally:
        if not args.keep:
            shutil.rmtree(storage, ignore_errors=True)

    by_kind: dict[str, list[float]] = {}
    for e in executions:
        by_kind.setdefault(e["kind"], []).append(float(e["seconds"]))
    median = {kind: statistics.median(times) for kind, times in by_kind.items()}
    extra_runs = Counter()
    extra_seconds = 0.0
    for e in executions:
        repeats = max(0, uses[e["key"]] - 1)
        extra_runs[e["kind"]] += repeats
        extra_seconds += repeats * median[e["kind"]]
    trials = sum(uses.values())
    stage_seconds = sum(float(e["seconds"]) for e in executions)
    print(
        f"improvements.py --smoke-test --improvement both: {trials} TMFT trials, "
        f"{len(executions)} stage executions ({', '.join(f'{len(t)} {k}' for k, t in sorted(by_kind.items()))})"
    )
    for kind, times in sorted(by_kind.items()):
        print(f"  {kind} stage compute: " + ", ".join(f"{t:.1f}" for t in times) + f" s (median {median[kind]:.1f} s)")
    print(
        f"with reuse, first sweep (computes each stage once): {first:7.1f} s wall  (stages {stage_seconds:.1f} s of "
        "compute)"
    )
    print(
        f"with reuse, second sweep (same storage path):      {second:7.1f} s wall  "
        f"({len(after) - len(executions)} new stage executions)"
    )
    print(
        f"without reuse (estimate):                          {first + extra_seconds:7.1f} s wall  "
        f"(+{sum(extra_runs.values())} stage executions: "
        + ", ".join(f"{n} {k} x {median[k]:.1f} s" for k, n in sorted(extra_runs.items()))
        + ")"
    )
    print(
        f"two sweeps without reuse (estimate):               {2 * (first + extra_seconds):7.1f} s wall, "
        f"with reuse {first + second:.1f} s: {2 * (first + extra_seconds) / (first + second):.2f}x"
    )
    results_file.write(
        args.results_json,
        "stage_reuse",
        ["sweep", "wall"],
        [
            ["with reuse, first sweep (computes each stage once)", f"{first:.1f} s"],
            ["with reuse, second sweep (same storage path)", f"{second:.1f} s"],
            ["without reuse (estimate)", f"{first + extra_seconds:.1f} s"],
            [
                "two sweeps: without reuse (estimate) / with reuse",
                f"{2 * (first + extra_seconds) / (first + second):.2f}x",
            ],
        ],
        summary=f"improvements.py --smoke-test --improvement both: {trials} TMFT trials, {len(executions)} stage "
        "executions; without reuse every trial computes its own stage (estimated from the stages' median times).",
    )


if __name__ == "__main__":
    main()
