"""The docs' generated tables (docs/methods/index.md's methods, docs/data.md's evaluation sets) are what
`python -m analysis docs` writes from the code: a stale page fails here, so CI fails with it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analysis.docs_tables import render, stale, write
from trainables.evaluation.sets import SET_REGISTRY, eval_set_names

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_tables_are_what_the_code_declares():
    assert stale(ROOT / "docs") == [], "the docs' tables are stale: regenerate them with python -m analysis docs"


def test_every_set_has_one_row_written_from_its_set_info():
    page = (ROOT / "docs" / "data.md").read_text()
    for name in eval_set_names():
        info = SET_REGISTRY.get(name).info
        assert info.display_name and info.section in ("sts", "domain"), name
        assert page.count(f"| `{name}` | {info.display_name} |") == 1, name


@pytest.mark.sweep  # about 2 s: out of the fast run, which stays under 3 minutes
def test_the_command_rewrites_only_the_tables_and_check_names_a_stale_page(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    page = docs / "data.md"
    before = page.read_text()
    page.write_text(
        before.replace("| `stsb` | STS-B |", "| `stsb` | STS-B (edited by hand) |").replace("## STS", "## STS!")
    )
    assert stale(docs) == ["data.md"]
    assert write(docs) == ["data.md"] and stale(docs) == []
    assert page.read_text() == before.replace("## STS", "## STS!")  # the prose is the page's own

    from analysis.__main__ import main

    assert main(["docs", "--check"]) == 0  # the command CI's check runs: the repository's pages are current


def test_a_page_without_a_tables_markers_is_named(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    (docs / "data.md").write_text("# Data\n")
    with pytest.raises(ValueError, match=r"docs/data.md lacks the markers '<!-- STS sets table"):
        render(docs)


def test_the_methods_table_reads_a_citation_on_one_line_or_several():
    from analysis.methods_table import _field

    one = "@misc{toy2026, title = {A Toy Regression}, author = {Doe, Jane}, year = {2026}}"
    assert (_field(one, "title"), _field(one, "year"), _field(one, "note")) == ("A Toy Regression", "2026", "")
    several = "@inproceedings{x,\n  title = {Are {ELECTRA}'s Sentence\n Embeddings},\n  year = {2024},\n}"
    assert _field(several, "title") == "Are ELECTRA's Sentence Embeddings"


def test_the_cli_reference_has_every_script_and_every_setting_with_its_kind_default_and_source():
    from analysis.cli_reference import scripts
    from sweeps.engine.runner import parser_for

    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for module in scripts():
        assert f"## `sweeps/{module}.py`" in page, module
    import sweeps.tsdae

    keywords = sweeps.tsdae.main.keywords
    rows = [line for line in page.split("## `sweeps/tsdae.py`")[1].split("## `sweeps/")[0].splitlines()]
    for setting in parser_for(keywords["method"], keywords["prog"]).settings:
        row = next(r for r in rows if r.startswith(f"| `{setting.option}`"))
        assert setting.kind.describe().replace("|", "\\|") in row and f"| {setting.source} |" in row, row
    assert "`--lr`" in page and "ELECTRA paper" in page


def test_the_cli_reference_follows_a_changed_bound(monkeypatch):
    """A bound changed in a declaration changes the page: the page is the declarations, not a copy of them."""
    from analysis import cli_reference
    from trainables.core import settings

    before = cli_reference.section()
    monkeypatch.setattr(settings.Int, "describe", lambda self: "a changed bound")
    after = cli_reference.section()
    assert "a changed bound" in after and "a changed bound" not in before


def test_every_benchmark_result_is_rendered_with_its_command_machine_date_and_commit():
    from analysis.benchmark_tables import RESULTS, load, names

    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert len(names()) >= 10
    for name in names():
        data = load(name)
        assert f"`{data['command']}`" in page and data["machine"] in page and data["date"] in page, name
        assert f"commit `{data['commit'].split()[0]}`" in page
    for script in (ROOT / "benchmarks").glob("*.py"):
        if script.stem != "results_file":
            assert f"`benchmarks/{script.name}" in page, f"docs/benchmarks.md has no section for {script.name}"
    assert RESULTS == ROOT / "benchmarks" / "results"


def test_a_new_result_rewrites_only_its_table_and_a_bad_file_is_named(tmp_path, monkeypatch):
    import json

    from analysis import benchmark_tables

    results = tmp_path / "results"
    shutil.copytree(benchmark_tables.RESULTS, results)
    monkeypatch.setattr(benchmark_tables, "RESULTS", results)
    monkeypatch.setattr(benchmark_tables.load, "__defaults__", (results,))
    monkeypatch.setattr(benchmark_tables.names, "__defaults__", (results,))
    monkeypatch.setattr(benchmark_tables.table, "__defaults__", (results,))
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    data = json.loads((results / "tsdae.json").read_text())
    data.update(date="2030-01-01 00:00 UTC", rows=[["ours run first", "2.00"]])
    (results / "tsdae.json").write_text(json.dumps(data))
    assert stale(docs) == ["benchmarks.md"]
    before = (docs / "benchmarks.md").read_text()
    write(docs)
    after = (docs / "benchmarks.md").read_text()
    assert "| ours run first | 2.00 |" in after and "2030-01-01" in after and "| ours run second | 1.06 |" not in after
    assert after.split("<!-- benchmark tsdae")[0] == before.split("<!-- benchmark tsdae")[0]
    del data["machine"]
    (results / "tsdae.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"benchmarks/results/tsdae.json lacks machine"):
        render(docs)


def test_a_benchmark_writes_a_results_file_the_page_renders(tmp_path, monkeypatch):
    """benchmarks/results_file.py's file is what analysis/benchmark_tables.py reads: command, machine, date,
    commit, the table; and every benchmark script offers `--results-json` under its own name."""
    import argparse
    import sys

    sys.path.insert(0, str(ROOT))
    from analysis.benchmark_tables import table
    from benchmarks import results_file

    parser = argparse.ArgumentParser()
    results_file.add_flag(parser, "toy")
    assert parser.parse_args([]).results_json.endswith("benchmarks/results/toy.json")
    monkeypatch.setattr(sys, "argv", ["benchmarks/toy.py", "--steps", "3"])
    results_file.write(str(tmp_path / "toy.json"), "toy", ["arm", "seconds"], [["ours", "1.0"]], summary="A toy.")
    rendered = table("toy", tmp_path)
    assert "`python benchmarks/toy.py --steps 3`" in rendered and "| ours | 1.0 |" in rendered
    assert "CPU cores" in rendered and "A toy." in rendered
    results_file.write("", "toy", ["arm"], [["x"]])  # '' writes nothing
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        if script.stem != "results_file":
            text = script.read_text()
            assert f'results_file.add_flag(parser, "{script.stem}' in text, script.name
            assert "results_file.write(" in text, script.name
