"""Reports and the MLflow server on S3-compatible object storage (the tests' moto S3 server over HTTP).

- `python -m analysis report|cka --out s3://...?endpoint_override=...`: the outputs are built in a
  temporary folder and uploaded whole; the URI (with its query) is printed; no local folder is named
  after the URI; a bucket that does not exist is refused (exit 2, one line) before anything is read.
- The report is logged as MLflow artifacts under `report/` of the sweeps' parent runs (a local SQLite
  store: into each run's artifact folder; `--no-log-artifacts`: not at all; an artifact store that
  cannot be written: a warning line, exit 0).
- `python -m sweeps.mlflow_server` with its artifacts in a bucket: the command gets the destination
  without its query and MLFLOW_S3_ENDPOINT_URL in its environment (the endpoint is never on the command
  line); a bucket that does not exist is refused before the server starts. Slow: a real server on
  SQLite (endpoint only in AWS_ENDPOINT_URL) and on PostgreSQL (`--storage-path s3://...`): a client's
  artifact and the report's land as objects in the bucket.
"""

from __future__ import annotations

import importlib
import os
import shlex
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from analysis_helpers import build_store, log_runs
from mlflow import MlflowClient
from server_helpers import MlflowServer

from analysis.__main__ import main as analysis_main
from analysis.report import build_report
from sweeps import mlflow_server
from trainables.core.errors import SweepInputError
from trainables.core.schema import TAG_PARENT, TAG_ROLE

PROBE = {  # a one-sweep store of a contract without selection: a table, no figure
    "method": "probe",
    "sweep_axes": "model,layer,seed",
    "select_axis": "",
    "seed_axis": "seed",
    "metric_primary": "probe_dev",
    "metric_report": "probe_test",
    "metric_companion": "",
    "metric_mode": "max",
    "metric_columns": "",
}
PROBE_ROWS = [
    {"model": "bert-base-cased", "layer": layer, "seed": seed, "probe_dev": 70.0 + layer, "probe_test": 60.0 + seed}
    for layer in (0, 1)
    for seed in (0, 1)
]


@pytest.fixture
def store(tmp_path):
    """The analysis tests' store (two sweeps: two parent runs) with its artifacts under tmp_path/store."""
    return build_store(tmp_path / "store")


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """The working folder and the temporary folder of the command, both empty and inside tmp_path."""
    work, temp = tmp_path / "work", tmp_path / "temp"
    work.mkdir(), temp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return work, temp


def parents(uri: str, experiment: str) -> list:
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return [r for r in runs if r.data.tags.get(TAG_ROLE) == "sweep"]


def artifact_files(uri: str, run_id: str, path: str = "report") -> set[str]:
    """Every artifact file under `path` of a run, as paths relative to the run's artifact root."""
    client, found, todo = MlflowClient(uri), set(), [path]
    while todo:
        for item in client.list_artifacts(run_id, todo.pop()):
            (todo.append(item.path) if item.is_dir else found.add(item.path))
    return found


def report_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def no_bucket_uri(s3, prefix: str) -> str:
    return f"s3://no-such-bucket-{s3.bucket[-12:]}/{prefix}?endpoint_override={s3.host_port}&scheme=http"


# ---- report and cka to a URI ----------------------------------------------------------------
def test_report_to_a_uri_is_uploaded_whole_and_logged_to_each_parent_run(store, s3, scratch, capsys):
    work, temp = scratch
    out = s3.uri("sweeps/electra/report")
    assert analysis_main(["report", "--mlflow-uri", store.uri, "--experiment", store.experiment, "--out", out]) == 0
    stdout, stderr = capsys.readouterr()
    prefix = "sweeps/electra/report/"
    keys = {key.removeprefix(prefix) for key in s3.keys(prefix)}
    assert {"README.md", "runs.csv", "summary.csv", "excluded_runs.csv", "pareto_points.csv"} <= keys
    assert {"figures/pareto_tmft_stsb.png", "figures/layer_curves_tmft_stsb.svg", "tables/table1_stsb.md"} <= keys
    where = f"s3://{s3.bucket}/sweeps/electra/report/README.md?endpoint_override={s3.host_port}&scheme=http"
    assert f"34 trial runs (4 left out); report: {where}" in stdout and not stderr
    assert s3.read(prefix + "README.md").decode().startswith("# Sweep report")
    assert len(pd.read_csv(s3.client.get_object(Bucket=s3.bucket, Key=prefix + "runs.csv")["Body"])) == 34
    assert not list(work.iterdir()) and not list(temp.iterdir())  # no "s3:" folder, no temporary folder left

    sweeps = parents(store.uri, store.experiment)
    assert len(sweeps) == 2 and all(run.info.run_id in stdout for run in sweeps)
    for run in sweeps:
        assert artifact_files(store.uri, run.info.run_id) == {f"report/{key}" for key in keys}
        local = Path(run.info.artifact_uri.removeprefix("file://")) / "report"
        assert local.is_relative_to(store.path.parent / "artifacts")  # the run's own artifact location
        assert (local / "README.md").read_bytes() == s3.read(prefix + "README.md")


