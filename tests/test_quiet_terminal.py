"""A sweep that succeeds prints its own lines only: Ray's and Ray Tune's log lines (warnings, a retried
trial's traceback) go to a file in Ray's session folder, which a failed sweep names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from trainables.core.paths import PROJECT_ROOT


def test_a_successful_sweep_leaves_the_terminal_to_the_sweep(tmp_path, tiny_models, data_dir):
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths must stay short
    try:
        argv = ["--models", tiny_models["bert"], "--layers", "1", "--seeds", "0,1", "--epochs", "1"]
        argv += ["--max-train-samples", "48", "--max-eval-samples", "60", "--batch-size", "16"]
        argv += ["--cpus-per-trial", "1", "--gpus-per-trial", "0", "--data-dir", str(data_dir)]
        argv += ["--storage-path", str(tmp_path / "runs")]
        done = subprocess.run(
            [sys.executable, str(PROJECT_ROOT / "sweeps" / "electra_layers.py"), *argv],
            cwd=tmp_path, env={**os.environ, "RAY_TMPDIR": str(ray_tmp)}, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert "trials 2/2 done" in done.stdout
        noise = [line for line in done.stderr.splitlines() if line.strip()]
        assert not noise, "\n".join(noise[:40])
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
