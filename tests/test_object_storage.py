"""Storage on an S3-compatible server (a real moto server over HTTP, tests/s3_server.py): URIs whose
endpoint is in their query, the checks that refuse bad storage before Ray starts, the claim of a
sweep name by a conditional write, the newest sweep under a URI, and `runs:/` copies checked
against what their trial recorded."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sweeps.engine import storage
from trainables.core import conditional_writes, object_storage, verified_copies
from trainables.core.errors import SweepInputError


def test_paths_join_before_the_query():
    uri = "s3://runs/embsweep?endpoint_override=127.0.0.1:9321&scheme=http"
    joined = object_storage.join(uri, "electra-layers-1", "sweep.json")
    assert joined == "s3://runs/embsweep/electra-layers-1/sweep.json?endpoint_override=127.0.0.1:9321&scheme=http"
    assert object_storage.parent(joined) == object_storage.join(uri, "electra-layers-1")
    assert object_storage.basename(joined) == "sweep.json"
    assert object_storage.bucket_key(joined) == ("runs", "embsweep/electra-layers-1/sweep.json")
    assert object_storage.endpoint_url(uri) == "http://127.0.0.1:9321"
    assert object_storage.join("/data/runs", "a", "b") == "/data/runs/a/b"
    assert object_storage.with_query_of("runs/x/checkpoint_000001", "s3", uri) == (
        "s3://runs/x/checkpoint_000001?endpoint_override=127.0.0.1:9321&scheme=http"
    )


def test_files_written_under_a_uri_land_in_the_bucket(s3):
    sweep = object_storage.join(s3.uri("runs"), "one")
    storage.write_json(object_storage.join(sweep, storage.SWEEP_FILE), {"name": "one"})
    assert json.loads(s3.read("runs/one/sweep.json")) == {"name": "one"}
    assert storage.read_json(object_storage.join(sweep, storage.SWEEP_FILE)) == {"name": "one"}
    assert storage.read_json(object_storage.join(sweep, "missing.json")) is None


@pytest.mark.sweep  # about 2 s: out of the fast run, which stays under 3 minutes
def test_the_newest_sweep_under_a_uri(s3):
    root = s3.uri("runs")
    assert storage.latest_sweep(root) is None
    for name in ("first", "second"):
        storage.write_json(object_storage.join(root, name, storage.SWEEP_FILE), {"name": name})
        time.sleep(1.1)  # S3 modification times have one-second resolution
    object_storage.write_bytes(object_storage.join(root, "not-a-sweep", "x.txt"), b"x")
    assert storage.latest_sweep(root) == object_storage.join(root, "second")


def test_one_name_started_twice_on_s3_starts_once(s3, monkeypatch):
    sweep_dir = object_storage.join(s3.uri("runs"), "same")
    storage.claim(sweep_dir, "same")
    with pytest.raises(SweepInputError, match="is being started by another process"):
        storage.claim(sweep_dir, "same")
    # a claim whose starter died long ago (no sweep.json came) is taken over; a fresh one is not
    monkeypatch.setattr(storage, "CLAIM_STALE_S", 0.0)
    time.sleep(0.05)
    storage.claim(sweep_dir, "same")
    storage.write_json(object_storage.join(sweep_dir, storage.SWEEP_FILE), {"name": "same"})
    with pytest.raises(SweepInputError, match="is being started by another process"):
        storage.claim(sweep_dir, "same")  # the sweep exists: its claim is never stale


def test_two_conditional_creates_one_wins(s3):
    from concurrent.futures import ThreadPoolExecutor

    target = object_storage.join(s3.uri("locks"), "key.claim.0")
    with ThreadPoolExecutor(8) as pool:
        tags = list(pool.map(lambda i: conditional_writes.create_if_absent(target, str(i).encode()), range(8)))
    assert sum(tag is not None for tag in tags) == 1
    content, tag = conditional_writes.read_versioned(target)
    assert conditional_writes.replace_if_match(target, b"next", "stale-etag") is None
    assert conditional_writes.replace_if_match(target, b"next", tag) is not None
    assert s3.read("locks/key.claim.0") == b"next"


def _sweep(tmp_path, data_dir, tiny_models, storage_uri, *more):
    from sweeps.electra_layers import main

    flags = ["--models", tiny_models["bert"], "--data-dir", str(data_dir), "--layers", "1", "--seeds", "0"]
    flags += ["--epochs", "1", "--storage-path", storage_uri, "--mlflow-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    started = time.monotonic()
    code = main([*flags, *more])
    return code, time.monotonic() - started


@pytest.mark.parametrize(
    "case",
    ["no bucket", "wrong credentials", "no credentials", "no answer", "bad scheme", "not s3", "credentials in the uri"],
)
def test_bad_storage_is_refused_before_ray_starts(
    case, s3, tmp_path, data_dir, tiny_models, monkeypatch, capsys, request
):
    from s3_helpers import free_port

    uri = {
        "no bucket": s3.uri("runs").replace(s3.bucket, "no-such-bucket-here"),
        "wrong credentials": s3.uri("runs"),
        "no credentials": s3.uri("runs"),
        "no answer": f"s3://{s3.bucket}/runs?endpoint_override=127.0.0.1:{free_port()}&scheme=http",
        "bad scheme": "nosuchfs://bucket/runs",
        "not s3": "gs://bucket/runs",
        "credentials in the uri": s3.uri("runs") + "&access_key=AKIA&secret_key=hush",
    }[case]
    if case == "wrong credentials":  # a server that checks every key (moto accepts any unless told)
        from s3_helpers import S3Server

        checking = S3Server(tmp_path.parent / f"{tmp_path.name}-iam.log", env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
        request.addfinalizer(checking.stop)
        uri = f"s3://{s3.bucket}/runs?endpoint_override=127.0.0.1:{checking.start().port}&scheme=http"
    if case == "no credentials":  # none in the environment, no profile, no instance role to ask
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            monkeypatch.delenv(key, raising=False)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.chdir(tmp_path)
    before = set(s3.keys())
    code, seconds = _sweep(tmp_path, data_dir, tiny_models, uri, "--name", "refused")
    err = capsys.readouterr().err.strip()
    expected = {
        "no bucket": "does not exist",
        "wrong credentials": "refused the credentials",
        "no credentials": "no AWS credentials found",
        "no answer": "does not answer",
        "bad scheme": "cannot open this URI",
        "not s3": "goes through the S3 API",
        "credentials in the uri": "carries credentials",
    }[case]
    assert code == 2 and expected in err and len(err.splitlines()) == 1, err
    assert "hush" not in err
    assert seconds < 10, f"refused after {seconds:.1f} s"
    assert set(s3.keys()) == before, "a refused sweep wrote to the bucket"
    assert not [p for p in tmp_path.iterdir() if p.name not in ("mlflow.db",)], list(tmp_path.iterdir())


def _checkpoint_in_bucket(s3, tmp_path, run_name="trial"):
    """A finished trial's checkpoint in the bucket (best/ and best.files.json) and its MLflow run."""
    from mlflow import MlflowClient

    from trainables.core.schema import BEST_FILES, TAG_BEST_DIGEST, TAG_CHECKPOINT, TAG_PARENT

    local = tmp_path / "checkpoint"
    (local / "best").mkdir(parents=True)
    (local / "best" / "config.json").write_text('{"model_type": "bert"}')
    (local / "best" / "model.safetensors").write_bytes(b"\x00" * 4096)
    listing = verified_copies.file_manifest(local / "best")
    (local / BEST_FILES).write_text(json.dumps(listing))
    checkpoint = object_storage.join(s3.uri("runs"), "sweep", run_name, "checkpoint_000001")
    object_storage.upload_dir(local, checkpoint)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment(f"e-{run_name}")
    parent = client.create_run(experiment).info.run_id  # the sweep's, named by its sweep.json
    object_storage.write_bytes(
        object_storage.join(s3.uri("runs"), "sweep", "sweep.json"), json.dumps({"parent_run_id": parent}).encode()
    )
    run = client.create_run(experiment, tags={TAG_PARENT: parent})
    client.set_tag(run.info.run_id, TAG_CHECKPOINT, checkpoint)
    client.set_tag(run.info.run_id, TAG_BEST_DIGEST, listing["digest"])
    return run.info.run_id, uri, checkpoint


