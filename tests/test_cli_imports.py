"""A command line that answers at once: printing `--help` or refusing a bad flag imports no torch,
transformers, Ray, scipy or pandas (trainables/methods/__init__.py: a method's trials' code is imported
when a plan or a trial needs it). Each command runs as a user runs it, with Python's own import log
(`-X importtime`), which names every module the process imported; benchmarks/cli_latency.py times them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeps.engine.scripts import sweep_scripts

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "ray", "scipy", "pandas", "sklearn", "sentence_transformers", "mlflow", "optuna")
COMMANDS = [
    *[[f"sweeps/{name}.py"] for name in sorted(sweep_scripts())],
    ["-m", "sweeps.local_cluster"],
    ["-m", "sweeps.mlflow_sync"],
]


def imported(argv: list[str]) -> tuple[set[str], subprocess.CompletedProcess]:
    """The top-level packages the command imported, and how it ended."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return {name.split(".")[0] for name in names}, done


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[-1])
@pytest.mark.parametrize("flag", ["--help", "--no-such-flag"])
def test_help_and_a_bad_flag_import_no_heavy_library(command, flag):
    packages, done = imported([*command, flag])
    assert done.returncode == (0 if flag == "--help" else 2), done.stderr[-2000:]
    assert "sweeps" in packages, "the import log was not read: nothing was tested"
    assert sorted(packages & set(HEAVY)) == []


def test_the_check_sees_a_heavy_import():
    """The check can fail: a command that imports torch is seen to."""
    packages, done = imported(["-c", "import torch, sweeps"])
    assert done.returncode == 0 and {"torch", "sweeps"} <= packages


@pytest.mark.sweep  # about 2 s: out of the fast run, which stays under 3 minutes
def test_a_trial_still_gets_its_trainable_class():
    """The registry names a method's trainable by path; the engine gets the class when a trial needs it."""
    code = (
        "import sys; from trainables.methods import get_method\n"
        "cls = get_method('tmft'); assert 'ray' not in sys.modules\n"
        "trainable = cls.trainable_class(); from ray import tune\n"
        "assert issubclass(trainable, tune.Trainable), trainable; print(trainable.__name__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "TMFTTrainable", done.stderr[-2000:]
