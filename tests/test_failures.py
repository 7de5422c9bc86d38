"""Wrong results never pass as success, failures are named, nothing hangs (issue: bad input and
failures). Bad input is refused before any compute with nothing written; a trial that cannot
succeed ends at once, marked failed with its reason, and is not retried."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from mlflow_helpers import runs_by_role
from sweep_helpers import sweep_args

from sweeps.electra_layers import main
from trainables.core import schema

# The config of a 2-epoch TMFT trial on the `tiny_task_data` fixture's model "m".
TRIAL = dict(
    model="m", layer=1, seed=0, epochs=2, lr=2e-5, batch_size=16, weight_decay=0.01, warmup_ratio=0.1, task="stsb"
)


def _copy_model(source: str, target: Path, keep=("config.json", "model.safetensors")) -> Path:
    target.mkdir(parents=True)
    for name in keep:
        shutil.copy(Path(source, name), target / name)
    return target


def _refused(capsys, storage: Path, flags: list[str]) -> str:
    code = main(["--storage-path", str(storage), "--seeds", "0", "--epochs", "1", *flags])
    err = capsys.readouterr().err
    assert code == 2, err
    assert not storage.exists() or not any(storage.rglob("*.db")), "bad input must write nothing"
    return err


def test_model_folder_without_its_tokenizer_is_refused(tmp_path, tiny_models, data_dir, capsys):
    folder = _copy_model(tiny_models["bert"], tmp_path / "no-tokenizer")
    err = _refused(capsys, tmp_path / "runs", ["--models", str(folder), "--data-dir", str(data_dir)])
    assert "its tokenizer has 5 tokens but the model has" in err and "copy the model's own tokenizer files" in err


def test_damaged_or_foreign_weights_are_refused(tmp_path, tiny_models, data_dir, capsys):
    full = Path(tiny_models["bert"])
    truncated = shutil.copytree(full, tmp_path / "truncated")
    data = (full / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    err = _refused(capsys, tmp_path / "runs", ["--models", str(truncated), "--data-dir", str(data_dir)])
    assert "model.safetensors is damaged" in err
    missing = shutil.copytree(full, tmp_path / "no-weights")
    (missing / "model.safetensors").unlink()
    assert "no weights in" in _refused(
        capsys, tmp_path / "runs", ["--models", str(missing), "--data-dir", str(data_dir)]
    )


def test_unreachable_ray_address_fails_within_seconds(tmp_path, tiny_models, data_dir, capsys):
    started = time.monotonic()
    err = _refused(
        capsys,
        tmp_path / "runs",
        ["--models", tiny_models["bert"], "--data-dir", str(data_dir), "--address", "127.0.0.1:1"],
    )
    assert time.monotonic() - started < 30 and "--address 127.0.0.1:1: nothing answers" in err


@pytest.mark.sweep
def test_an_address_where_something_else_answers_is_refused_not_a_traceback(tmp_path, tiny_models, data_dir):
    import socket
    import subprocess
    import sys

    from trainables.core.paths import PROJECT_ROOT

    with socket.socket() as server:  # a TCP port that accepts connections but speaks no Ray
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        done = subprocess.run(
            [
                sys.executable,
                "sweeps/electra_layers.py",
                "--models",
                tiny_models["bert"],
                "--seeds",
                "0",
                "--data-dir",
                str(data_dir),
                "--storage-path",
                str(tmp_path / "runs"),
                "--address",
                address,
            ],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"--address {address}: something answers at" in done.stderr and "not a Ray head" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.db"))


def test_unusable_mlflow_uris_are_refused(tmp_path, tiny_models, data_dir, capsys):
    flags = ["--models", tiny_models["bert"], "--data-dir", str(data_dir), "--mlflow-uri"]
    assert "MLflow has no store for the scheme 'bogus'" in _refused(capsys, tmp_path / "runs", [*flags, "bogus://x"])
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("hello")
    assert "is not an SQLite database" in _refused(capsys, tmp_path / "runs", [*flags, f"sqlite:///{not_a_db}"])


def test_report_against_a_dead_server_fails_within_seconds(tmp_path, capsys):
    from analysis.__main__ import main as analysis_main

    started = time.monotonic()
    assert analysis_main(["report", "--mlflow-uri", "http://127.0.0.1:9", "--out", str(tmp_path / "r")]) == 2
    assert time.monotonic() - started < 30 and "unreachable" in capsys.readouterr().err


def test_credentials_stay_out_of_what_is_written(monkeypatch):
    from trainables.core.endpoints import mlflow_store

    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    monkeypatch.setattr("trainables.core.endpoints.check_tracking_server", lambda uri, flag="": None)
    import os

    assert mlflow_store("https://ann:s%40cret@mlflow.example:5000") == "https://mlflow.example:5000"
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "ann" and os.environ["MLFLOW_TRACKING_PASSWORD"] == "s@cret"


@pytest.mark.slow  # a sweep with a Ray of its own (its logs are checked) against a real tracking server
def test_credentials_reach_no_file_of_the_sweep_mlflow_or_ray(tmp_path, tiny_models, data_dir):
    """`--mlflow-uri http://user:SECRET@host`: the sweep runs, and no file under the storage path,
    the MLflow server's store or Ray's temp folder (session logs, runtime_env_agent.log) holds SECRET."""
    import os
    import subprocess
    import sys
    import tempfile

    from server_helpers import MlflowServer

    from trainables.core.paths import PROJECT_ROOT

    secret = "S3cretPassw0rdXYZ"
    server = MlflowServer(tmp_path / "server")
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths must stay short
    storage = tmp_path / "runs"
    sweep = sweep_args(
        tiny_models["bert"],
        "--layers 1 --seeds 0 --epochs 1 --max-train-samples 48 --max-eval-samples 60 --batch-size 16 --name secret",
        *["--storage-path", str(storage), "--experiment", "test", "--data-dir", str(data_dir)],
        *["--cpus-per-trial", "0.5", "--gpus-per-trial", "0"],
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_PASSWORD")}
    env["RAY_TMPDIR"] = str(ray_tmp)
    try:
        server.start()
        uri = f"http://user:{secret}@127.0.0.1:{server.port}"
        done = subprocess.run(
            [sys.executable, "sweeps/electra_layers.py", *sweep, "--mlflow-uri", uri],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert secret not in done.stdout + done.stderr
        parents, children = server.runs()
        assert len(parents) == 1 and len(children) == 1 and children[0]["info"]["status"] == "FINISHED"
        assert list(ray_tmp.rglob("runtime_env_agent.log")), "the sweep's Ray wrote its logs elsewhere"
        leaks = {}
        for root in (storage, server.storage, ray_tmp):
            for path in root.rglob("*"):
                if path.is_file() and not path.is_symlink():
                    count = path.read_bytes().count(secret.encode())
                    if count:
                        leaks[str(path)] = count
        assert not leaks, f"{sum(leaks.values())} copies of the password in {len(leaks)} files: {leaks}"
    finally:
        server.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.sweep
def test_diverged_training_fails_its_trial_once_with_the_reason(sweep_env, tiny_models, capsys):
    sweep = "--layers 1 --seeds 0 --epochs 2 --lr 1e30 --max-failures 2 --name nan"
    flags = sweep_args(tiny_models["bert"], sweep, *sweep_env["flags"])
    assert main(flags) == 1
    out = capsys.readouterr().out
    assert "1 trial(s) failed:" in out and "training diverged: the mean loss of epoch 1 is nan" in out
    parents, children = runs_by_role(sweep_env["uri"])
    assert parents[0].info.status == "FAILED" and len(children) == 1
    child = children[0]
    assert child.info.status == "FAILED" and "training diverged" in child.data.tags[schema.TAG_FAILURE]
    errors = list(Path(sweep_env["storage"], "nan").rglob("error.txt"))
    assert not errors, "a deterministic failure is not an error that Tune retries"


def test_success_is_judged_by_each_trials_final_state():
    from sweeps.engine.runner import failed_trials
    from trainables.methods.tmft.method import TMFT

    contract = TMFT.metrics(SimpleNamespace(task="stsb", eval_sets=[]))
    config = {"model": "m", "layer": 1, "seed": 0}
    results = [
        SimpleNamespace(error=None, metrics={"done": True, "epoch": 2}, config=config),
        SimpleNamespace(error=None, metrics={"done": False, "epoch": 1}, config={**config, "seed": 1}),
        SimpleNamespace(error=None, metrics={}, config={**config, "seed": 2}),
        SimpleNamespace(error=RuntimeError("boom"), metrics={"done": False}, config={**config, "seed": 3}),
    ]
    lines = failed_trials(results, contract)
    assert len(lines) == 3 and "stopped before its last epoch" in lines[0] and "boom" in lines[2]


def test_summary_survives_nan_metrics():
    from sweeps.engine.summary import summary_table
    from trainables.methods.tmft.method import TMFT

    contract = TMFT.metrics(SimpleNamespace(task="stsb", eval_sets=[]))
    frame = pd.DataFrame(
        {
            "config/model": ["m", "m"],
            "config/layer": [0, 1],
            "config/seed": [0, 0],
            contract.primary: [float("nan"), float("nan")],
            contract.report: [float("nan"), 1.0],
        }
    )
    assert summary_table(frame, contract) == "No finished trials."
    frame.loc[1, contract.primary] = 50.0
    assert "m" in summary_table(frame, contract)


def test_damaged_checkpoint_restarts_the_trial(tmp_path, tiny_task_data, capsys):
    """A truncated state.pt is named in a warning and the trial starts again from epoch 1."""
    from trainables.methods.tmft.trainable import TMFTData

    trial = _bound(TMFTData({"m": tiny_task_data}))(config=TRIAL)
    trial.train()
    trial.save_checkpoint(str(tmp_path))
    trial.stop()
    state = tmp_path / "state.pt"
    state.write_bytes(state.read_bytes()[:100])
    again = _bound(TMFTData({"m": tiny_task_data}))(config=TRIAL)
    again.load_checkpoint(str(tmp_path))
    assert again.epoch == 0 and "state.pt cannot be read" in capsys.readouterr().err
    assert again.train()["epoch"] == 1
    again.stop()


def test_checkpoints_load_without_unpickling_code(tmp_path, tiny_task_data):
    from trainables.methods.tmft.trainable import TMFTData

    trial = _bound(TMFTData({"m": tiny_task_data}))(config=TRIAL)
    trial.train()
    trial.save_checkpoint(str(tmp_path))
    state = torch.load(tmp_path / "state.pt", weights_only=True)  # raises if anything needs arbitrary unpickling
    assert state["epoch"] == 1
    again = _bound(TMFTData({"m": tiny_task_data}))(config=TRIAL)
    again.load_checkpoint(str(tmp_path))
    assert again.epoch == 1
    trial.stop(), again.stop()


def _bound(data):
    """The TMFT Trainable with its shared data, as tune.with_parameters gives it (no Ray needed)."""
    from trainables.methods.tmft.trainable import TMFTTrainable

    class Bound(TMFTTrainable):
        def setup(self, config):
            super().setup(config, data)

    return Bound


@pytest.fixture(scope="module")
def tiny_task_data(tiny_models, data_dir):
    from trainables.training.tokenized import load_task, subset, tokenize_task

    examples, checksums = load_task("stsb", data_dir)
    examples = {s: rows if s == "train" else subset(rows, 40) for s, rows in examples.items()}
    return tokenize_task("stsb", tiny_models["bert"], examples, checksums, 48)


@pytest.mark.sweep
def test_resume_refuses_changed_flags(sweep_env, tiny_models, capsys):
    assert main(sweep_args(tiny_models["bert"], "--layers 1 --seeds 0 --epochs 1 --name r", *sweep_env["flags"])) == 0
    capsys.readouterr()
    code = main(["--resume", str(Path(sweep_env["storage"], "r")), "--lr", "1e-3"])
    assert code == 2 and "--lr 0.001 (the sweep has 2e-05)" in capsys.readouterr().err


def _create_parent(uri: str, name: str, queue) -> None:
    from sweeps.engine.tracking import start_parent_run

    try:
        queue.put(start_parent_run(uri, "together", name, {"a": 1}))
    except Exception as error:  # reported to the test
        queue.put(f"error: {type(error).__name__}: {error}")


@pytest.mark.sweep
def test_sweeps_started_together_on_a_fresh_store_both_start(tmp_path):
    import multiprocessing

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_create_parent, args=(uri, f"s{i}", queue)) for i in range(3)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert not [r for r in results if r.startswith("error")], results
    assert len(set(results)) == 3


def test_one_name_started_twice_together_starts_once(tmp_path):
    from sweeps.engine import storage
    from trainables.core.errors import SweepInputError

    sweep_dir = str(tmp_path / "same")
    storage.claim(sweep_dir, "same")
    with pytest.raises(SweepInputError, match="is being started by another process"):
        storage.claim(sweep_dir, "same")  # this process is alive: its claim holds
    Path(sweep_dir, storage.CLAIM_FILE).write_text(f"{__import__('socket').gethostname()} {_dead_pid()}")
    storage.claim(sweep_dir, "same")  # a dead starter's claim is taken over


def _dead_pid() -> int:
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_storage_path_that_is_a_file_or_unwritable_is_refused(tmp_path, tiny_models, data_dir, capsys):
    flags = ["--models", tiny_models["bert"], "--data-dir", str(data_dir), "--seeds", "0", "--epochs", "1"]
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert main(["--storage-path", str(a_file), *flags]) == 2 and "is a file" in capsys.readouterr().err
    assert main(["--storage-path", "/proc/x", *flags]) == 2 and "cannot be written" in capsys.readouterr().err
    assert main(["--storage-path", str(tmp_path / "ok"), "--local-gpus", "-1", *flags]) == 2
    assert "--local-gpus must be 0 or more" in capsys.readouterr().err


def test_sentences_beyond_the_position_embeddings_are_truncated(tiny_models, tmp_path, data_dir):
    """A tokenizer without model_max_length must not yield more ids than the model has positions."""
    import json

    from trainables.training.tokenized import load_task, subset, tokenize_task

    folder = shutil.copytree(tiny_models["bert"], tmp_path / "no-limit")
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings.pop("model_max_length", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    examples, checksums = load_task("stsb", data_dir)
    long = examples["train"][0].__class__(**{**examples["train"][0].__dict__, "sentence1": "a man " * 400})
    examples = {"train": [long], "dev": subset(examples["dev"], 4), "test": subset(examples["test"], 4)}
    task = tokenize_task("stsb", folder, examples, checksums)
    positions = json.loads((folder / "config.json").read_text())["max_position_embeddings"]
    assert len(task.splits["train"].s1[0]) == positions


def test_hub_data_while_offline_is_a_message(tmp_path, tiny_models, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("datasets.config.HF_HUB_OFFLINE", True, raising=False)
    err = _refused(capsys, tmp_path / "runs", ["--models", tiny_models["bert"], "--data-dir", "hub"])
    assert "--data-dir hub: the hub copy" in err and "pass --data-dir with the local release" in err


@pytest.mark.sweep  # about 2 s: out of the fast run, which stays under 3 minutes
def test_a_store_created_by_another_program_meanwhile_is_tried_again(tmp_path, monkeypatch):
    """An MLflow UI or a script opening a fresh SQLite store takes no lock: a creation that fails
    while it does is tried again."""
    from sweeps.engine import tracking

    calls = []
    real = tracking.ensure_experiment

    def flaky(uri, name):
        calls.append(name)
        if len(calls) == 1:
            raise RuntimeError("alembic: expected to match one row when updating")
        return real(uri, name)

    monkeypatch.setattr(tracking, "ensure_experiment", flaky)
    monkeypatch.setattr(tracking.time, "sleep", lambda seconds: None)
    run_id = tracking.start_parent_run(f"sqlite:///{tmp_path / 'mlflow.db'}", "e", "s", {})
    assert run_id and len(calls) == 2
