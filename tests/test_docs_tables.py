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
