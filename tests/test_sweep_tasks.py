"""`--task mrpc`, `--task sick` and `--random-init` end to end: a real local Ray, a real MLflow
SQLite store, a tiny model, small slices of the real MRPC and SICK files."""

import pytest
from mlflow_helpers import metric_steps, runs_by_role
from sweep_helpers import sweep_args

from sweeps.electra_layers import main

F1_METRICS = {
    "dev_f1",
    "dev_accuracy",
    "best_dev_f1",
    "test_f1_at_best_dev",
    "test_accuracy_at_best_dev",
    "dev_accuracy_at_best_dev",
    "train_loss",
    "wall_time_s",
}


@pytest.mark.sweep
def test_mrpc_sweep_logs_f1_and_random_init_differs_from_pretrained(sweep_env, tiny_models, capsys):
    common = sweep_args(tiny_models["bert"], "--task mrpc --layers 2 --seeds 0 --epochs 1", *sweep_env["flags"])
    assert main([*common, "--name", "mrpc"]) == 0
    out = capsys.readouterr().out
    assert "best dev F1" in out and "test F1" in out  # progress line and summary use the task's metric
    assert main([*common, "--name", "mrpc-random", "--random-init"]) == 0
    _, children = runs_by_role(sweep_env["uri"])
    by_init = {c.data.params["random_init"]: c for c in children}
    assert set(by_init) == {"False", "True"}
    for child in children:
        assert child.info.status == "FINISHED" and child.data.params["task"] == "mrpc"
        assert F1_METRICS <= set(child.data.metrics), F1_METRICS - set(child.data.metrics)
        assert not any("spearman" in k for k in child.data.metrics)
        assert 0 <= child.data.metrics["test_f1_at_best_dev"] <= 100
        assert "dev_threshold_f1" in child.data.metrics
        assert metric_steps(sweep_env["uri"], child.info.run_id, "dev_f1") == [1]
    pretrained, random = by_init["False"].data.metrics, by_init["True"].data.metrics
    assert by_init["False"].data.params["params_truncated"] == by_init["True"].data.params["params_truncated"]
    assert pretrained["train_loss"] != pytest.approx(random["train_loss"], abs=1e-6)


@pytest.mark.sweep
def test_sick_sweep_logs_macro_f1(sweep_env, tiny_models):
    sweep = "--task sick --layers 1 --seeds 0 --epochs 2 --name sick"
    assert main(sweep_args(tiny_models["electra-discriminator"], sweep, *sweep_env["flags"])) == 0
    _, (child,) = runs_by_role(sweep_env["uri"])
    assert child.info.status == "FINISHED" and child.data.params["task"] == "sick"
    assert F1_METRICS <= set(child.data.metrics)
    assert metric_steps(sweep_env["uri"], child.info.run_id, "dev_f1") == [1, 2]
    assert 0 <= child.data.metrics["best_dev_f1"] <= 100
    assert child.data.metrics["best_dev_f1"] >= child.data.metrics["dev_f1"] - 1e-9  # best over the epochs
