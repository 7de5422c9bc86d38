"""The docs' generated tables, each written from its one source (`python -m analysis docs`):
docs/methods/index.md's table of methods from each method's `MethodInfo` (analysis/methods_table.py), and
docs/data.md's tables of evaluation sets from each set's `SetInfo` (trainables/evaluation/sets.py), and
docs/reference/cli.md from every script's declared settings (analysis/cli_reference.py), and docs/benchmarks.md's
result tables from the results files the benchmarks write (analysis/benchmark_tables.py).
Each table sits between its markers in its page; the prose around it is the page's own. `--check`
writes nothing and exits 1 naming each stale page (a test runs the same check, so CI fails when a
page and the code differ); a new method or set therefore needs the command, never a hand edit."""

from __future__ import annotations

from pathlib import Path

SECTIONS = {"sts": "STS sets", "domain": "domain sets"}


def _set_begin(section: str) -> str:
    return f"<!-- {SECTIONS[section]} table: python -m analysis docs -->"


def _set_end(section: str) -> str:
    return f"<!-- end of {SECTIONS[section]} table -->"


def sets_table(section: str) -> str:
    """The table of every registered set of `section`, with its markers, as docs/data.md holds it."""
    from trainables.evaluation.sets import SET_REGISTRY, eval_set_names

    lines = [
        _set_begin(section),
        "| set | shown as | what | release files to put under the data dir | hub copy |",
        "|---|---|---|---|---|",
    ]
    for name in eval_set_names():
        found = SET_REGISTRY.get(name)
        if found.info.section == section:
            lines.append(found.info.row(name, found.description))
    return "\n".join([*lines, _set_end(section)])


def tables() -> dict[str, list[tuple[str, str, str]]]:
    """{page under docs/: [(begin marker, end marker, the table with its markers)]}."""
    from analysis import benchmark_tables, cli_reference, methods_table

    return {
        "methods/index.md": [(methods_table.BEGIN, methods_table.END, methods_table.section())],
        "reference/cli.md": [(cli_reference.BEGIN, cli_reference.END, cli_reference.section())],
        "benchmarks.md": [
            (benchmark_tables.begin(n), benchmark_tables.end(n), benchmark_tables.table(n))
            for n in benchmark_tables.names()
        ],
        "data.md": [(_set_begin(s), _set_end(s), sets_table(s)) for s in SECTIONS],
    }


def render(docs: Path) -> dict[str, tuple[str, str]]:
    """{page: (its text now, its text with every generated table rewritten)}; a page that lacks a
    table's markers is an error naming them (the markers are the page's, never guessed)."""
    out = {}
    for page, parts in tables().items():
        text = new = (docs / page).read_text()
        for begin, end, table in parts:
            if begin not in new or end not in new:
                raise ValueError(f"docs/{page} lacks the markers {begin!r} ... {end!r}: put them where the table goes")
            new = new[: new.index(begin)] + table + new[new.index(end) + len(end) :]
        out[page] = (text, new)
    return out


def stale(docs: Path) -> list[str]:
    """The pages whose tables differ from what their sources give."""
    return [page for page, (text, new) in render(docs).items() if text != new]


def write(docs: Path) -> list[str]:
    """Rewrite the stale pages' tables; returns the pages written."""
    written = []
    for page, (text, new) in render(docs).items():
        if text != new:
            (docs / page).write_text(new)
            written.append(page)
    return written
