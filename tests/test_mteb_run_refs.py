"""`python -m analysis mteb-run` names a `runs:/` reference that leads nowhere (a deleted run, an id the store
never held) before it looks at the tasks' data: one line, exit 2, nothing written."""

from __future__ import annotations

import subprocess
import sys

import pytest
from mlflow import MlflowClient

from trainables.core.paths import PROJECT_ROOT


def _mteb_run(tmp_path, model: str, uri: str) -> subprocess.CompletedProcess:
    empty = tmp_path / "no-task-data"  # no local copy of STSBenchmark's data either: the model is named first
    empty.mkdir(exist_ok=True)
    argv = ["--model", model, "--tasks", "STSBenchmark", "--data-dir", str(empty), "--mlflow-uri", uri]
    return subprocess.run(
        [sys.executable, "-m", "analysis", "mteb-run", *argv, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=120,
    )


@pytest.mark.sweep  # two CLI processes that import MLflow: over 3 s
def test_a_deleted_run_and_a_missing_run_are_named_before_the_tasks_data(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("x"), run_name="tmft L3 s0")
    client.delete_run(run.info.run_id)
    deleted = _mteb_run(tmp_path, f"runs:/{run.info.run_id}", uri)
    assert deleted.returncode == 2, deleted.stderr
    assert deleted.stderr.count("\n") == 1 and "STSBenchmark" not in deleted.stderr, deleted.stderr
    assert f"run {run.info.run_id} (tmft L3 s0) was deleted from the MLflow store" in deleted.stderr
    assert f"mlflow runs restore --run-id {run.info.run_id}" in deleted.stderr
    missing = _mteb_run(tmp_path, "runs:/0123456789abcdef0123456789abcdef", uri)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert "no run 0123456789abcdef0123456789abcdef in the MLflow store" in missing.stderr
    assert not (tmp_path / "out").exists()
