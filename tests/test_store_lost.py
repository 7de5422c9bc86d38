"""A store that loses its objects mid-sweep (the S3 server killed and started again empty, the bucket
made again, as when a lifecycle rule or an operator empties a prefix) ends the sweep cleanly: one line
naming the store and what to do, exit 1, no MLflow run left RUNNING, and a progress line that never
counted more trials done than had finished."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mlflow import MlflowClient
from s3_helpers import EXTERNAL_ENV, TEST_CREDENTIALS, S3Server, S3Store
from sweep_helpers import wait_for

from trainables.core.paths import PROJECT_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.objectstore]


@pytest.mark.skipif(bool(os.environ.get(EXTERNAL_ENV)), reason="needs the tests' own S3 server to kill")
def test_a_store_emptied_mid_sweep_ends_with_one_line_and_no_run_left_running(tmp_path, tiny_models, data_dir):
    from trainables.core.schema import TAG_PARENT

    server = S3Server(tmp_path / "s3.log").start()
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    try:
        store = S3Store(server.endpoint, server)
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        env = {**os.environ, **TEST_CREDENTIALS, "EMBSWEEP_STORAGE_RETRY_S": "5", "RAY_TMPDIR": str(ray_tmp)}
        argv = ["--models", tiny_models["bert"], "--layers", "0,1,2,3", "--seeds", "0", "--epochs", "2"]
        argv += ["--max-concurrent", "1", "--max-train-samples", "96", "--max-eval-samples", "60", "--batch-size", "16"]
        argv += ["--cpus-per-trial", "1", "--gpus-per-trial", "0", "--data-dir", str(data_dir), "--name", "lost"]
        argv += ["--storage-path", store.uri("runs"), "--mlflow-uri", uri, "--experiment", "test"]
        out, err = tmp_path / "out.log", tmp_path / "err.log"
        with open(out, "w") as stdout, open(err, "w") as stderr:
            driver = subprocess.Popen(
                [sys.executable, str(PROJECT_ROOT / "sweeps" / "electra_layers.py"), *argv],
                cwd=tmp_path, env=env, stdout=stdout, stderr=stderr, start_new_session=True,
            )  # fmt: skip

        def one_finished() -> bool:
            client = MlflowClient(uri)
            runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
            return any(r.info.status == "FINISHED" and TAG_PARENT in r.data.tags for r in runs)

        wait_for(one_finished, driver, out, timeout=300, what="the first trial to finish")
        server.stop()  # every object and the bucket gone
        server.start()
        store.client.create_bucket(Bucket=store.bucket)
        code = driver.wait(timeout=400)
        text, errors = out.read_text(), err.read_text()
        assert code == 1, text[-3000:] + errors[-3000:]
        last = errors.strip().splitlines()[-1]
        assert last.startswith("error: the object store of s3://") and "--resume" in last, errors[-3000:]
        assert "Traceback" not in errors, errors[-3000:]
        client = MlflowClient(uri)
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        assert runs and not [r.info.run_name for r in runs if r.info.status == "RUNNING"]
        finished = sum(r.info.status == "FINISHED" and TAG_PARENT in r.data.tags for r in runs)
        done = [int(n) for n in re.findall(r"trials (\d+)/\d+ done", text)]
        assert done and max(done) <= finished, (done, finished, text[-2000:])
    finally:
        if "driver" in locals() and driver.poll() is None:
            os.killpg(driver.pid, 9)
        server.stop()
        shutil.rmtree(ray_tmp, ignore_errors=True)
