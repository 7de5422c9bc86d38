"""A sweep that succeeds prints its own lines only: Ray's and Ray Tune's log lines (warnings, a retried
trial's traceback) go to a file in Ray's session folder, which a failed sweep names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from trainables.core.paths import PROJECT_ROOT

DRIVER = """
import sys
import sweeps.engine.runner as runner
from trainables.core.faults import fault_spec
planned = runner.plan_sweep
def plan_sweep(*args, **kwargs):  # the first trial raises once in its first epoch: Tune retries it
    plan = planned(*args, **kwargs)
    plan.configs[0]["_fault"] = fault_spec(1, "raise", sys.argv[1])
    return plan
runner.plan_sweep = plan_sweep
from sweeps.electra_layers import main
raise SystemExit(main(sys.argv[2:]))
"""


@pytest.mark.sweep
def test_a_successful_sweep_leaves_the_terminal_to_the_sweep(tmp_path, tiny_models, data_dir):
    """Its first trial fails once and is retried (Ray Tune logs the traceback): the sweep succeeds, and the
    terminal shows none of Ray's lines."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths must stay short
    try:
        argv = ["--models", tiny_models["bert"], "--layers", "1", "--seeds", "0,1", "--epochs", "1"]
        argv += ["--max-train-samples", "48", "--max-eval-samples", "60", "--batch-size", "16"]
        argv += ["--cpus-per-trial", "1", "--gpus-per-trial", "0", "--data-dir", str(data_dir)]
        argv += ["--storage-path", str(tmp_path / "runs"), "--mlflow-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, str(tmp_path / "fired"), *argv],
            cwd=PROJECT_ROOT, env={**os.environ, "RAY_TMPDIR": str(ray_tmp)}, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert "trials 2/2 done" in done.stdout and (tmp_path / "fired").is_file()
        logs = list(ray_tmp.rglob("embsweep-driver-*.log"))
        assert logs and "InjectedFault" in logs[0].read_text()  # the retried trial's traceback, in the file
        noise = [line for line in done.stderr.splitlines() if line.strip()]
        assert not noise, "\n".join(noise[:40])
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
