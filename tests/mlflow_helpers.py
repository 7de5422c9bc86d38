"""Reading a test's MLflow store back: the parent runs and child runs of one experiment."""

from mlflow import MlflowClient

from trainables.core import schema


def runs_by_role(uri: str, experiment: str = "test") -> tuple[list, list]:
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"experiment {experiment!r} missing from {uri}"
    runs = client.search_runs([found.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get(schema.TAG_ROLE) == "sweep"]
    children = [r for r in runs if r.data.tags.get(schema.TAG_ROLE) == "trial"]
    return parents, children


def metric_steps(uri: str, run_id: str, key: str) -> list[int]:
    return [m.step for m in MlflowClient(uri).get_metric_history(run_id, key)]


def one_finished_and_one_started(uri: str) -> bool:
    """A trial's run FINISHED and another RUNNING with an epoch logged: the moment the driver-killed tests
    stop the driver."""
    _, children = runs_by_role(uri)
    finished = [c for c in children if c.info.status == "FINISHED"]
    started = [c for c in children if c.info.status == "RUNNING" and metric_steps(uri, c.info.run_id, "dev_spearman")]
    return bool(finished and started)
