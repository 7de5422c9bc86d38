"""Helpers of the sweep tests: command lines, a script run in a subprocess, a small DAPT stage, and edits of a
planned sweep for the `edit_trials` fixture (tests/conftest.py)."""

import subprocess
import sys

# The settings of a small DAPT stage (dapt.stage_config with a corpus, lr and max_sentences): 2 epochs of
# batches of 16, two batches an optimiser step.
SMALL_DAPT = dict(epochs=2, batch_size=16, accumulation=2, head="auto", random_init=False)


def sweep_args(model: str, flags: str, *more: str) -> list[str]:
    """A sweep's command line: `--models model`, the space-separated words of `flags`, then `more` as
    they are (a sweep_env's flags, paths that may hold spaces)."""
    return ["--models", model, *flags.split(), *more]


def run_script(argv: list[str], cwd, env: dict) -> subprocess.CompletedProcess:
    """Run `python *argv` in `cwd` with `env` (ten minutes at most); it must exit 0."""
    done = subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def hold_all(seconds: float):
    """Keep every trial busy `seconds` in each epoch, so that trials overlap in time."""

    def edit(plan):
        for config in plan.configs:
            config["_hold"] = seconds

    return edit