def test_a_run_reference_in_a_bucket_is_copied_once_and_checked(s3, tmp_path, monkeypatch):
    from trainables.encoders.run_refs import resolve_run

    monkeypatch.setenv("EMBSWEEP_CACHE_DIR", str(tmp_path / "cache"))
    run_id, uri, checkpoint = _checkpoint_in_bucket(s3, tmp_path)
    best = resolve_run(f"runs:/{run_id}", uri)
    assert best.is_relative_to(tmp_path / "cache") and (best / "model.safetensors").stat().st_size == 4096
    if s3.server:
        s3.server.reset_stats()
    assert resolve_run(f"runs:/{run_id}", uri) == best  # made once: read from the node's cache
    if s3.server:  # only the file list is read again (one GET), not the weights
        assert s3.server.stats()["bytes_out"] < 2048, s3.server.stats()

    # a copy cut short on this node is not used: the next reader copies again
    (best / "model.safetensors").write_bytes(b"\x00" * 10)
    assert (resolve_run(f"runs:/{run_id}", uri) / "model.safetensors").stat().st_size == 4096


def test_a_changed_checkpoint_in_the_bucket_is_refused(s3, tmp_path, monkeypatch):
    from trainables.encoders.run_refs import resolve_run

    monkeypatch.setenv("EMBSWEEP_CACHE_DIR", str(tmp_path / "cache"))
    run_id, uri, checkpoint = _checkpoint_in_bucket(s3, tmp_path)
    _, key = object_storage.bucket_key(object_storage.join(checkpoint, "best", "model.safetensors"))
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"\x01" * 4096)
    with pytest.raises(SweepInputError, match="does not match what was recorded"):
        resolve_run(f"runs:/{run_id}", uri)
    assert not list(Path(tmp_path / "cache").rglob("model.safetensors")), "a wrong copy stayed in the cache"
    # the file list itself rewritten: its digest is not the one the run recorded
    _, key = object_storage.bucket_key(object_storage.join(checkpoint, "best.files.json"))
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=json.dumps({"files": {}}).encode())
    with pytest.raises(SweepInputError, match="is not the one its trial recorded"):
        resolve_run(f"runs:/{run_id}", uri)


