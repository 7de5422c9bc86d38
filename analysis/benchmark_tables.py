"""The benchmarks page's result tables (docs/benchmarks.md), written from the results files the benchmarks write.

Each script in benchmarks/ that has a result writes `benchmarks/results/<name>.json` (`--results-json`,
benchmarks/results_file.py): the command that ran, the machine, the date, the commit, and its table (`columns`,
`rows`), with a `summary` above it and `notes` below. `python -m analysis docs` renders each file between its
markers in docs/benchmarks.md; a test holds the page to the files, so a new run shows up by rerunning the command,
never by a hand edit, and the page keeps one current table per benchmark (no history: the file is overwritten).
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
REQUIRED = ("benchmark", "command", "machine", "date", "commit", "columns", "rows")


def begin(name: str) -> str:
    return f"<!-- benchmark {name}: python -m analysis docs -->"


def end(name: str) -> str:
    return f"<!-- end of benchmark {name} -->"


def names(results: Path = RESULTS) -> list[str]:
    return sorted(p.stem for p in results.glob("*.json"))


def load(name: str, results: Path = RESULTS) -> dict:
    """A results file, checked: every required field, rows as wide as the columns (ValueError naming the file)."""
    path = results / f"{name}.json"
    data = json.loads(path.read_text())
    missing = [key for key in REQUIRED if not data.get(key)]
    if missing:
        raise ValueError(
            f"benchmarks/results/{path.name} lacks {', '.join(missing)}: rerun the benchmark to rewrite it"
        )
    if data["benchmark"] != name:
        raise ValueError(f"benchmarks/results/{path.name} names benchmark {data['benchmark']!r}, not {name!r}")
    for row in data["rows"]:
        if len(row) != len(data["columns"]):
            raise ValueError(f"benchmarks/results/{path.name}: row {row} has not {len(data['columns'])} cells")
    return data


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _commit(commit: str) -> str:
    """`abc1234` and any words after it as they are."""
    sha, _, rest = commit.partition(" ")
    return f"`{sha}`" + (f" {rest}" if rest else "")


def table(name: str, results: Path = RESULTS) -> str:
    """The rendered result of one benchmark, with its markers."""
    data = load(name, results)
    lines = [
        begin(name),
        f"Measured {data['date']} on {data['machine']}, commit {_commit(data['commit'])}: `{data['command']}`",
        "",
    ]
    if data.get("source"):
        lines += [f"*Source: {data['source']}*", ""]
    if data.get("summary"):
        lines += [data["summary"], ""]
    lines.append("| " + " | ".join(_cell(c) for c in data["columns"]) + " |")
    lines.append("|" + "---|" * len(data["columns"]))
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in data["rows"]]
    if data.get("notes"):
        lines += ["", data["notes"]]
    return "\n".join([*lines, end(name)])
