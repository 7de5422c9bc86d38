"""Where a trial ran, per epoch, in its MLflow run (sweeps/engine/tracking.py): a trial that moves to
another node (its node died; it was retried or resumed elsewhere) names the node it runs on now in its
`node_id`/`gpu_ids` tags, and every node it ran on, from which epoch, in its placement history."""

from __future__ import annotations

import pickle
import types

import pytest
from mlflow import MlflowClient

from sweeps.engine import tracking
from trainables.core import schema

NODE_A, NODE_B, NODE_C = "a" * 56, "b" * 56, "c" * 56


def result(epoch: int, node: str, gpus: str) -> dict:
    return {"epoch": epoch, "dev_spearman": 0.1 * epoch, "node_id": node, "gpu_ids": gpus, "device": "simulated"}


@pytest.mark.sweep  # a real SQLite store: 3 s or more
def test_a_trial_that_moves_names_its_new_node_and_keeps_where_each_epoch_ran(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = tracking.start_parent_run(store, "test", "placement", {"trials": 1})
    callback = tracking.MlflowSweepCallback(store, parent, sweep_dir=str(tmp_path / "sweep"))
    trial = types.SimpleNamespace(config={"method": "tmft", "layer": 1, "seed": 0}, trial_id="t0", last_result={})
    callback.on_trial_start(0, [], trial)
    for epoch, node, gpus in ((1, NODE_A, "0"), (2, NODE_A, "0"), (3, NODE_B, "2")):  # node A died after epoch 2
        callback.on_trial_result(0, [], trial, result(epoch, node, gpus))
    callback.on_experiment_end([])
    client = MlflowClient(store)
    experiment = client.get_run(parent).info.experiment_id
    (run,) = client.search_runs([experiment], filter_string=f"tags.`{schema.TAG_PARENT}` = '{parent}'")
    assert (run.data.tags["node_id"], run.data.tags["gpu_ids"]) == (NODE_B, "2")  # the replacement, not node A
    # the driver killed and the sweep resumed: a callback restored from Tune's experiment state
    callback = pickle.loads(pickle.dumps(callback))
    callback.on_trial_result(0, [], trial, result(4, NODE_C, "1"))
    callback.on_trial_complete(0, [], trial)
    callback.on_experiment_end([])

    (run,) = client.search_runs([experiment], filter_string=f"tags.`{schema.TAG_PARENT}` = '{parent}'")
    tags = run.data.tags
    assert (tags["node_id"], tags["gpu_ids"]) == (NODE_C, "1")  # where it ran last
    history = [
        (epoch, placement["node_id"], placement["gpu_ids"]) for epoch, placement in schema.placement_history(tags)
    ]
    assert history == [(1, NODE_A, "0"), (3, NODE_B, "2"), (4, NODE_C, "1")]
    where = [schema.placement_of_epoch(tags, epoch)["node_id"] for epoch in (1, 2, 3, 4)]
    assert where == [NODE_A, NODE_A, NODE_B, NODE_C]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "dev_spearman")] == [1, 2, 3, 4]


@pytest.mark.sweep  # a real SQLite store: 3 s or more
def test_epochs_run_again_on_another_node_replace_their_old_entries(tmp_path):
    """A resumed sweep restores a trial from an earlier epoch on another node (the faults-at-scale case): the
    epochs it runs again name the new node, so the history ends where `node_id` says the trial ran last."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = tracking.start_parent_run(store, "test", "placement", {"trials": 1})
    callback = tracking.MlflowSweepCallback(store, parent, sweep_dir=str(tmp_path / "sweep"))
    trial = types.SimpleNamespace(config={"method": "tmft", "layer": 1, "seed": 0}, trial_id="t0", last_result={})
    callback.on_trial_start(0, [], trial)
    for epoch, node in ((1, NODE_A), (2, NODE_B)):  # node A died after epoch 1
        callback.on_trial_result(0, [], trial, result(epoch, node, "0"))
    callback.on_experiment_end([])
    callback = pickle.loads(pickle.dumps(callback))  # the driver killed, the sweep resumed
    for epoch in (1, 2):  # no checkpoint kept: both epochs again, on node C
        callback.on_trial_result(0, [], trial, result(epoch, NODE_C, "1"))
    callback.on_trial_complete(0, [], trial)
    callback.on_experiment_end([])
    client = MlflowClient(store)
    experiment = client.get_run(parent).info.experiment_id
    (run,) = client.search_runs([experiment], filter_string=f"tags.`{schema.TAG_PARENT}` = '{parent}'")
    tags = run.data.tags
    assert tags["node_id"] == NODE_C
    assert [(epoch, where["node_id"]) for epoch, where in schema.placement_history(tags)] == [(1, NODE_C)]