@pytest.mark.sweep
def test_a_write_during_an_outage_waits_for_the_store(s3, capsys):
    """The store down for 3 s: a claim (a conditional write) is tried again until the store answers, with
    one line each way (pyarrow's writes retry inside the AWS SDK first; the slow outage test covers them)."""
    import threading

    if s3.server is None:
        pytest.skip("an external S3 endpoint cannot be stopped by the test")
    target = object_storage.join(s3.uri("runs"), "during-outage.json")
    s3.server.outage()
    threading.Timer(3.0, s3.server.restore).start()
    started = time.monotonic()
    assert conditional_writes.create_if_absent(target, b"{}") is not None
    assert time.monotonic() - started >= 2.5
    assert s3.read("runs/during-outage.json") == b"{}"
    err = capsys.readouterr().err
    assert "does not answer" in err and "answers again" in err, err


def test_a_write_gives_up_after_the_retry_time(s3, monkeypatch):
    if s3.server is None:
        pytest.skip("an external S3 endpoint cannot be stopped by the test")
    monkeypatch.setenv(object_storage.RETRY_ENV, "1")
    s3.server.outage()
    try:
        with pytest.raises(object_storage.StorageUnavailable):
            conditional_writes.create_if_absent(object_storage.join(s3.uri("runs"), "never.json"), b"{}")
    finally:
        s3.server.restore()


@pytest.mark.sweep  # about 2 s: out of the fast run, which stays under 3 minutes
def test_folders_copy_to_and_from_a_bucket_from_the_command_line(s3, tmp_path, capsys):
    source = tmp_path / "data" / "stsbenchmark"
    source.mkdir(parents=True)
    (source / "sts-train.csv").write_text("a\tb\n")
    uri = object_storage.join(s3.uri("data"))
    assert object_storage.main(["upload", str(tmp_path / "data"), uri]) == 0
    assert "data/stsbenchmark/sts-train.csv" in s3.keys("data/")
    assert object_storage.main(["download", uri, str(tmp_path / "copy")]) == 0
    assert (tmp_path / "copy" / "stsbenchmark" / "sts-train.csv").read_text() == "a\tb\n"
    missing = uri.replace(s3.bucket, "no-such-bucket-here")
    assert object_storage.main(["download", missing, str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "none").exists()