def test_a_local_report_is_logged_to_its_parent_runs_unless_told_not_to(store, tmp_path, capsys):
    args = ["report", "--mlflow-uri", store.uri, "--experiment", store.experiment, "--where", "seed=0"]
    assert analysis_main([*args, "--out", str(tmp_path / "first"), "--no-log-artifacts"]) == 0
    assert "MLflow:" not in capsys.readouterr().out
    sweeps = parents(store.uri, store.experiment)
    assert all(not artifact_files(store.uri, run.info.run_id) for run in sweeps)

    assert analysis_main([*args, "--out", str(tmp_path / "second")]) == 0
    assert f"report: {tmp_path / 'second' / 'README.md'}" in capsys.readouterr().out
    expected = {f"report/{name}" for name in report_files(tmp_path / "second")}
    for run in sweeps:
        assert artifact_files(store.uri, run.info.run_id) == expected


def test_an_artifact_store_that_cannot_be_written_costs_a_warning_not_the_report(tmp_path, capsys):
    uri = log_runs(tmp_path / "store", PROBE, PROBE_ROWS)
    (tmp_path / "store" / "artifacts").write_text("a file where the artifact folder should be")
    out = tmp_path / "report"
    assert analysis_main(["report", "--mlflow-uri", uri, "--out", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    assert f"report: {out / 'README.md'}" in stdout and "MLflow:" not in stdout
    [line] = stderr.splitlines()
    assert line.startswith("warning: the report was not logged to MLflow as artifacts report/ of parent run ")
    assert "--no-log-artifacts" in line
    assert {"README.md", "runs.csv", "summary.csv", "tables/scores_probe_all.md"} <= report_files(out)


def test_a_uri_whose_bucket_does_not_exist_is_refused_before_anything_is_read(s3, scratch, capsys):
    work, temp = scratch
    absent = f"sqlite:///{work / 'absent' / 'mlflow.db'}"  # had it been read first, another error
    out = no_bucket_uri(s3, "report")
    before = {b["Name"] for b in s3.client.list_buckets()["Buckets"]}
    for command in (["report", "--mlflow-uri", absent], ["cka", "--models", "a,b", "--mlflow-uri", absent]):
        assert analysis_main([*command, "--out", out]) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"error: --out {out}: the bucket 'no-such-bucket-") and "does not exist" in line
    assert {b["Name"] for b in s3.client.list_buckets()["Buckets"]} == before and not s3.keys()
    assert not list(work.iterdir()) and not list(temp.iterdir())
    with pytest.raises(SweepInputError, match="build_report writes a local folder"):  # the API never makes "s3:"
        build_report(absent, s3.uri("report"))
    assert not list(work.iterdir())


def test_cka_to_a_uri_is_uploaded_and_its_uris_printed(s3, scratch, data_dir, capsys):
    from trainables.encoders.tiny import build_tiny_model

    work, temp = scratch
    models = [
        str(build_tiny_model(kind, temp.parent / kind, layers=1, hidden=16)) for kind in ("bert", "electra-generator")
    ]
    out = s3.uri("cka/bert-vs-electra")
    argv = ["cka", "--models", ",".join(models), "--data-dir", str(data_dir), "--max-sentences", "8", "--out", out]
    assert analysis_main(argv) == 0
    assert sorted(s3.keys("cka/")) == [f"cka/bert-vs-electra/cka.{ext}" for ext in ("csv", "png", "svg")]
    frame = pd.read_csv(s3.client.get_object(Bucket=s3.bucket, Key="cka/bert-vs-electra/cka.csv")["Body"])
    assert frame["layer"].tolist() == [0, 1] and frame["cka"].between(0, 1).all()
    query = f"?endpoint_override={s3.host_port}&scheme=http"
    assert f"wrote s3://{s3.bucket}/cka/bert-vs-electra/cka.csv{query}, " in capsys.readouterr().out
    assert not list(work.iterdir()) and not list(temp.iterdir())


# ---- the MLflow server's artifacts in a bucket ----------------------------------------------
def printed_command(argv: list[str], capsys) -> tuple[list[str], str]:
    assert mlflow_server.main([*argv, "--print-command"]) == 0
    out, err = capsys.readouterr()
    return shlex.split(out), err


def test_server_command_strips_the_query_and_puts_the_endpoint_in_the_environment(tmp_path, capsys, monkeypatch):
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "MLFLOW_S3_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    destination = "s3://bucket/mlartifacts?endpoint_override=10.0.0.5:9000&scheme=http"
    command, err = printed_command(["--storage-path", str(tmp_path), "--artifacts-destination", destination], capsys)
    assert command[command.index("--artifacts-destination") + 1] == "s3://bucket/mlartifacts"
    assert not any("10.0.0.5" in part or "endpoint_override" in part for part in command)
    assert err == "environment: MLFLOW_S3_ENDPOINT_URL=http://10.0.0.5:9000\n"

    storage = "s3://bucket/runs?endpoint_override=10.0.0.5:9000&scheme=http"
    database = "postgresql://mlflow@db.internal:5432/mlflow"
    command, err = printed_command(["--storage-path", storage, "--backend-store-uri", database], capsys)
    assert command[command.index("--backend-store-uri") + 1] == database
    assert command[command.index("--artifacts-destination") + 1] == "s3://bucket/runs/mlartifacts"
    assert err == "environment: MLFLOW_S3_ENDPOINT_URL=http://10.0.0.5:9000\n"

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://10.0.0.6:9000")  # the endpoint only in boto3's variable
    command, err = printed_command(["--artifacts-destination", "s3://bucket/mlartifacts"], capsys)
    assert command[command.index("--artifacts-destination") + 1] == "s3://bucket/mlartifacts"
    assert err == "environment: MLFLOW_S3_ENDPOINT_URL=http://10.0.0.6:9000\n"
    command, err = printed_command(["--storage-path", str(tmp_path)], capsys)  # a local folder: nothing added
    assert command[command.index("--artifacts-destination") + 1] == str(tmp_path / "mlartifacts") and not err

    with pytest.raises(SystemExit):  # a URI storage path needs a database store
        mlflow_server.main(["--storage-path", storage, "--print-command"])
    assert "--storage-path is a URI: a SQLite store needs a local file" in capsys.readouterr().err
    leaked = "s3://bucket/x?endpoint_override=10.0.0.5:9000&secret_key=TOPSECRET"
    assert mlflow_server.main(["--artifacts-destination", leaked, "--print-command"]) == 2
    out, err = capsys.readouterr()
    assert not out and "carries credentials (secret_key)" in err and "TOPSECRET" not in err


def test_server_starts_with_the_endpoint_in_its_environment_or_not_at_all(s3, tmp_path, capsys, monkeypatch):
    started = []
    monkeypatch.setattr(os, "execv", lambda path, command: started.append((command, dict(os.environ))))
    monkeypatch.delenv("MLFLOW_S3_ENDPOINT_URL", raising=False)
    storage = tmp_path / "server"
    absent = no_bucket_uri(s3, "mlartifacts")
    assert mlflow_server.main(["--storage-path", str(storage), "--artifacts-destination", absent]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: --artifacts-destination {absent}: the bucket") and "does not exist" in line
    assert not started and not storage.exists()

    assert mlflow_server.main(["--storage-path", str(storage), "--artifacts-destination", s3.uri("mlartifacts")]) == 0
    [(command, environment)] = started
    assert command[command.index("--artifacts-destination") + 1] == f"s3://{s3.bucket}/mlartifacts"
    assert environment["MLFLOW_S3_ENDPOINT_URL"] == s3.endpoint and s3.host_port not in " ".join(command)
    assert environment["AWS_SECRET_ACCESS_KEY"] not in " ".join(command) + capsys.readouterr().out


# ---- real servers (slow) --------------------------------------------------------------------
def log_probe_sweep(tracking_uri: str, experiment: str = "served") -> str:
    """A sweep (parent run) with PROBE_ROWS as its trial runs, logged through `tracking_uri`."""
    from mlflow.entities import Metric, Param

    client = MlflowClient(tracking_uri)
    experiment_id = client.create_experiment(experiment)
    parent = client.create_run(experiment_id, tags={TAG_ROLE: "sweep"}, run_name="probe").info.run_id
    for row in PROBE_ROWS:
        run_id = client.create_run(experiment_id, tags={TAG_PARENT: parent, TAG_ROLE: "trial"}).info.run_id
        params = {**PROBE, **{k: v for k, v in row.items() if not isinstance(v, float)}}
        metrics = [Metric(k, v, 0, 0) for k, v in row.items() if isinstance(v, float)]
        client.log_batch(run_id, metrics=metrics, params=[Param(k, str(v)) for k, v in params.items()])
        client.set_terminated(run_id)
    client.set_terminated(parent)
    return parent


def check_served_artifacts_land_in_the_bucket(server: MlflowServer, s3, root: str, tmp_path: Path, capsys) -> None:
    """A client's artifact and the report, logged through the server, are objects under `root`/."""
    client = MlflowClient(server.uri)
    parent = log_probe_sweep(server.uri)
    assert client.get_run(parent).info.artifact_uri.startswith("mlflow-artifacts:/")
    note = tmp_path / "note.txt"
    note.write_text("through the server")
    client.log_artifact(parent, str(note), artifact_path="notes")
    [key] = [k for k in s3.keys(root + "/") if k.endswith("/notes/note.txt")]
    assert key.endswith(f"/{parent}/artifacts/notes/note.txt") and s3.read(key) == b"through the server"

    out = s3.uri("reports/served")
    assert analysis_main(["report", "--mlflow-uri", server.uri, "--experiment", "served", "--out", out]) == 0
    stdout, stderr = capsys.readouterr()
    assert f"MLflow: the report is in the artifacts report/ of parent run(s) {parent}" in stdout, stderr
    report = {k.removeprefix("reports/served/") for k in s3.keys("reports/served/")}
    logged = {k.split("/artifacts/report/", 1)[1] for k in s3.keys(root + "/") if f"/{parent}/artifacts/report/" in k}
    assert report == logged and {"README.md", "tables/scores_probe_all.md"} <= logged
    assert {a.path for a in client.list_artifacts(parent, "report")} >= {"report/README.md", "report/tables"}


@pytest.mark.slow
def test_server_on_sqlite_with_the_endpoint_only_in_aws_endpoint_url(s3, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)  # the server's child inherits it
    destination = f"s3://{s3.bucket}/mlartifacts"
    server = MlflowServer(tmp_path / "server", extra=["--artifacts-destination", destination])
    try:
        server.start()
        assert f"artifacts: {destination} at {s3.endpoint})" in server.log.read_text()
        check_served_artifacts_land_in_the_bucket(server, s3, "mlartifacts", tmp_path, capsys)
    finally:
        server.kill()
    assert not (tmp_path / "server" / "mlartifacts").exists()


def _installed(module: str, install: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        pytest.fail(f"{module} is not installed; the PostgreSQL tests need it: {install}")


@pytest.fixture
def postgres():
    """The URI of a fresh database on a real PostgreSQL server (as tests/test_postgres.py starts one)."""
    _installed("psycopg", "pip install -e '.[postgres]'")
    pgserver = _installed("pgserver", "pip install -e '.[test]'")
    import psycopg

    root = Path(tempfile.mkdtemp(prefix="embsweep-pg-"))  # short: the socket's path must stay short
    server = pgserver.get_server(root / "pgdata", cleanup_mode="delete")
    try:
        with psycopg.connect(server.get_uri(), autocommit=True) as connection:
            connection.execute("CREATE DATABASE embsweep")
        yield f"postgresql://postgres@/embsweep?host={server.get_postmaster_info().socket_dir}"
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_server_on_postgresql_with_its_storage_path_in_the_bucket(postgres, s3, tmp_path, capsys):
    extra = ["--backend-store-uri", postgres, "--storage-path", s3.uri("runs")]
    server = MlflowServer(tmp_path / "server", extra=extra)
    try:
        server.start()
        assert f"artifacts: s3://{s3.bucket}/runs/mlartifacts at {s3.endpoint})" in server.log.read_text()
        check_served_artifacts_land_in_the_bucket(server, s3, "runs/mlartifacts", tmp_path, capsys)
    finally:
        server.kill()
