"""Every shell command in a code block of the README or of a page under docs/ runs, or the page says why not.

A block counts when its fence is ```bash, ```sh, ```shell, ```console or a bare ``` (a diagram or an output is
```text). The paragraph right above a block may mark it: `*Not run by the tests: <reason>*` (a cloud, a GPU, a
server that runs until stopped, hours of compute), or `*Tested: <the test that runs it>*` naming a test file
that exists. The getting-started page's blocks are run as written, in a clean clone, by
tests/test_getting_started.py. Every other command is run here, in this process (about 0.2 s each): a sweep
script's with `--dry-run` added (the plan a real run makes; nothing starts), or as written when it is already a
`--dry-run`, `--help` or `--list-presets`; `python -m sweeps.cluster_config` and `python -m analysis docs --check`
as written. A command of any other kind in an unmarked block fails the test, naming the page and the command.
"""

from __future__ import annotations

import importlib
import re
import shlex
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHELL_FENCES = ("", "bash", "sh", "shell", "console")
NOT_RUN = "*Not run by the tests:"
TESTED = "*Tested:"
CLEAN_CLONE_PAGE = "docs/getting-started.md"  # run as written by tests/test_getting_started.py


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[tuple[str, str, str]]:
    """(fence's info string, the paragraph above the block, the block's text) of every fenced block."""
    text = page.read_text()
    found = []
    for match in re.finditer(r"(?m)^([ \t]*)```([\w-]*)[^\n]*\n(.*?)^[ \t]*```", text, re.S):  # in a list too
        before = text[: match.start()].rstrip("\n").split("\n\n")[-1]
        found.append((match.group(2), before, textwrap.dedent(match.group(3))))
    return found


def commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(re.sub(r"\s+", " ", re.sub(r"\s+#\s.*$", "", line)).strip())
    return out


def shell_blocks():
    """(page relative to the root, its marker or '', the block) of every shell block."""
    for page in pages():
        name = str(page.relative_to(ROOT))
        for fence, before, block in blocks(page):
            if fence not in SHELL_FENCES:
                continue
            marker = NOT_RUN if NOT_RUN in before else TESTED if TESTED in before else ""
            yield name, marker, before, block


def runnable() -> list[tuple[str, str]]:
    """(page, command) of every command this module runs."""
    found = []
    for name, marker, _, block in shell_blocks():
        if marker or name == CLEAN_CLONE_PAGE:
            continue
        found += [(name, command) for command in commands(block)]
    return found


def how(command: str) -> list[str] | None:
    """The argv this module runs for `command` (the script's module first), or None for a kind it cannot run."""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: not a command a shell would run either
        return None
    if len(words) >= 2 and words[0] == "python" and re.fullmatch(r"sweeps/\w+\.py", words[1]):
        argv = words[2:]
        if not {"--dry-run", "--help", "--list-presets"} & set(argv):
            argv.append("--dry-run")
        return ["sweeps." + Path(words[1]).stem, *argv]
    if words[:3] == ["python", "-m", "sweeps.cluster_config"] or words[:5] == [
        "python",
        "-m",
        "analysis",
        "docs",
        "--check",
    ]:
        return [words[2], *words[3:]]
    return None


def test_every_shell_block_is_run_or_marked_with_a_reason():
    unmarked = [(page, c) for page, c in runnable() if how(c) is None]
    assert not unmarked, (
        "commands in the docs that no test runs and no line marks (add `*Not run by the tests: <reason>*` right "
        f"above the block, or make the command one a test runs): {unmarked}"
    )


def test_a_marker_gives_its_reason_and_a_tested_marker_names_a_test_that_exists():
    marked = [(page, before) for page, marker, before, _ in shell_blocks() if marker]
    assert len(marked) >= 10
    for page, before in marked:
        if NOT_RUN in before:
            reason = before.split(NOT_RUN, 1)[1].strip(" *\n")
            assert len(reason) > 15, (page, before)
        else:
            named = re.findall(r"tests/(test_\w+\.py)", before)
            assert named and all((ROOT / "tests" / n).is_file() for n in named), (page, before)


def test_the_readme_set_up_commands_are_the_getting_started_one_and_ci_s_first_step():
    readme = [block for _, _, block in blocks(ROOT / "README.md")]
    started = [block for _, _, block in blocks(ROOT / CLEAN_CLONE_PAGE)]
    assert readme[0] in started, "the README's install command differs from the getting-started page's"
    assert readme[1].strip() in (ROOT / ".ci" / "run").read_text().splitlines(), "CI's first step is not the README's"


def test_the_command_finder_reads_continuations_comments_and_markers(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        "Text.\n\n```bash\npython sweeps/tsdae.py --steps 10 \\\n    --seeds 0   # a comment\n# only a comment\n```\n\n"
        "*Not run by the tests: it needs a cloud account.*\n\n```\nray up cluster.yaml\n```\n\n"
        "```text\nan output\n```\n\n1. A step:\n\n   ```\n   ray down cluster.yaml\n   ```\n"
    )
    found = blocks(page)
    assert [f for f, _, _ in found] == ["bash", "", "text", ""]
    assert found[3][2] == "ray down cluster.yaml\n"
    assert commands(found[0][2]) == ["python sweeps/tsdae.py --steps 10 --seeds 0"]
    assert NOT_RUN in found[1][1] and NOT_RUN not in found[0][1]
    assert how("python sweeps/tsdae.py --steps 10") == ["sweeps.tsdae", "--steps", "10", "--dry-run"]
    assert how("python sweeps/tsdae.py --list-presets") == ["sweeps.tsdae", "--list-presets"]
    assert how("ray up cluster.yaml") is None


def cases():
    """`--list-presets` prices every preset (about 5 s): it runs in the sweep step, the rest in the fast run."""
    for page, command in runnable():
        marks = [pytest.mark.sweep] if "--list-presets" in command else []
        yield pytest.param(page, command, marks=marks, id=f"{page}: {command}")


@pytest.mark.parametrize("page,command", cases())
def test_the_command_runs(page, command, capsys):
    argv = how(command)
    assert argv is not None, f"{page}: {command}"
    module = importlib.import_module(argv[0])
    if argv[0] == "analysis":
        from analysis.__main__ import main

        status = main(argv[1:])
    else:
        try:
            status = module.main(argv[1:])
        except SystemExit as done:  # argparse's --help
            status = done.code
    out = capsys.readouterr()
    assert status in (0, None), f"{page}: `{command}` exited {status}: {out.err[-2000:]}"
