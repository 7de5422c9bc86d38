"""Upstream stages report progress across processes (a file beside the stage in the store, read
by the driver), and their MLflow runs go through the sweep's spooling writer like trial runs."""
import json

import pytest
from mlflow import MlflowClient

from trainables import schema
from trainables.stage_progress import StageProgress, progress_line, progress_path, read_progress


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_progress_is_written_at_most_every_interval_and_formatted(tmp_path):
    clock, spec = Clock(), {"root": str(tmp_path), "key": "k1"}
    progress = StageProgress(spec, total=100, interval=2.0, clock=clock)
    assert read_progress(spec)["done"] == 0
    progress.step(10)
    assert read_progress(spec)["done"] == 0  # within the interval: not written
    clock.now += 3
    progress.step(10)
    record = read_progress(spec)
    assert record["done"] == 20 and record["total"] == 100
    line = progress_line("dapt tiny", record, now=clock.now + 1)  # 20 steps in 4 s: 5/s, 80 left: 16 s
    assert line == "  stage dapt tiny: 20/100 steps, 5.0 steps/s, ~0:16 left (0:04 elapsed)"
    progress.finish()
    assert read_progress(spec)["done"] == 100
    assert progress_line("x", None) == "  stage x: starting"
    assert not list(tmp_path.glob("*.tmp"))  # replaced atomically


def test_a_real_stage_leaves_its_progress_complete(tmp_path, tiny_models, data_dir):
    from trainables.eval_sets import load_suite
    from trainables.layer_embeddings import stage_spec
    from trainables.upstream import execute

    suite = load_suite(["stsb"], data_dir)
    spec = stage_spec("tiny", tiny_models["bert"], [0, 2], ["mean"], ["stsb"], 64, 256, tmp_path, str(data_dir), suite)
    execute(spec)
    record = json.loads(progress_path(spec).read_text())
    assert record["done"] == record["total"] == -(-len(suite.sentences) // 256)


def test_a_stage_run_written_while_the_store_is_down_is_spooled_and_replayed(tmp_path, monkeypatch):
    from sweeps.engine.stages_plan import TAG_STAGE_KEY, create_stage_run, finish_stage_run, log_stage_result
    from sweeps.engine.tracking import MlflowWriter

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    parent = client.create_run(client.create_experiment("e")).info.run_id
    spec = {"kind": "dapt", "key": "stage-key-1", "model": "m", "model_identity": "m@1", "data_checksum": "d",
            "config": {"seed": 0, "epochs": 1, "lr": 1e-4, "batch_size": 8, "corpus": "wiki", "head": "auto"}}
    spool = tmp_path / "spool.jsonl"
    down = MlflowWriter("http://127.0.0.1:9", spool, stream=open(tmp_path / "warnings.txt", "w"))
    assert create_stage_run(down, parent, "sweep", spec, {"git_commit": "abc"}) is None
    log_stage_result(down, parent, spec["key"], {"history": [{"epoch": 1, "train_loss": 2.5}], "device": "cpu"})
    finish_stage_run(down, parent, spec["key"], "FINISHED")
    assert [json.loads(line)["op"] for line in spool.read_text().splitlines()] == ["run", "log", "status"]

    assert MlflowWriter(uri, spool).drain()
    (run,) = [r for r in client.search_runs([client.get_run(parent).info.experiment_id])
              if r.data.tags.get(schema.TAG_ROLE) == "stage"]
    assert run.data.tags[TAG_STAGE_KEY] == spec["key"] and run.info.status == "FINISHED"
    assert run.data.params["method"] == "dapt" and run.data.params["dapt_corpus"] == "wiki"
    assert run.data.metrics["train_loss"] == pytest.approx(2.5)


def test_the_driver_prints_a_running_stages_progress(sweep_env, tiny_models, monkeypatch, capsys):
    import sweeps.engine.stages_plan as stages_plan
    from sweeps.evaluate import main

    monkeypatch.setattr(stages_plan, "PROGRESS_INTERVAL_S", 0.05)
    flags = [f for f in sweep_env["flags"] if f not in ("--max-train-samples", "48", "--max-eval-samples", "60", "--batch-size", "16")]
    assert main(["--models", tiny_models["bert"], "--sets", "sickr_all", "--batch-size", "8", "--name", "watched", *flags]) == 0
    out = capsys.readouterr().out
    assert "stage embeddings bert: " in out and " steps/s, ~" in out, out[:3000]
