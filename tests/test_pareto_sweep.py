"""A whole `--search pareto` sweep on a tiny model: killed mid-sweep (SIGKILL), continued with --resume,
every point run once with its rung and rank in MLflow, and the report marking the front it found."""

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow_helpers import one_finished_and_one_started, runs_by_role
from sweep_helpers import kill_driver_when, sweep_args

from analysis.report import build_report
from analysis.search_front import search_points
from sweeps.electra_layers import main


@pytest.mark.sweep
def test_a_pareto_search_resumes_after_a_kill_and_its_report_marks_the_front(sweep_env, tiny_models, ray_session):
    address = ray_session.get_runtime_context().gcs_address
    uri = sweep_env["uri"]
    MlflowClient(uri).search_experiments()
    settings = (
        "--layers 0,1,2,3 --seeds 0,1 --epochs 3 --search pareto --num-samples 6 --pareto-eta 2 --max-concurrent 1"
    )
    sweep = sweep_args(tiny_models["bert"], settings, *sweep_env["flags"], "--max-train-samples", "320")
    kill_driver_when(
        "sweeps/electra_layers.py",
        [*sweep, "--name", "front", "--address", address],
        sweep_env["tmp"] / "driver.log",
        lambda: one_finished_and_one_started(uri),
        what="the first trial to finish and the second to log an epoch",
    )
    rungs_file = Path(sweep_env["storage"], "front", "pareto-rungs.state")
    before = json.loads(rungs_file.read_text())["rungs"]["1"]

    assert main(["--resume", str(sweep_env["storage"] / "front")]) == 0

    _, children = runs_by_role(uri)
    assert len(children) == 6
    assert len({(c.data.params["layer"], c.data.params["seed"]) for c in children}) == 6  # no point twice
    client = MlflowClient(uri)
    for child in children:
        assert child.info.status == "FINISHED"
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "dev_spearman")]
        rung = child.data.metrics["pareto_rung"]
        assert len(steps) == len(set(steps)) and max(steps) == rung  # it ran up to its last rung, each epoch once
        if child.data.metrics["pareto_kept"] == 0:
            assert rung < 3
        else:
            assert rung == 3
        assert child.data.metrics["pareto_rank"] >= 0
        assert child.data.metrics["encode_ms_per_sentence"] > 0  # the other size --pareto-size can minimise
    rungs = json.loads(rungs_file.read_text())["rungs"]
    assert set(before) <= set(rungs["1"]) and len(rungs["1"]) == 6  # the records from before the kill were kept
    assert any(c.data.metrics["pareto_kept"] == 0 for c in children)  # the scheduler stopped someone

    report = build_report(uri, sweep_env["tmp"] / "report", experiment="test")
    points = search_points(report.runs)
    assert len(points) == 6
    front = points[points["on_front"]]
    assert not front.empty and front["completed"].all()
    index = report.index.read_text()
    assert "## Pareto search front" in index and "figures/search_front.png" in index
    assert (sweep_env["tmp"] / "report" / "figures" / "search_front.png").is_file()
