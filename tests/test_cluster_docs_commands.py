"""Every shell block of docs/cluster.md is run by a test or says why not, with the docs' markers: the paragraph
right above a block holds `*Tested: <test file>*` (a file that exists) or `*Not run by the tests: <reason>*`. An
unmarked block may hold only sweep dry runs (`--dry-run`: the plan a real run makes, nothing starts), which this
test runs as written."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cluster.md"
SHELL_FENCES = ("", "bash", "sh", "shell", "console")


def shell_blocks() -> list[tuple[str, str]]:
    """(the paragraph above, the block) of every shell block of the page, list items included."""
    text = PAGE.read_text()
    found = []
    for match in re.finditer(r"(?m)^([ \t]*)```([\w-]*)[^\n]*\n(.*?)^[ \t]*```", text, re.S):
        if match.group(2) in SHELL_FENCES:
            before = text[: match.start()].rstrip("\n").split("\n\n")[-1]
            found.append((before, textwrap.dedent(match.group(3))))
    return found


def commands(block: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", block)
    lines = (re.sub(r"\s+#\s.*$", "", line).strip() for line in joined.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def unmarked() -> list[str]:
    return [
        command
        for before, block in shell_blocks()
        if "*Tested:" not in before and "*Not run by the tests:" not in before
        for command in commands(block)
    ]


def test_every_block_is_tested_or_says_why_not():
    blocks = shell_blocks()
    assert len(blocks) > 20
    for before, block in blocks:
        tested = re.search(r"\*Tested: (tests/\S+\.py)", before)
        if tested:
            assert (ROOT / tested.group(1)).is_file(), tested.group(1)
        elif "*Not run by the tests:" in before:
            reason = before.split("*Not run by the tests:", 1)[1]
            assert len(reason.strip(" *")) > 10, before
    for command in unmarked():
        assert re.match(r"python sweeps/\w+\.py .*--dry-run", command), f"docs/cluster.md: unmarked command {command}"


@pytest.mark.sweep
def test_the_unmarked_dry_runs_run_as_written():
    runs = unmarked()
    assert runs
    for command in runs:
        argv = shlex.split(command)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "GPU-hours" in done.stdout and "cost on g5.12xlarge" in done.stdout, done.stdout[-3000:]
