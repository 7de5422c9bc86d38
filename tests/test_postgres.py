"""MLflow on a PostgreSQL store. Without the driver (the `postgres` extra), a `postgresql://` URI is
refused before anything starts by a sweep, the report and the tracking server, as is an unreachable
server, within seconds and with the password masked. On a real PostgreSQL server (pgserver's bundled
binaries, in a temp folder, stopped and deleted at the end): a sweep run as a script whose driver is
killed mid-sweep and resumed leaves each trial's run once with every epoch once, the report reads the
store, and `python -m sweeps.mlflow_server` serves it."""

import os
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow_helpers import one_finished_and_one_started, runs_by_role
from postgres_helpers import installed, postgres_database
from server_helpers import MlflowServer, free_port
from sweep_helpers import kill_driver_when, sweep_args

from analysis.__main__ import main as report_main
from sweeps import mlflow_server
from sweeps.electra_layers import main
from trainables.core.endpoints import mlflow_store
from trainables.core.errors import SweepInputError

SECRET = "S3cretPassw0rd"


def _refused_everywhere(uri: str, tmp_path: Path, capsys, monkeypatch) -> list[str]:
    """A sweep, the report and the tracking server each exit 2 with one message and start nothing."""
    monkeypatch.setattr(os, "execv", lambda *args: pytest.fail(f"the MLflow server was started: {args}"))
    storage = tmp_path / "runs"
    codes = [
        main(["--storage-path", str(storage), "--mlflow-uri", uri, "--seeds", "0"]),
        report_main(["report", "--mlflow-uri", uri, "--out", str(tmp_path / "report")]),
        mlflow_server.main(["--backend-store-uri", uri, "--storage-path", str(tmp_path / "server")]),
    ]
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert codes == [2, 2, 2] and len(errors) == 3, errors
    assert not any(SECRET in error for error in errors)
    assert not (tmp_path / "report").exists() and not (tmp_path / "server").exists()
    assert not storage.exists() or not any(storage.iterdir())
    return errors


def test_without_the_driver_a_postgresql_uri_is_refused_before_anything_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` fails, as without the extra
    errors = _refused_everywhere(f"postgresql://mlflow:{SECRET}@127.0.0.1:5432/mlflow", tmp_path, capsys, monkeypatch)
    for error in errors:
        assert "postgresql://mlflow@127.0.0.1:5432/mlflow: MLflow's postgresql store needs the Python " in error
        assert "'psycopg', which is not installed; install it with: pip install -e '.[postgres]'" in error


@pytest.mark.slow
def test_an_unreachable_postgresql_server_is_refused_within_seconds(tmp_path, capsys, monkeypatch):
    installed("psycopg", "pip install -e '.[postgres]'")
    uri = f"postgresql://mlflow:{SECRET}@127.0.0.1:{free_port()}/mlflow"
    started = time.monotonic()
    errors = _refused_everywhere(uri, tmp_path, capsys, monkeypatch)
    assert time.monotonic() - started < 30
    for error in errors:
        assert "the MLflow store is unreachable (no PostgreSQL server answers there" in error, error


@pytest.fixture(scope="module")
def postgres():
    """The URI of a fresh database on a real PostgreSQL server (tests/postgres_helpers.py)."""
    with postgres_database() as uri:
        yield uri


@pytest.mark.slow
def test_sweep_killed_and_resumed_report_and_server_on_postgresql(postgres, sweep_env, tiny_models, ray_session):
    uri = postgres
    with pytest.raises(SweepInputError, match=r'refused the connection \(FATAL: database "nodb" does not exist\)'):
        mlflow_store(uri.replace("/embsweep?", "/nodb?"))
    flags = list(sweep_env["flags"])
    flags[flags.index("--mlflow-uri") + 1] = uri
    sweep = sweep_args(tiny_models["bert"], "--layers 1 --seeds 0,1 --epochs 3 --max-concurrent 1", *flags)
    address = ray_session.get_runtime_context().gcs_address

    kill_driver_when(
        "sweeps/electra_layers.py",
        [*sweep, "--name", "pg", "--address", address],
        sweep_env["tmp"] / "driver.log",
        lambda: one_finished_and_one_started(uri),
        what="a trial to finish and the next to log an epoch",
    )
    killed_at = time.time() * 1000
    finished_before = {c.info.run_id for c in runs_by_role(uri)[1] if c.info.status == "FINISHED"}

    assert main(["--resume", str(sweep_env["storage"] / "pg")]) == 0

    parents, children = runs_by_role(uri)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == 2 and len({c.data.tags["embsweep.config_hash"] for c in children}) == 2
    client = MlflowClient(uri)
    for child in children:
        assert child.info.status == "FINISHED"
        history = client.get_metric_history(child.info.run_id, "dev_spearman")
        assert sorted(m.step for m in history) == [1, 2, 3], child.info.run_name
        if child.info.run_id in finished_before:
            assert all(m.timestamp < killed_at for m in history), "a finished trial was rerun"

    out = sweep_env["tmp"] / "report"
    report = ["report", "--mlflow-uri", uri, "--experiment", "test", "--out", str(out)]
    assert report_main([*report, "--no-log-artifacts"]) == 0  # not into this store's artifact root, ./mlruns
    assert (out / "README.md").is_file()

    server = MlflowServer(sweep_env["tmp"] / "server", extra=["--backend-store-uri", uri])
    try:
        server.start()
        served_parents, served_children = server.runs()
    finally:
        server.kill()
    assert [p["info"]["run_id"] for p in served_parents] == [parents[0].info.run_id]
    assert {c["info"]["run_id"] for c in served_children} == {c.info.run_id for c in children}


def test_a_database_password_is_kept_out_of_the_recorded_uri_and_out_of_rays_processes(monkeypatch):
    import os

    from trainables.core import endpoints

    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setattr(endpoints, "check_database_store", lambda uri, flag="": None)
    uri = endpoints.mlflow_store("postgresql://mlflow:S3CRET@db.example:5432/mlflow")
    assert uri == "postgresql://mlflow@db.example:5432/mlflow" and os.environ["PGPASSWORD"] == "S3CRET"
    with endpoints.credentials_hidden():
        assert "PGPASSWORD" not in os.environ
    assert os.environ["PGPASSWORD"] == "S3CRET"


def test_a_uri_is_recorded_without_its_credentials():
    from trainables.core.endpoints import recorded_uri

    assert recorded_uri("http://user:pw@host:5000") == "http://host:5000"
    assert recorded_uri("postgresql+psycopg://u:pw@db:5432/m") == "postgresql+psycopg://u@db:5432/m"
    assert recorded_uri("sqlite:////tmp/mlflow.db") == "sqlite:////tmp/mlflow.db"
