"""Sweeps that remember (sweeps/engine/reuse.py), through the whole engine with simulated trials: a sweep
run again links every finished trial and schedules none; a trial whose checkpoint is gone is computed again
with one line saying so; --recompute runs everything; the report counts a reused trial once."""

from __future__ import annotations

import shutil

import pytest
from mlflow import MlflowClient

from sweeps.engine import trial_keys
from sweeps.engine.runner import main
from trainables.core import schema

SIMULATED = ["--smoke-test", "--simulate", "--simulate-seconds", "0.2"]


def _trials(client, parent: str) -> list:
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, f"tags.`{schema.TAG_PARENT}` = '{parent}'")


def _parent(client, name: str) -> str:
    experiments = [e.experiment_id for e in client.search_experiments()]
    (run,) = client.search_runs(experiments, f"tags.`{schema.TAG_SWEEP}` = '{name}'")
    return run.info.run_id


@pytest.mark.sweep
def test_a_sweep_run_again_links_its_trials_recomputes_a_lost_one_and_recompute_runs_all(tmp_path, capsys):
    storage = tmp_path / "runs"
    common = [*SIMULATED, "--storage-path", str(storage)]
    client = MlflowClient(tracking_uri=f"sqlite:///{storage}/mlflow.db")

    assert main([*common, "--name", "first"], method="tmft", prog="electra_layers") == 0
    assert "reused: 0 of 4 trials" in capsys.readouterr().out
    first = {r.data.tags[schema.TAG_TRIAL_KEY]: r for r in _trials(client, _parent(client, "first"))}
    assert len(first) == 4
    for key, run in first.items():  # every trial records its key, and what it was made of gives it
        assert trial_keys.key_of_run(run) == key and run.data.params["device_kind"] == "simulated"

    assert main([*common, "--name", "second"], method="tmft", prog="electra_layers") == 0
    out = capsys.readouterr().out
    assert "reused: 4 of 4 trials (from sweep first)" in out and "0 to run" in out
    assert not list((storage / "second").glob("experiment_state*"))  # nothing scheduled: no Tune experiment
    second = _trials(client, _parent(client, "second"))
    assert len(second) == 4
    for link in second:
        origin = first[link.data.tags[schema.TAG_TRIAL_KEY]]
        assert link.info.status == "FINISHED"
        assert link.data.tags[schema.TAG_REUSED_FROM] == origin.info.run_id
        assert link.data.tags[schema.TAG_REUSED_SWEEP] == "first"
        assert link.data.tags[schema.TAG_CHECKPOINT] == origin.data.tags[schema.TAG_CHECKPOINT]
        assert link.data.metrics == origin.data.metrics
        history = client.get_metric_history(link.info.run_id, "dev_spearman")
        assert [m.value for m in history] == [
            m.value for m in client.get_metric_history(origin.info.run_id, "dev_spearman")
        ]

    from analysis.loader import load_runs

    runs = load_runs(f"sqlite:///{storage}/mlflow.db")
    assert len(runs) == 4 and set(runs["sweep"]) == {"first"}  # a reused trial counted once

    lost = next(iter(first.values()))
    shutil.rmtree(lost.data.tags[schema.TAG_CHECKPOINT])
    assert main([*common, "--name", "third"], method="tmft", prog="electra_layers") == 0
    out = capsys.readouterr().out
    assert "reused: 3 of 4 trials" in out
    recomputed = [line for line in out.splitlines() if line.startswith("recomputing")]
    assert len(recomputed) == 1 and f"checkpoint of run {lost.info.run_id} is gone" in recomputed[0]
    third = _trials(client, _parent(client, "third"))
    computed = [r for r in third if schema.TAG_REUSED_FROM not in r.data.tags]
    assert len(third) == 4 and [r.data.tags[schema.TAG_TRIAL_KEY] for r in computed] == [
        lost.data.tags[schema.TAG_TRIAL_KEY]
    ]

    assert main([*common, "--name", "fourth", "--recompute"], method="tmft", prog="electra_layers") == 0
    assert "reused:" not in capsys.readouterr().out
    fourth = _trials(client, _parent(client, "fourth"))
    assert len(fourth) == 4 and not any(schema.TAG_REUSED_FROM in r.data.tags for r in fourth)
