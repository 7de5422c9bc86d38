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

import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from mlflow import MlflowClient
from postgres_helpers import postgres_database
from server_helpers import MlflowServer

from analysis.__main__ import main as analysis_main
from analysis.report import build_report
from sweeps import mlflow_server
from trainables.core.errors import SweepInputError
from trainables.core.schema import TAG_PARENT, TAG_ROLE

PROBE = {  # a contract without selection: the report has a table and (the layer is an axis) layer curves
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
MODELS = ("bert-base-cased", "google/electra-small-discriminator")


def log_probe_sweep(client, experiment_id: str, model: str) -> str:
    """A sweep (parent run) of PROBE on one model, 2 layers x 2 seeds (a trial run each); its run id."""
    from mlflow.entities import Metric, Param

    parent = client.create_run(experiment_id, tags={TAG_ROLE: "sweep"}, run_name=f"probe {model}").info.run_id
    for layer in (0, 1):
        for seed in (0, 1):
            run_id = client.create_run(experiment_id, tags={TAG_PARENT: parent, TAG_ROLE: "trial"}).info.run_id
            params = [Param(k, str(v)) for k, v in {**PROBE, "model": model, "layer": layer, "seed": seed}.items()]
            metrics = [Metric("probe_dev", 70.0 + layer, 0, 0), Metric("probe_test", 60.0 + seed, 0, 0)]
            client.log_batch(run_id, metrics=metrics, params=params)
            client.set_terminated(run_id)
    client.set_terminated(parent)
    return parent


def log_store(tracking_uri: str, models=MODELS, artifact_location: str | None = None) -> list[str]:
    """Experiment "made" with a sweep per model; the parent run ids."""
    client = MlflowClient(tracking_uri)
    experiment_id = client.create_experiment("made", artifact_location=artifact_location)
    return [log_probe_sweep(client, experiment_id, model) for model in models]


@dataclass
class Store:
    uri: str
    artifacts: Path  # the experiment's artifact location
    parents: list[str]


@pytest.fixture(scope="module")
def empty_database(tmp_path_factory) -> Path:
    """An MLflow SQLite database with its tables made once (that takes seconds), copied by `store`."""
    path = tmp_path_factory.mktemp("empty-store") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def store(tmp_path, empty_database) -> Store:
    """A SQLite store of two sweeps (parent runs) whose artifacts go under tmp_path/store/artifacts."""
    folder = tmp_path / "store"
    folder.mkdir()
    shutil.copy(empty_database, folder / "mlflow.db")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    return Store(uri, folder / "artifacts", log_store(uri, artifact_location=(folder / "artifacts").as_uri()))


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """The working folder and the temporary folder of the command, both empty and inside tmp_path."""
    work, temp = tmp_path / "work", tmp_path / "temp"
    work.mkdir()
    temp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return work, temp


def artifact_files(uri: str, run_id: str, path: str = "report") -> set[str]:
    """Every artifact file under `path` of a run, as paths relative to the run's artifact root."""
    client, found, todo = MlflowClient(uri), set(), [path]
    while todo:
        for item in client.list_artifacts(run_id, todo.pop()):
            if item.is_dir:
                todo.append(item.path)
            else:
                found.add(item.path)
    return found


def report_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def own_lines(stderr: str) -> list[str]:
    """The command's own lines (MLflow logs INFO lines to stderr too)."""
    return [line for line in stderr.splitlines() if line.startswith(("warning: ", "error: "))]


def files_under(s3, prefix: str) -> set[str]:
    """The objects under `prefix` (relative to it), without the folder markers pyarrow writes ("x/")."""
    return {key.removeprefix(prefix) for key in s3.keys(prefix) if not key.endswith("/")}


def endpoint_query(s3) -> str:
    """The query that names the tests' S3 endpoint, as every URI of the bucket carries it."""
    return "?" + s3.uri("x").split("?", 1)[1]


def no_bucket_uri(s3, prefix: str) -> str:
    return f"s3://no-such-bucket-{s3.bucket[-12:]}/{prefix}{endpoint_query(s3)}"


# ---- report and cka to a URI ----------------------------------------------------------------
def test_report_to_a_uri_is_uploaded_whole_and_logged_to_each_parent_run(store, s3, scratch, capsys):
    work, temp = scratch
    out = s3.uri("sweeps/probe/report")
    assert analysis_main(["report", "--mlflow-uri", store.uri, "--experiment", "made", "--out", out]) == 0
    stdout, stderr = capsys.readouterr()
    prefix = "sweeps/probe/report/"
    keys = files_under(s3, prefix)
    assert {"README.md", "runs.csv", "summary.csv", "excluded_runs.csv", "tables/scores_probe_all.md"} <= keys
    assert {"figures/curves_probe_all_bert-base-cased.png", "figures/curves_probe_all_bert-base-cased.svg"} <= keys
    where = f"s3://{s3.bucket}/sweeps/probe/report/README.md{endpoint_query(s3)}"
    assert f"8 trial runs (0 left out); report: {where}" in stdout and not own_lines(stderr)
    assert s3.read(prefix + "README.md").decode().startswith("# Sweep report")
    assert len(pd.read_csv(s3.client.get_object(Bucket=s3.bucket, Key=prefix + "runs.csv")["Body"])) == 8
    assert not list(work.iterdir()) and not list(temp.iterdir())  # no "s3:" folder, no temporary folder left

    assert f"MLflow: the report is in the artifacts report/ of parent run(s) {', '.join(store.parents)}" in stdout
    for parent in store.parents:
        assert artifact_files(store.uri, parent) == {f"report/{key}" for key in keys}
        local = store.artifacts / parent / "artifacts" / "report"  # the run's own artifact location
        assert (local / "README.md").read_bytes() == s3.read(prefix + "README.md")


def test_a_local_report_is_logged_to_its_parent_runs_unless_told_not_to(store, tmp_path, capsys):
    args = ["report", "--mlflow-uri", store.uri, "--experiment", "made"]
    assert analysis_main([*args, "--out", str(tmp_path / "first"), "--no-log-artifacts"]) == 0
    assert "MLflow:" not in capsys.readouterr().out
    assert all(not artifact_files(store.uri, parent) for parent in store.parents)
    assert not store.artifacts.exists()

    first, second = store.parents
    assert analysis_main([*args, "--where", f"model={MODELS[1]}", "--out", str(tmp_path / "second")]) == 0
    stdout = capsys.readouterr().out
    assert f"report: {tmp_path / 'second' / 'README.md'}" in stdout and f"parent run(s) {second}\n" in stdout
    expected = {f"report/{name}" for name in report_files(tmp_path / "second")}
    assert artifact_files(store.uri, second) == expected and not artifact_files(store.uri, first)


def test_an_artifact_store_that_cannot_be_written_costs_a_warning_not_the_report(store, tmp_path, capsys):
    store.artifacts.write_text("a file where the artifact folder should be")
    out = tmp_path / "report"
    assert analysis_main(["report", "--mlflow-uri", store.uri, "--out", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    assert f"report: {out / 'README.md'}" in stdout and "MLflow:" not in stdout
    [line] = own_lines(stderr)
    expected = f"warning: the report was not logged to MLflow as artifacts report/ of parent run {store.parents[0]}: "
    assert line.startswith(expected)
    assert "Not a directory" in line and "--no-log-artifacts" in line
    assert {"README.md", "runs.csv", "summary.csv", "tables/scores_probe_all.md"} <= report_files(out)


def test_a_uri_whose_bucket_does_not_exist_is_refused_before_anything_is_read(s3, scratch, capsys):
    work, temp = scratch
    absent = f"sqlite:///{work / 'absent' / 'mlflow.db'}"  # had it been read first, another error
    out = no_bucket_uri(s3, "report")
    before = {b["Name"] for b in s3.client.list_buckets()["Buckets"]}
    for command in (["report", "--mlflow-uri", absent], ["cka", "--models", "a,b", "--mlflow-uri", absent]):
        assert analysis_main([*command, "--out", out]) == 2
        [line] = own_lines(capsys.readouterr().err)
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
    assert files_under(s3, "cka/bert-vs-electra/") == {"cka.csv", "cka.png", "cka.svg"}
    frame = pd.read_csv(s3.client.get_object(Bucket=s3.bucket, Key="cka/bert-vs-electra/cka.csv")["Body"])
    assert frame["layer"].tolist() == [0, 1] and frame["cka"].between(0, 1).all()
    written = f"wrote s3://{s3.bucket}/cka/bert-vs-electra/cka.csv{endpoint_query(s3)}, "
    assert written in capsys.readouterr().out
    assert not list(work.iterdir()) and not list(temp.glob("embsweep-out-*"))


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
    assert f"artifacts: s3://{s3.bucket}/mlartifacts at {s3.endpoint})" in capsys.readouterr().out


# ---- real servers (slow) --------------------------------------------------------------------
def check_served_artifacts_land_in_the_bucket(server: MlflowServer, s3, root: str, tmp_path: Path, capsys) -> None:
    """A client's artifact and the report, logged through the server, are objects under `root`/."""
    client = MlflowClient(server.uri)
    [parent] = log_store(server.uri, models=MODELS[:1])
    assert client.get_run(parent).info.artifact_uri.startswith("mlflow-artifacts:/")
    note = tmp_path / "note.txt"
    note.write_text("through the server")
    client.log_artifact(parent, str(note), artifact_path="notes")
    [key] = [k for k in s3.keys(root + "/") if k.endswith("/notes/note.txt")]
    assert key.endswith(f"/{parent}/artifacts/notes/note.txt") and s3.read(key) == b"through the server"

    out = s3.uri("reports/served")
    assert analysis_main(["report", "--mlflow-uri", server.uri, "--experiment", "made", "--out", out]) == 0
    stdout, stderr = capsys.readouterr()
    assert f"MLflow: the report is in the artifacts report/ of parent run(s) {parent}" in stdout, stderr
    report = files_under(s3, "reports/served/")
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


@pytest.fixture
def postgres():
    """The URI of a fresh database on a real PostgreSQL server (tests/postgres_helpers.py)."""
    with postgres_database() as uri:
        yield uri


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
