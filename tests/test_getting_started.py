"""The getting-started page's commands, run as written, in order, in a clean clone of the repository (slow).

The clone is `git clone` of this checkout into a temporary folder, with the data found through
`EMBSWEEP_DATA_DIR` (the clone has no `../shared` beside it). Every block of docs/getting-started.md that the page
does not mark `*Not run by the tests: ...*` runs in one bash in the clone's root, each command as written, except:
the virtual environment the page creates (`python3 -m venv .venv`) is made beforehand with a `.pth` file that
puts this environment's installed packages on its path, so that `pip install -e .` finds every dependency installed
and installs the clone itself (no multi-GB torch download; the pip step still runs, resolves and installs), and
`pip install -c cluster/constraints.txt -e .` runs with `--dry-run` (the clone is already installed). The main
job's sweep, the smoke test, the dry run and the report then run for real; the test checks the report and the
sweep's runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from trainables.core.paths import default_data_dir

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_docs_commands import NOT_RUN, SHELL_FENCES, blocks, commands  # noqa: E402


def page_commands() -> list[str]:
    out = []
    for fence, before, block in blocks(ROOT / "docs" / "getting-started.md"):
        if fence in SHELL_FENCES and NOT_RUN not in before:
            out += commands(block)
    return out


def test_the_page_has_the_install_the_main_job_and_the_report():
    found = page_commands()
    assert any("pip install -e ." in c and "sweeps/electra_layers.py" in c for c in found), found
    assert any(c.startswith("python -m analysis report") for c in found), found


@pytest.mark.slow
def test_the_getting_started_commands_run_as_written_in_a_clean_clone(tmp_path):
    clone = tmp_path / "embsweep"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run([sys.executable, "-m", "venv", str(clone / ".venv")], check=True)
    site = next((clone / ".venv" / "lib").glob("python3*/site-packages"))
    (site / "outer-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    script = []
    for command in page_commands():
        if command.startswith("pip install -c cluster/constraints.txt"):
            command = command.replace("pip install", "pip install --dry-run", 1)
        script.append(command)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["EMBSWEEP_DATA_DIR"] = str(default_data_dir())
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(script)],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert (clone / "runs" / "mlflow.db").is_file()
    index = (clone / "reports" / "README.md").read_text()
    assert index.startswith("# Sweep report") and re.search(r"all-MiniLM-L6-v2", index)
