"""Helpers of the sweep tests: command lines, a script run in a subprocess, a small DAPT stage, edits of a
planned sweep for the `edit_trials` fixture (tests/conftest.py), and the checks every smoke sweep's runs get."""

import os
import signal
import subprocess
import sys
import time

import pytest

from trainables.core.paths import PROJECT_ROOT

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


def wait_for(predicate, driver, log, timeout=240, what="condition", every=0.2):
    """Poll `predicate` every `every` s until it holds and return what it returned; fail with the driver's output
    if it ends or time runs out first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if found := predicate():
                return found
        except Exception:
            pass
        if driver.poll() is not None:
            break
        time.sleep(every)
    ended = "timed out" if driver.poll() is None else f"the driver ended (exit code {driver.poll()})"
    pytest.fail(f"{ended} before {what}; its output ends:\n" + log.read_text()[-4000:])


def kill_driver_when(
    script: str, argv: list[str], log, predicate, what: str, env: dict | None = None, cwd=PROJECT_ROOT
) -> None:
    """Start `python script *argv` as a sweep driver in its own session (output to `log`), wait until
    `predicate()` holds, then SIGKILL the driver and everything it started."""
    with open(log, "w") as out:
        driver = subprocess.Popen(
            [sys.executable, str(PROJECT_ROOT / script), *argv],
            cwd=cwd,
            start_new_session=True,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        wait_for(predicate, driver, log, what=what)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()


def hold_all(seconds: float):
    """Keep every trial busy `seconds` in each epoch, so that trials overlap in time."""

    def edit(plan):
        for config in plan.configs:
            config["_hold"] = seconds

    return edit


def check_smoke_runs(uri: str, script: str) -> None:
    """One FINISHED parent run; one FINISHED child run per planned trial with the method's metric contract
    and its primary metric."""
    from mlflow_helpers import runs_by_role

    from sweeps.engine.scripts import sweep_scripts
    from trainables.methods import get_method

    method = get_method(sweep_scripts()[script])
    parents, children = runs_by_role(uri)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == int(parents[0].data.params["trials"]) > 0
    for child in children:
        assert child.info.status == "FINISHED"
        contract = child.data.params["metric_primary"]
        assert contract in child.data.metrics, (contract, sorted(child.data.metrics))
        assert child.data.params["sweep_axes"] and child.data.params["metric_mode"] in ("max", "min")
    assert method.name in {c.data.params["method"] for c in children} or method.name == "improvements"
