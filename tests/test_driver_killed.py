"""A sweep whose driver is killed (SIGKILL) mid-sweep is continued with --resume: finished
trials are not rerun, the others continue from their checkpoints under the concurrency limit,
the MLflow store ends with exactly one child run per configuration holding every epoch once,
and the numbers equal those of an uninterrupted sweep."""

import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow_helpers import one_finished_and_one_started, runs_by_role
from sweep_helpers import kill_driver_when, sweep_args

from sweeps.electra_layers import main
from trainables.core.schema import TAG_CHECKPOINT


@pytest.mark.sweep
def test_killed_driver_resumes_without_rerunning_or_duplicating(sweep_env, tiny_models, ray_session):
    address = ray_session.get_runtime_context().gcs_address
    MlflowClient(sweep_env["uri"]).search_experiments()  # the store exists before the driver starts: this test polls it
    settings = "--layers 1,2 --seeds 0,1 --epochs 4 --max-concurrent 1 --max-train-samples 320"
    sweep = sweep_args(tiny_models["bert"], settings, *sweep_env["flags"])
    uri = sweep_env["uri"]

    kill_driver_when(
        "sweeps/electra_layers.py",
        [*sweep, "--name", "killed", "--address", address],
        sweep_env["tmp"] / "driver.log",
        lambda: one_finished_and_one_started(uri),
        what="the first trial to finish and the second to log an epoch",
    )
    killed_at = time.time() * 1000
    _, before = runs_by_role(uri)
    finished_before = {c.info.run_id for c in before if c.info.status == "FINISHED"}

    assert main(["--resume", str(sweep_env["storage"] / "killed")]) == 0

    parents, children = runs_by_role(uri)
    assert len(parents) == 1 and len(children) == 4
    assert len({c.data.tags["embsweep.config_hash"] for c in children}) == 4
    client = MlflowClient(uri)
    for child in children:
        assert child.info.status == "FINISHED"
        history = client.get_metric_history(child.info.run_id, "dev_spearman")
        assert sorted(m.step for m in history) == [1, 2, 3, 4], child.info.run_name
        if child.info.run_id in finished_before:
            assert all(m.timestamp < killed_at for m in history), "a finished trial was rerun"
    # the concurrency limit (1) held after the resume: no two trials' epochs interleave
    spans = sorted(
        (min(m.timestamp for m in h), max(m.timestamp for m in h))
        for h in (client.get_metric_history(c.info.run_id, "dev_spearman") for c in children)
    )
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    for child in children:  # retention on (the default, best): each finished trial kept its best-dev folder only
        checkpoint = Path(child.data.tags[TAG_CHECKPOINT])
        assert {p.name for p in checkpoint.iterdir()} == {"best", "best.files.json", "state.pt", "trial.json"}, (
            child.info.run_name
        )

    assert main([*sweep, "--name", "clean", "--experiment", "clean"]) == 0
    _, clean = runs_by_role(uri, "clean")
    key = lambda run: (run.data.params["layer"], run.data.params["seed"])
    clean_by_key = {key(c): c for c in clean}
    for child in children:
        for metric in ("best_dev_spearman", "test_spearman_at_best_dev", "train_loss"):
            assert child.data.metrics[metric] == pytest.approx(
                clean_by_key[key(child)].data.metrics[metric], abs=1e-4
            ), metric


@pytest.mark.sweep
def test_a_driver_killed_during_its_stage_resumes_and_leaves_no_run_running(sweep_env, tiny_models, ray_session):
    """Killed while its upstream stage computes (before Tune has any state), the sweep continues with
    --resume: the stage is computed, its one run and the parent end FINISHED, every trial runs once."""
    from sweeps.improvements import main as improvements

    address = ray_session.get_runtime_context().gcs_address
    MlflowClient(sweep_env["uri"]).search_experiments()
    sweep = sweep_args(
        tiny_models["bert"],
        "--layers 1 --seeds 0,1 --epochs 1 --improvement ws --ws-epochs 40 --ws-max-train-samples 256",
        *sweep_env["flags"],
    )
    stages = sweep_env["storage"] / "stages"
    kill_driver_when(
        "sweeps/improvements.py",
        [*sweep, "--name", "stage", "--address", address],
        sweep_env["tmp"] / "driver.log",
        lambda: any(stages.glob("*.progress.json")),
        what="the WS stage to start computing",
    )
    assert not list(stages.glob("*/stage.json")), "the stage finished before the driver was killed"

    assert improvements(["--resume", str(sweep_env["storage"] / "stage")]) == 0

    client = MlflowClient(sweep_env["uri"])
    experiment = client.get_experiment_by_name("test").experiment_id
    runs = client.search_runs([experiment], max_results=100)
    by_role = {}
    for run in runs:
        by_role.setdefault(run.data.tags.get("embsweep.role"), []).append(run)
    assert [r.info.status for r in by_role["sweep"]] == ["FINISHED"]
    assert [r.info.status for r in by_role["stage"]] == ["FINISHED"]
    assert sorted(r.info.status for r in by_role["trial"]) == ["FINISHED", "FINISHED"]
    assert {r.info.status for r in runs} == {"FINISHED"}
