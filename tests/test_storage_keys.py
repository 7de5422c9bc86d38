"""Object-store keys held to the rules of local paths, and URIs that carry credentials: refused before
anything is written or started, with one line that names the segment (or the credentials) and never
shows a secret; `redact`, the one rule by which a message shows a URI."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from trainables.core import conditional_writes, object_storage
from trainables.core.errors import SweepInputError, redact

BAD_KEYS = {"dot-dot": ("p/../../etc", ".."), "dot": ("p/./q", "."), "empty segment": ("p//q", "")}


@pytest.mark.parametrize("case", sorted(BAD_KEYS))
def test_a_key_a_local_path_could_not_have_is_refused(case):
    key, segment = BAD_KEYS[case]
    uri = f"s3://bucket/{key}?endpoint_override=127.0.0.1:9&scheme=http"
    with pytest.raises(SweepInputError, match=f"the segment {segment!r} of the object key") as refused:
        object_storage.check_key(uri, "--storage-path")
    assert len(str(refused.value).splitlines()) == 1
    with pytest.raises(SweepInputError):  # the last guard: no filesystem is ever opened at such a key
        object_storage.filesystem(uri)


def test_a_leading_slash_is_refused_and_plain_keys_pass():
    with pytest.raises(SweepInputError, match="the segment ''"):
        object_storage.check_key("s3:///bucket/p", "--out")
    for good in ("s3://bucket", "s3://bucket/p", "s3://bucket/p/", "s3://bucket/a.b/..c/d..?x=1", "/local/../path"):
        object_storage.check_key(good, "--out")


def test_redact_strips_user_info_and_secret_query_values():
    text = (
        "s3://AKIAEXAMPLE:hush@bucket/p?endpoint_override=127.0.0.1:9&secret_key=hush2&access_key=AK&scheme=http "
        "http://user:pw@host:5000/x postgresql://user@db/x https://h/o?X-Amz-Signature=sig&X-Amz-Credential=cred "
        "--max-tokens=5"
    )
    shown = redact(text)
    for secret in ("hush", "hush2", "AKIAEXAMPLE", "pw@", "sig", "cred", "=AK"):
        assert secret not in shown, shown
    assert "endpoint_override=127.0.0.1:9" in shown and "scheme=http" in shown
    assert "postgresql://user@db/x" in shown and "--max-tokens=5" in shown
    assert str(SweepInputError(f"refused {text}")) == f"refused {shown}"


def _sweep(tmp_path, data_dir, tiny_models, storage_uri, *more):
    from sweeps.electra_layers import main

    flags = ["--models", tiny_models["bert"], "--data-dir", str(data_dir), "--layers", "1", "--seeds", "0"]
    flags += ["--epochs", "1", "--storage-path", storage_uri, "--mlflow-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    return main([*flags, *more])


@pytest.mark.parametrize("case", ["dot-dot", "dot", "empty segment", "user info", "query"])
def test_a_refused_storage_uri_writes_nothing_and_shows_no_secret(
    case, s3, tmp_path, data_dir, tiny_models, monkeypatch, capsys
):
    secret = f"planted-{uuid.uuid4().hex}"
    base = s3.uri("runs")
    uri = {
        "dot-dot": base.replace("/runs?", "/p/../../etc?"),
        "dot": base.replace("/runs?", "/p/./q?"),
        "empty segment": base.replace("/runs?", "/p//q?"),
        "user info": base.replace("s3://", f"s3://AKIAPLANTED:{secret}@"),
        "query": base + f"&access_key=AKIAPLANTED&secret_key={secret}",
    }[case]
    monkeypatch.chdir(tmp_path)
    code = _sweep(tmp_path, data_dir, tiny_models, uri, "--name", "refused")
    out, err = capsys.readouterr()
    expected = "carries credentials" if case in ("user info", "query") else "of the object key is refused"
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err
    assert secret not in out + err and "AKIAPLANTED" not in out + err
    assert s3.keys() == [], "a refused sweep wrote to the bucket"
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


def test_resume_and_the_stage_store_refuse_such_keys(s3, tmp_path, data_dir, tiny_models, capsys):
    bad = s3.uri("runs").replace("/runs?", "/runs/../x?")
    assert _sweep(tmp_path, data_dir, tiny_models, s3.uri("runs"), "--resume", bad) == 2
    assert "'..'" in capsys.readouterr().err
    from trainables.stages.store import stage_root

    with pytest.raises(SweepInputError, match="--stage-dir .*the segment '\\.'"):
        stage_root(s3.uri("stages").replace("/stages?", "/./stages?"), str(tmp_path))
    assert s3.keys() == []


@pytest.mark.parametrize("command", ["report", "mteb", "cka"])
def test_an_analysis_out_with_such_a_key_is_refused_before_anything_is_read(command, s3, tmp_path, capsys):
    from analysis.__main__ import main

    out = s3.uri("reports").replace("/reports?", "/reports/../../x?")
    argv = {
        "report": ["report", "--mlflow-uri", f"sqlite:///{tmp_path / 'none.db'}", "--out", out],
        "mteb": ["mteb", "--mlflow-uri", f"sqlite:///{tmp_path / 'none.db'}", "--out", out],
        "cka": ["cka", "--models", "a,b", "--out", out],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the segment '..'" in err and len(err.strip().splitlines()) == 1, err
    assert s3.keys() == [] and not (tmp_path / "none.db").exists()


@pytest.mark.sweep
def test_a_finished_sweep_writes_the_secret_nowhere(s3, sweep_env, tiny_models, monkeypatch, capsys):
    """The secret key given as AWS does (the environment): not in the terminal, the bucket, the MLflow
    store, sweep.json or Ray's session logs of a sweep that ran to the end on the object store."""
    from sweeps.electra_layers import main
    from sweeps.engine import ray_internals

    secret = f"planted-{uuid.uuid4().hex}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)  # moto takes any secret
    conditional_writes._CLIENTS.clear()
    flags = list(sweep_env["flags"])
    flags[flags.index("--storage-path") + 1] = s3.uri("runs")
    code = main([*flags, "--models", tiny_models["bert"], "--layers", "1", "--seeds", "0", "--epochs", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    assert secret not in out + err
    assert any(key.endswith("sweep.json") for key in s3.keys())
    leaks = [key for key in s3.keys() if secret.encode() in s3.read(key)]
    places = [sweep_env["tmp"]]
    session = ray_internals.session_dir()
    places.append(Path(session))
    for place in places:
        for path in Path(place).rglob("*"):
            if path.is_file() and not path.is_symlink():
                try:
                    if secret.encode() in path.read_bytes():
                        leaks.append(str(path))
                except OSError:
                    pass
    assert not leaks, f"the planted secret is in {leaks[:10]}"
