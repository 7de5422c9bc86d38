"""How fast every command answers `--help` and refuses a bad flag, this tree against an earlier revision and
against importing torch alone, in one run.

For each sweep script (`sweeps/<name>.py`), each other command under `sweeps/` and each `python -m analysis`
subcommand: the median wall time of `--rounds` fresh processes printing `--help`, and of as many refusing
`--no-such-flag` (exit 2), from this tree and from a copy of `--baseline` (a git revision, `git archive`d
into a temporary folder), the two trees' runs interleaved so a load on the machine falls on both alike.
Printed per command: both medians, their ratio (this tree / the baseline), and each against
`python -c "import torch"` measured in the same run (what one heavy import costs on this machine now).
The goal is under 1 s for every command here; the ratios are what compares across machines.

    python benchmarks/cli_latency.py                      # baseline: main
    python benchmarks/cli_latency.py --baseline HEAD~5 --rounds 5
    python benchmarks/cli_latency.py --only electra_layers,tsdae --no-baseline
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import results_file  # noqa: E402
from sweeps.engine.scripts import sweep_scripts  # noqa: E402

OTHER_COMMANDS = {  # the commands under sweeps/ that are not sweeps: module and the flag that prints help
    "local_cluster": ["-m", "sweeps.local_cluster"],
    "mlflow_server": ["-m", "sweeps.mlflow_server"],
    "mlflow_sync": ["-m", "sweeps.mlflow_sync"],
}
ANALYSIS = ("report", "mteb", "mteb-run", "methods", "docs", "cka")
BAD_FLAG = "--no-such-flag"


def commands() -> dict[str, list[str]]:
    """Every command's argv after the interpreter, by a short name."""
    found = {name: [f"sweeps/{name}.py"] for name in sweep_scripts()}
    found.update(OTHER_COMMANDS)
    found.update({f"analysis {sub}": ["-m", "analysis", sub] for sub in ANALYSIS})
    return found


def timed(argv: list[str], tree: Path) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], cwd=tree, env=env, capture_output=True, timeout=120)
    return time.perf_counter() - started, done.returncode


def medians(argv: list[str], trees: dict[str, Path], rounds: int) -> dict[str, dict[str, float]]:
    """{tree: {"help": s, "refusal": s}}: each tree's medians, its runs interleaved with the others'."""
    samples = {name: {"help": [], "refusal": []} for name in trees}
    for _ in range(rounds):
        for name, tree in trees.items():
            seconds, code = timed([*argv, "--help"], tree)
            if code != 0:
                raise SystemExit(f"{name}: {' '.join(argv)} --help exited {code}")
            samples[name]["help"].append(seconds)
            seconds, code = timed([*argv, BAD_FLAG], tree)
            if code != 2:
                raise SystemExit(f"{name}: {' '.join(argv)} {BAD_FLAG} exited {code}, not 2")
            samples[name]["refusal"].append(seconds)
    return {
        name: {kind: statistics.median(values) for kind, values in kinds.items()} for name, kinds in samples.items()
    }


def _tree(revision: str, into: Path) -> Path:
    into.mkdir()
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="main", help="the git revision to compare with (default: main)")
    parser.add_argument("--no-baseline", action="store_true", help="time this tree only")
    parser.add_argument("--rounds", type=int, default=3, help="runs per command, flag and tree (the median is kept)")
    parser.add_argument("--only", default="", help="comma-separated command names (default: every command)")
    results_file.add_flag(parser, "cli_latency")
    args = parser.parse_args(argv)
    chosen = commands()
    if args.only:
        wanted = args.only.split(",")
        chosen = {name: argv for name, argv in chosen.items() if name in wanted}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": ROOT}
        if not args.no_baseline:
            trees["baseline"] = _tree(args.baseline, Path(tmp) / "baseline")
        torch_import = statistics.median(timed(["-c", "import torch"], ROOT)[0] for _ in range(args.rounds))
        bare = statistics.median(timed(["-c", "pass"], ROOT)[0] for _ in range(args.rounds))
        print(
            f"python -c 'import torch': {torch_import:.2f} s; python -c pass: {bare:.2f} s (medians of {args.rounds})"
        )
        header = f"{'command':24s} {'--help':>8s} {'refusal':>8s}"
        if not args.no_baseline:
            header += f" {'baseline':>9s} {'b. refusal':>10s} {'ratio':>6s}"
        print(header + f" {'help/torch':>10s}")
        slowest, rows = 0.0, []
        for name, command in chosen.items():
            found = medians(command, trees, args.rounds)
            mine = found["this tree"]
            slowest = max(slowest, mine["help"], mine["refusal"])
            line = f"{name:24s} {mine['help']:7.2f}s {mine['refusal']:7.2f}s"
            if not args.no_baseline:
                base = found["baseline"]
                line += f" {base['help']:8.2f}s {base['refusal']:9.2f}s {mine['help'] / base['help']:6.2f}"
            print(line + f" {mine['help'] / torch_import:10.2f}", flush=True)
            row = [name, f"{mine['help']:.2f}", f"{mine['refusal']:.2f}"]
            if not args.no_baseline:
                row += [f"{found['baseline']['help']:.2f}", f"{mine['help'] / found['baseline']['help']:.2f}"]
            rows.append(row)
        verdict = f"slowest answer of this tree: {slowest:.2f} s ({'under' if slowest < 1 else 'NOT under'} 1 s)"
        print(verdict)
    columns = ["command", "--help (s)", "bad flag refused (s)"]
    if not args.no_baseline:
        columns += [f"--help at {args.baseline} (s)", "ratio"]
    results_file.write(
        args.results_json,
        "cli_latency",
        columns,
        rows,
        summary=f"Medians of {args.rounds} runs; python -c 'import torch' took {torch_import:.2f} s in the same run; "
        + verdict
        + ".",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
