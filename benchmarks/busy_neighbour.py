"""A smoke sweep beside a busy neighbour: OpenMP threads that spin while they wait against threads that sleep.

The tests run side by side (pytest-xdist workers, CI's two lanes), so a sweep often shares the cores with
another process running torch on several threads. torch's OpenMP threads spin for a while after each parallel
region unless `OMP_WAIT_POLICY=PASSIVE` (which tests/conftest.py sets for the tests and every process they
start). This runs `sweeps/electra_layers.py --smoke-test` (a tiny random model, real trials) three ways, in
one run, each `--rounds` times, their order alternated:

- alone;
- beside a neighbour: a process multiplying small matrices on as many torch threads as the machine has cores,
  for as long as the sweep runs, with OpenMP's default wait policy (threads spin);
- beside the same neighbour with `OMP_WAIT_POLICY=PASSIVE` for both (threads sleep while they wait).

Printed: each arm's median wall time and its ratio to the sweep alone; the neighbour's work done per second.

    python benchmarks/busy_neighbour.py
    python benchmarks/busy_neighbour.py --rounds 3
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

NEIGHBOUR = """
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
layers = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)])
x = torch.randn(16, 32, 64)
start, done = time.time(), 0
with torch.no_grad():
    while open(sys.argv[2]).read() == "run":
        layers(x)
        done += 1
print(done / (time.time() - start))
"""

ARMS = {
    "alone": None,
    "beside a spinning neighbour": "",
    "beside a sleeping neighbour (OMP_WAIT_POLICY=PASSIVE)": "PASSIVE",
}


def _env(policy: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    return env


def run_arm(policy: str | None, threads: int) -> tuple[float, float | None]:
    """The smoke sweep's wall time (s), and the neighbour's iterations per second (None alone)."""
    with tempfile.TemporaryDirectory(prefix="busy-neighbour-") as tmp:
        flag = Path(tmp) / "flag"
        flag.write_text("run")
        neighbour = None
        if policy is not None:
            neighbour = subprocess.Popen(
                [sys.executable, "-c", NEIGHBOUR, str(threads), str(flag)],
                env=_env(policy),
                stdout=subprocess.PIPE,
                text=True,
            )
            time.sleep(2)  # the neighbour has imported torch and is busy
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "sweeps/electra_layers.py", "--smoke-test", "--storage-path", str(Path(tmp) / "runs")],
            cwd=ROOT,
            env=_env(policy),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wall = time.perf_counter() - start
        rate = None
        if neighbour is not None:
            flag.write_text("stop")
            rate = float(neighbour.communicate(timeout=60)[0])
        return wall, rate


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1, help="runs of each arm (medians are printed)")
    results_file.add_flag(parser, "busy_neighbour")
    args = parser.parse_args(argv)
    threads = os.cpu_count() or 2
    walls: dict[str, list[float]] = {arm: [] for arm in ARMS}
    rates: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for round_ in range(args.rounds):
        order = list(ARMS) if round_ % 2 == 0 else list(reversed(ARMS))
        for arm in order:
            wall, rate = run_arm(ARMS[arm], threads)
            walls[arm].append(wall)
            if rate is not None:
                rates[arm].append(rate)
            print(f"round {round_ + 1}, {arm}: {wall:.1f} s", flush=True)
    alone = statistics.median(walls["alone"])
    rows = []
    for arm in ARMS:
        wall = statistics.median(walls[arm])
        rate = f"{statistics.median(rates[arm]):.0f}" if rates[arm] else "-"
        rows.append([arm, f"{wall:.1f}", f"{wall / alone:.2f}", rate])
        print(f"{arm:55s} {wall:7.1f} s  x{wall / alone:5.2f}  neighbour {rate} it/s")
    results_file.write(
        args.results_json,
        "busy_neighbour",
        ["arm", "smoke sweep (s)", "ratio to alone", "neighbour (it/s)"],
        rows,
        summary=f"`--smoke-test` of electra_layers, medians of {args.rounds} run(s); the neighbour on {threads} "
        "torch threads.",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
