"""benchmarks/cluster_scale_grid.py: its figures from a grid's MLflow runs, against a hand count."""

import importlib.util

import pytest
from mlflow import MlflowClient

from trainables.core.paths import PROJECT_ROOT


def _module():
    spec = importlib.util.spec_from_file_location(
        "cluster_scale_grid", PROJECT_ROOT / "benchmarks" / "cluster_scale_grid.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.sweep  # a SQLite MLflow store is made (about 5 s)
def test_grid_figures_count_gpu_ids_overlaps_the_bound_and_gpu_hours(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("grid")
    started = 1_000_000.0
    node = "f" * 51 + "00001"
    # (gpu id, start, end) seconds after the driver started; every trial waits 10 s at 0.25 GPU
    placed = [("0", 5, 15), ("0", 5, 15), ("0", 6, 16), ("0", 7, 17), ("0", 15, 25), ("1", 8, 18)]
    for gpu, start, end in placed:
        run = client.create_run(experiment, start_time=int((started + start) * 1000))
        run_id = run.info.run_id
        for key, value in {"embsweep.role": "trial", "node_id": node, "gpu_ids": gpu}.items():
            client.set_tag(run_id, key, value)
        client.log_metric(run_id, "wall_time_s", 10.0)
        client.log_metric(run_id, "gpu_share", 0.25)
        client.set_terminated(run_id, end_time=int((started + end) * 1000))
    figures = _module().grid_figures(uri, started, started + 30, speedup=10.0, gpus=2)
    assert figures["trials"] == 6 and figures["first_trial_s"] == pytest.approx(5)
    assert figures["per_gpu"] == {"00001/0": 5, "00001/1": 1}
    assert figures["most_at_once_on_a_gpu"] == 4  # the fifth starts as the first two end
    assert figures["gpu_seconds_held"] == pytest.approx(6 * 0.25 * 10)
    assert figures["longest_chain_s"] == pytest.approx(10)
    assert figures["bound_s"] == pytest.approx(max(15 / 2, 10))
    assert figures["compute_makespan_s"] == pytest.approx(25 - 5) and figures["makespan_s"] == pytest.approx(30)
    assert figures["simulated_gpu_hours"] == pytest.approx(6 * 10 * 10 / 3600)
    assert figures["schedule_costliest_s"] == pytest.approx(10)  # four on one GPU, two on the other, all at 0
    assert figures["schedule_as_placed_s"] == pytest.approx(20)  # GPU 0's fifth waits for a place there


def test_the_dry_runs_gpu_hours_are_read_from_its_line():
    text = "Dry run of x\n  trials: 260\n  GPU-hours: 2.33 one trial after another on one GPU; tf32\n"
    assert _module()._dry_run_gpu_hours(text) == pytest.approx(2.33)
    assert _module()._dry_run_gpu_hours("nothing") is None


@pytest.mark.sweep  # a SQLite MLflow store is made (about 5 s)
def test_grid_bound_and_makespan_are_durations_from_the_first_compute_not_the_drivers_start(tmp_path):
    """A stage submitted at 40 s waits 35 s for its GPU node and runs 3 s (--simulate-seconds 3): it ends at 78 s;
    its trial runs 80 to 100 s. The chain is 3 + 20 s and the makespan 75 to 100 s, not the stage's end
    time since the driver started plus the trial's wait (98 s, above the makespan it should bound)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("grid")
    started = 1_000_000.0
    stage = client.create_run(experiment, start_time=int((started + 40) * 1000))
    client.set_tag(stage.info.run_id, "embsweep.role", "stage")
    client.set_terminated(stage.info.run_id, end_time=int((started + 78) * 1000))
    trial = client.create_run(experiment, start_time=int((started + 80) * 1000)).info.run_id
    for key, value in {"embsweep.role": "trial", "node_id": "f" * 56, "gpu_ids": "0"}.items():
        client.set_tag(trial, key, value)
    client.log_param(trial, "upstream_run_id", stage.info.run_id)
    client.log_metric(trial, "wall_time_s", 20.0)
    client.log_metric(trial, "gpu_share", 0.25)
    client.set_terminated(trial, end_time=int((started + 100) * 1000))
    figures = _module().grid_figures(uri, started, started + 110, speedup=10.0, gpus=2, stage_seconds=3.0)
    assert figures["longest_chain_s"] == pytest.approx(3 + 20)
    assert figures["bound_s"] == pytest.approx(23)
    assert figures["compute_makespan_s"] == pytest.approx(100 - 75)
    assert figures["first_trial_s"] == pytest.approx(80)


def test_list_schedule_counts_by_hand_the_order_and_four_to_a_gpu():
    schedule = _module().list_schedule
    # one GPU, half a GPU each: 10 and 4 start at 0; the 4 s ones follow at 4 and 8
    assert schedule([(10, 0.5), (4, 0.5), (4, 0.5), (4, 0.5)], gpus=1) == pytest.approx(12)
    # cheapest first: 4 and 4 at 0, then 4 and 10 at 4
    assert schedule([(4, 0.5), (4, 0.5), (4, 0.5), (10, 0.5)], gpus=1) == pytest.approx(14)
    assert schedule([(1, 0.2)] * 5, gpus=1) == pytest.approx(2)  # a fifth 0.2 share fits, but 4 is the cap
    assert schedule([(3, 1.0), (5, 1.0), (2, 1.0)], gpus=2) == pytest.approx(5)  # 2 follows 3 on the first GPU
    assert schedule([], gpus=2) == 0.0
