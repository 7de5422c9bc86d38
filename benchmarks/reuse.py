"""Sweeps that remember (sweeps/engine/reuse.py): what reuse and --extend save, measured as a user runs them.

Three figures, each in a fresh storage path, each sweep a separate process:

1. the default job run twice (`electra_layers.py --smoke-test`: real trials of the tiny model on the CPU):
   the trials the second run schedules (0 expected), its wall time (under 15 s expected) against the
   first's, and whether the two runs' reports (summary.csv of `python -m analysis report` after each) are
   the same;
2. seeds 0-4, then `--extend` to seeds 0-9 (simulated trials, `--simulate`): the trials the extension runs
   (only the new ones expected), and whether its end-of-sweep table has the shape of a fresh 0-9 sweep's and
   the same numbers (a fresh 0-9 sweep with --recompute in the same store);
3. Table 1's improvements grid after the default grid (`improvements.py --smoke-test --improvement
   ws,dapt,none` after `electra_layers.py --smoke-test`, simulated): the trials reused and the GPU-hours
   saved, as `--dry-run` predicts them and as the real run reports them.

    python benchmarks/reuse.py                 # prints the figures
    python benchmarks/reuse.py --keep DIR      # keep the storage paths
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import results_file  # noqa: E402

ROWS: list[list[str]] = []  # the results file's table: figure, measure, value


def _run(script: str, args: list[str]) -> tuple[float, str]:
    command = [sys.executable, str(ROOT / "sweeps" / script), *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def _reused(out: str) -> tuple[int, int, float]:
    """(reused, total, GPU-hours saved) from a sweep's or a dry run's `reused:` line."""
    line = next((line for line in out.splitlines() if line.strip().startswith("reused:")), "")
    counts = re.search(r"reused: (\d+) of (\d+) trials", line)
    hours = re.search(r"saving ([\d.e+-]+) GPU-hours", line)
    if not counts:
        return 0, 0, 0.0
    return int(counts.group(1)), int(counts.group(2)), float(hours.group(1)) if hours else 0.0


def _table(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "dev Spearman" in line and not line.startswith("["))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def _report(storage: Path, out: Path) -> str:
    from analysis.report import build_report

    build_report(f"sqlite:///{storage}/mlflow.db", out)
    return (out / "summary.csv").read_text()


def default_job_twice(root: Path) -> None:
    storage = root / "twice"
    common = ["--smoke-test", "--storage-path", str(storage)]
    first, _ = _run("electra_layers.py", [*common, "--name", "first"])
    before = _report(storage, root / "report-first")
    second, out = _run("electra_layers.py", [*common, "--name", "second"])
    after = _report(storage, root / "report-second")
    reused, total, _ = _reused(out)
    scheduled = any((storage / "second").glob("experiment_state*"))
    print("1. the default job (electra_layers.py --smoke-test, real trials on the CPU) run twice")
    print(f"   first run: {first:.1f} s; second run: {second:.1f} s ({second / first:.2f} of the first)")
    print(f"   second run: {reused} of {total} trials reused, {total - reused} scheduled (Tune started: {scheduled})")
    print(f"   the same report (summary.csv) after both: {before == after}")
    ROWS.extend(
        [
            ["default job twice", "second run / first run (s)", f"{second:.1f} / {first:.1f} = {second / first:.2f}"],
            ["default job twice", "trials reused, scheduled", f"{reused} of {total}, {total - reused}"],
            ["default job twice", "the same report", str(before == after)],
        ]
    )


def extend_seeds(root: Path) -> None:
    storage = root / "extend"
    common = ["--smoke-test", "--simulate", "--simulate-seconds", "0.2", "--storage-path", str(storage)]
    _, _ = _run("electra_layers.py", [*common, "--seeds", "0-4", "--name", "five"])
    seconds, grown = _run("electra_layers.py", [*common, "--extend", "five", "--seeds", "0-9", "--name", "ten"])
    _, fresh = _run("electra_layers.py", [*common, "--seeds", "0-9", "--name", "fresh", "--recompute"])
    reused, total, _ = _reused(grown)
    print("2. seeds 0-4, then --extend to seeds 0-9 (electra_layers.py --smoke-test --simulate: 2 layers)")
    print(f"   the extension: {total} trials, {reused} reused, {total - reused} run ({seconds:.1f} s)")
    print(f"   its table is a fresh 0-9 sweep's (shape and numbers): {_table(grown) == _table(fresh)}")
    ROWS.extend(
        [
            ["seeds 0-4, --extend to 0-9", "trials reused, run", f"{reused}, {total - reused} ({seconds:.1f} s)"],
            ["seeds 0-4, --extend to 0-9", "table equals a fresh 0-9 sweep's", str(_table(grown) == _table(fresh))],
        ]
    )


def improvements_after_default(root: Path) -> None:
    storage = root / "table1"
    common = ["--smoke-test", "--simulate", "--simulate-seconds", "0.2", "--storage-path", str(storage)]
    _run("electra_layers.py", [*common, "--name", "default"])
    grid = [*common, "--improvement", "ws,dapt,none"]
    _, planned = _run("improvements.py", [*grid, "--dry-run"])
    _, out = _run("improvements.py", [*grid, "--name", "table1"])
    predicted, real = _reused(planned), _reused(out)
    print("3. Table 1's improvements grid after the default grid (--smoke-test --simulate)")
    for what, (reused, total, hours) in (("--dry-run", predicted), ("the run", real)):
        share = reused / total if total else 0.0
        print(f"   {what}: {reused} of {total} trials reused ({share:.0%}), {hours:.3g} GPU-hours saved")
        ROWS.append(
            [f"Table 1 after the default grid, {what}", "reused, GPU-hours saved", f"{reused} of {total}, {hours:.3g}"]
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", help="keep the storage paths in this folder")
    parser.add_argument("--only", type=int, choices=(1, 2, 3), help="run one figure")
    results_file.add_flag(parser, "reuse")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="embsweep-reuse-"))
    root.mkdir(parents=True, exist_ok=True)
    print("Timings on whatever machine this runs on; on a shared machine, compare the ratios.")
    try:
        for number, figure in enumerate((default_job_twice, extend_seeds, improvements_after_default), 1):
            if args.only in (None, number):
                figure(root)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    results_file.write(args.results_json, "reuse", ["figure", "measure", "value"], ROWS)


if __name__ == "__main__":
    main()
