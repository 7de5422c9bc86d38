"""A sweep script's exit (sweeps/engine/quick_exit.py): the exit handlers run and the console is flushed,
but the interpreter's module-by-module teardown is skipped."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from sweeps.engine import scripts

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
import atexit, sys
from sweeps.engine import quick_exit


class Teardown:
    def __init__(self, path):
        self.file = open(path, "w")

    def __del__(self):  # run when the interpreter takes its modules apart (torch's and Ray's take seconds)
        self.file.write("the teardown ran")
        self.file.close()


KEPT = Teardown(sys.argv[1] + ".teardown")
atexit.register(lambda: open(sys.argv[1], "w").write("handlers ran"))
print("the table", end="")  # buffered: a pipe, not a terminal
quick_exit.exit_now(3)
"""


def test_exit_now_runs_the_exit_handlers_and_skips_the_teardown(tmp_path):
    marker = tmp_path / "atexit.txt"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROGRAM), str(marker)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert Path(f"{marker}.teardown").read_text() == "", "the interpreter's teardown ran"
    assert done.returncode == 3 and done.stdout == "the table", done.stderr
    assert marker.read_text() == "handlers ran"


FAKE_RAY = """
import atexit, sys


def is_initialized():
    return True


def shutdown(*, _exiting_interpreter=False):
    with open(sys.argv[1], "a") as log:
        log.write(f"ray.shutdown(_exiting_interpreter={_exiting_interpreter})\\n")


atexit.register(shutdown, _exiting_interpreter=True)  # as Ray registers its own
"""

AFTER_RAY = """
import atexit, sys
import ray
from sweeps.engine import quick_exit

atexit.register(lambda: open(sys.argv[1], "a").write("tune clean-up, Ray still up\\n"))
quick_exit.exit_now(0)
"""


def test_rays_shutdown_runs_once_after_the_other_handlers_without_its_exit_sleep(tmp_path):
    (tmp_path / "ray.py").write_text(FAKE_RAY)
    log = tmp_path / "order.txt"
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", AFTER_RAY, str(log)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == ["tune clean-up, Ray still up", "ray.shutdown(_exiting_interpreter=False)"]


def test_every_sweep_script_exits_through_it():
    for name in scripts.sweep_scripts():
        text = (ROOT / "sweeps" / f"{name}.py").read_text()
        assert 'if __name__ == "__main__":\n    quick_exit.exit_now(main())' in text, name
