"""The results file a benchmark writes: `benchmarks/results/<name>.json` (or `--results-json PATH`), read by
`python -m analysis docs` into docs/benchmarks.md (analysis/benchmark_tables.py). It records the command as run,
the machine (CPU model and count, GPUs), the date, the commit, and the benchmark's table; a rerun overwrites it."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def add_flag(parser, name: str) -> None:
    """`--results-json`, defaulting to benchmarks/results/<name>.json."""
    parser.add_argument(
        "--results-json",
        default=str(ROOT / "benchmarks" / "results" / f"{name}.json"),
        help=f"where to write the result table for docs/benchmarks.md (benchmarks/results/{name}.json); '' for none",
    )


def machine() -> str:
    """CPU model and count, and the GPUs torch sees, in words."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    words = f"{os.cpu_count()} CPU cores ({model})"
    try:
        import torch

        if torch.cuda.is_available():
            gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            words += ", GPUs: " + ", ".join(gpus)
        else:
            words += ", no GPU"
    except ImportError:
        pass
    if hasattr(os, "getloadavg"):
        words += f"; load average {os.getloadavg()[0]:.1f} when it ended"
    return words


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        return "unknown (not a git checkout)"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    return done.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else "")


def write(path: str, name: str, columns: list, rows: list, summary: str = "", notes: str = "") -> None:
    """Write the results file (nothing when `path` is empty); prints where."""
    if not path:
        return
    data = {
        "benchmark": name,
        "command": " ".join(["python", f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
        "machine": machine(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "source": "this run",
        "summary": summary,
        "columns": list(columns),
        "rows": [list(row) for row in rows],
        "notes": notes,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"results: {path} (python -m analysis docs renders it into docs/benchmarks.md)")
