"""Upstream stages report progress across processes (a file beside the stage in the store, read
by the driver), and their MLflow runs go through the sweep's spooling writer like trial runs."""

import json
import math

import pytest
from mlflow import MlflowClient
from sweep_helpers import SMALL_DAPT, sweep_args

from trainables.core import schema
from trainables.stages.progress import StageProgress, progress_line, progress_path, read_progress


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_progress_is_written_at_most_every_interval_and_formatted(tmp_path):
    clock, spec = Clock(), {"root": str(tmp_path), "key": "k1"}
    progress = StageProgress(spec, total=100, clock=clock)
    assert read_progress(spec) == {"done": 0, "total": 100, "started": 1000.0, "updated": 1000.0}
    assert (
        progress_line("dapt tiny", read_progress(spec), now=1005.0) == "  stage dapt tiny: 0/100 steps (0:05 elapsed)"
    )
    clock.now += 1
    progress.step(5)
    assert read_progress(spec)["done"] == 5  # the first step is written at once: the driver has a rate
    clock.now += 0.5
    progress.step(5)
    assert read_progress(spec)["done"] == 5  # within the interval: not written
    clock.now += 2.5
    progress.step(10)
    record = read_progress(spec)
    assert record["done"] == 20 and record["updated"] == 1004.0
    # 20 steps in the stage's 4 s: 5 steps/s, 80 left: 16 s; the elapsed time is the reader's.
    line = progress_line("dapt tiny", record, now=1010.0)
    assert line == "  stage dapt tiny: 20/100 steps, 5.00 steps/s, ~0:16 left (0:10 elapsed)"
    progress.finish()
    assert read_progress(spec)["done"] == 100
    assert progress_line("x", None) == "  stage x: starting"
    assert [p.name for p in tmp_path.iterdir()] == ["k1.progress.json"]  # replaced atomically, no temp file left


@pytest.mark.parametrize("kind", ["dapt", "ws"])
def test_a_real_stage_reports_every_optimiser_step_and_hides_an_earlier_attempts(
    kind, tmp_path, tiny_models, data_dir, monkeypatch
):
    from trainables.methods.tmft import dapt, word_similarity
    from trainables.stages.store import make_spec
    from trainables.stages.upstream import execute

    if kind == "dapt":  # 48 sentences, 3 batches of 16, 2 optimiser steps per epoch
        config = dapt.stage_config(corpus="sick", lr=1e-4, max_sentences=48, **SMALL_DAPT)
    else:  # 48 pairs, 3 batches (optimiser steps) of 16 per epoch
        config = word_similarity.stage_config(
            1,
            epochs=2,
            batch_size=16,
            lr=1e-4,
            selection="cosine",
            random_init=False,
            max_train_samples=48,
            max_eval_samples=32,
        )
    spec = make_spec(kind, "tiny-bert", tiny_models["bert"], tmp_path, data_dir, "test-data", config)
    progress_path(spec).write_text(
        json.dumps({"done": 7, "total": 9, "started": 0.0, "updated": 1.0})
    )  # a dead attempt's
    at_start, written = [], []
    init, write = StageProgress.__init__, StageProgress._write

    def starting(self, *args, **kwargs):
        at_start.append(read_progress(spec))
        init(self, *args, **kwargs)

    def recording(self):
        write(self)
        written.append(read_progress(spec)["done"])

    monkeypatch.setattr(StageProgress, "__init__", starting)
    monkeypatch.setattr(StageProgress, "_write", recording)
    monkeypatch.setattr(StageProgress, "interval", 0.0)
    result = execute(spec)["result"]
    total = result["optimizer_steps"] if kind == "dapt" else 2 * math.ceil(result["train_pairs"] / 16)
    assert total == (4 if kind == "dapt" else 6)
    assert at_start == [None], "the driver must not see an earlier attempt's record while the stage prepares"
    assert written == [*range(total + 1), total]
    assert read_progress(spec)["done"] == read_progress(spec)["total"] == total


def test_a_stage_run_written_while_the_store_is_down_is_spooled_and_replayed(tmp_path, monkeypatch):
    from sweeps.engine.stages_plan import TAG_STAGE_KEY, create_stage_run, finish_stage_run, log_stage_result
    from sweeps.engine.tracking import MlflowWriter

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    parent = client.create_run(client.create_experiment("e")).info.run_id
    spec = {
        "kind": "dapt",
        "key": "stage-key-1",
        "model": "m",
        "model_identity": "m@1",
        "data_checksum": "d",
        "config": {"seed": 0, "epochs": 1, "lr": 1e-4, "batch_size": 8, "corpus": "wiki", "head": "auto"},
    }
    spool = tmp_path / "spool.jsonl"
    down = MlflowWriter("http://127.0.0.1:9", spool, stream=open(tmp_path / "warnings.txt", "w"))
    assert create_stage_run(down, parent, "sweep", spec, {"git_commit": "abc"}) is None
    log_stage_result(down, parent, spec["key"], {"history": [{"epoch": 1, "train_loss": 2.5}], "device": "cpu"})
    finish_stage_run(down, parent, spec["key"], "FINISHED")
    assert [json.loads(line)["op"] for line in spool.read_text().splitlines()] == ["run", "log", "status"]

    assert MlflowWriter(uri, spool).drain()
    (run,) = [
        r
        for r in client.search_runs([client.get_run(parent).info.experiment_id])
        if r.data.tags.get(schema.TAG_ROLE) == "stage"
    ]
    assert run.data.tags[TAG_STAGE_KEY] == spec["key"] and run.info.status == "FINISHED"
    assert run.data.params["method"] == "dapt" and run.data.params["dapt_corpus"] == "wiki"
    assert run.data.metrics["train_loss"] == pytest.approx(2.5)


@pytest.mark.sweep
def test_the_driver_prints_a_running_stages_progress(sweep_env, tiny_models, monkeypatch, capsys):
    import sweeps.engine.stages_plan as stages_plan
    from sweeps.evaluate import main

    monkeypatch.setattr(stages_plan, "PROGRESS_INTERVAL_S", 0.05)
    sweep = "--sets sickr_all --batch-size 8 --name watched"
    assert main(sweep_args(tiny_models["bert"], sweep, *sweep_env["base"])) == 0
    out = capsys.readouterr().out
    assert "  stage embeddings bert: starting\n" in out and " steps/s, ~" in out, out[:3000]
    assert out.count("  stage embeddings bert: starting\n") == 1, out[:3000]  # a line only when there is news
