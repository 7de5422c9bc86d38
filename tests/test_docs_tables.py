"""The docs' generated tables (docs/methods.md's methods, docs/data.md's evaluation sets) are what
`python -m analysis docs` writes from the code: a stale page fails here, so CI fails with it."""

from __future__ import annotations

import shutil
import subprocess
import sys
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

    done = subprocess.run(
        [sys.executable, "-m", "analysis", "docs", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_a_page_without_a_tables_markers_is_named(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    (docs / "data.md").write_text("# Data\n")
    with pytest.raises(ValueError, match=r"docs/data.md lacks the markers '<!-- STS sets table"):
        render(docs)
