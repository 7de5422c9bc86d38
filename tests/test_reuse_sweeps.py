"""Sweeps that remember (sweeps/engine/reuse.py), through the whole engine with simulated trials: a sweep
run again links every finished trial and schedules none; a trial whose checkpoint is gone is computed again
with one line saying so; --recompute runs everything; the report counts a reused trial once. Sweeps run in
this process share the tests' Ray (`ray_session`); the ones run at once, or with the bucket's credentials,
are processes of their own."""

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
def test_a_sweep_run_again_links_its_trials_recomputes_a_lost_one_and_recompute_runs_all(tmp_path, capsys, ray_session):
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


def _table(out: str) -> list[str]:
    """The end-of-sweep table's lines (header and rows)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "dev Spearman" in line and not line.startswith("["))
    return lines[start : lines.index("", start) if "" in lines[start:] else None]


@pytest.mark.sweep
def test_extend_runs_only_the_new_cells_as_dry_run_says_and_its_table_is_a_fresh_sweeps(tmp_path, capsys, ray_session):
    storage = tmp_path / "runs"
    common = [*SIMULATED, "--storage-path", str(storage)]
    client = MlflowClient(tracking_uri=f"sqlite:///{storage}/mlflow.db")
    assert main([*common, "--name", "first"], method="tmft", prog="electra_layers") == 0  # seeds 0,1
    capsys.readouterr()

    grow = [*common, "--extend", "first", "--seeds", "0-3"]
    assert main([*grow, "--dry-run"], method="tmft", prog="electra_layers") == 0
    planned = capsys.readouterr().out
    assert "reused: 4 of 8 trials (from sweep first)" in planned and "; 4 to run" in planned
    assert not (storage / "grown").exists()

    assert main([*grow, "--name", "grown"], method="tmft", prog="electra_layers") == 0
    out = capsys.readouterr().out
    assert "reused: 4 of 8 trials (from sweep first)" in out  # as the dry run said
    grown = _trials(client, _parent(client, "grown"))
    computed = sorted(int(r.data.params["seed"]) for r in grown if schema.TAG_REUSED_FROM not in r.data.tags)
    assert len(grown) == 8 and computed == [2, 2, 3, 3]  # only the new cells ran

    fresh_sweep = [*common, "--seeds", "0-3", "--name", "fresh", "--recompute"]
    assert main(fresh_sweep, method="tmft", prog="electra_layers") == 0
    fresh = capsys.readouterr().out
    assert _table(out) == _table(fresh) and _table(out)[1].split()[-1] == "4"  # every cell, the same numbers


@pytest.mark.sweep
def test_two_sweeps_started_at_once_compute_each_shared_trial_once(tmp_path):
    import os
    import subprocess
    import sys

    from trainables.core.paths import PROJECT_ROOT

    storage = tmp_path / "runs"
    script = [sys.executable, str(PROJECT_ROOT / "sweeps" / "electra_layers.py")]
    common = [*SIMULATED[:-1], "3", "--storage-path", str(storage)]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    subprocess.run([*script, *common, "--seeds", "9", "--name", "warm"], env=env, check=True, capture_output=True)
    drivers = [
        subprocess.Popen([*script, *common, "--name", name], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for name in ("left", "right")
    ]
    outputs = [driver.communicate(timeout=600)[0].decode() for driver in drivers]
    assert all(driver.returncode == 0 for driver in drivers), outputs
    client = MlflowClient(tracking_uri=f"sqlite:///{storage}/mlflow.db")
    runs = [r for name in ("left", "right") for r in _trials(client, _parent(client, name))]
    assert len(runs) == 8  # each sweep has all four trials
    computed = [r.data.tags[schema.TAG_TRIAL_KEY] for r in runs if schema.TAG_REUSED_FROM not in r.data.tags]
    assert sorted(computed) == sorted(set(computed)) and len(computed) == 4, outputs  # each computed once
    assert any("being computed by sweep" in out for out in outputs)


@pytest.mark.sweep
def test_keys_reuse_and_extend_with_the_sweeps_on_an_object_store(tmp_path, s3):
    import os
    import subprocess
    import sys

    from trainables.core import object_storage
    from trainables.core.paths import PROJECT_ROOT

    root = s3.uri("runs")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}  # the bucket's credentials, as a cloud machine has them

    def sweep(*flags: str) -> str:
        command = [sys.executable, str(PROJECT_ROOT / "sweeps" / "electra_layers.py"), *SIMULATED, *flags]
        done = subprocess.run([*command, "--storage-path", root, "--mlflow-uri", uri], env=env, capture_output=True)
        assert done.returncode == 0, done.stdout.decode()[-3000:] + done.stderr.decode()[-3000:]
        return done.stdout.decode()

    client = MlflowClient(tracking_uri=uri)
    sweep("--name", "first")
    assert "reused: 4 of 4 trials (from sweep first)" in sweep("--name", "again")
    lost = _trials(client, _parent(client, "first"))[0]
    assert lost.data.tags[schema.TAG_CHECKPOINT].startswith("s3://")
    object_storage.delete_tree(lost.data.tags[schema.TAG_CHECKPOINT])
    out = sweep("--extend", object_storage.join(root, "first"), "--seeds", "0-2", "--name", "grown")
    assert "reused: 3 of 6 trials (from sweep first)" in out and "is gone" in out
    grown = _trials(client, _parent(client, "grown"))
    assert len(grown) == 6 and sum(schema.TAG_REUSED_FROM not in r.data.tags for r in grown) == 3
    assert s3.keys("runs/.trial_claims/")  # the keys it computed, claimed in the bucket


@pytest.mark.sweep
def test_reuse_from_another_store_and_a_deleted_run_is_computed_again_with_one_line(tmp_path, capsys, ray_session):
    one, two = tmp_path / "one", tmp_path / "two"
    assert main([*SIMULATED, "--storage-path", str(one), "--name", "there"], method="tmft", prog="electra_layers") == 0
    other = f"sqlite:///{one}/mlflow.db"
    here = [*SIMULATED, "--storage-path", str(one), "--mlflow-uri", f"sqlite:///{two}/mlflow.db", "--reuse-from", other]
    capsys.readouterr()
    assert main([*here, "--name", "here"], method="tmft", prog="electra_layers") == 0
    assert "reused: 4 of 4 trials (from sweep there)" in capsys.readouterr().out
    client = MlflowClient(tracking_uri=f"sqlite:///{two}/mlflow.db")
    links = _trials(client, _parent(client, "here"))
    assert len(links) == 4 and all(r.data.tags["embsweep.reused_from_store"] == other for r in links)

    deleted = links[0].data.tags[schema.TAG_REUSED_FROM]
    MlflowClient(tracking_uri=other).delete_run(deleted)
    assert main([*here, "--name", "later"], method="tmft", prog="electra_layers") == 0
    out = capsys.readouterr().out
    assert "reused: 3 of 4 trials" in out
    (line,) = [line for line in out.splitlines() if line.startswith("recomputing")]
    assert f"its run {deleted} (sweep there) was deleted" in line


@pytest.mark.sweep
def test_seeds_by_need_on_an_extended_sweep_continues_its_rounds_without_rerunning_a_trial(
    tmp_path, capsys, ray_session
):
    storage = tmp_path / "runs"
    common = [*SIMULATED, "--storage-path", str(storage), "--seeds-by-need", "--initial-seeds", "2"]
    client = MlflowClient(tracking_uri=f"sqlite:///{storage}/mlflow.db")
    assert main([*common, "--seeds", "0-2", "--name", "first"], method="tmft", prog="electra_layers") == 0
    first = {r.data.tags[schema.TAG_TRIAL_KEY] for r in _trials(client, _parent(client, "first"))}
    capsys.readouterr()
    grow = [*common, "--extend", "first", "--seeds", "0-5", "--name", "grown"]
    assert main(grow, method="tmft", prog="electra_layers") == 0
    out = capsys.readouterr().out
    assert "seeds by need, round 0" in out
    grown = _trials(client, _parent(client, "grown"))
    linked = {r.data.tags[schema.TAG_TRIAL_KEY] for r in grown if schema.TAG_REUSED_FROM in r.data.tags}
    computed = [r.data.tags[schema.TAG_TRIAL_KEY] for r in grown if schema.TAG_REUSED_FROM not in r.data.tags]
    assert linked == first  # every trial of the sweep it extends, linked
    seeds = [int(r.data.params["seed"]) for r in grown if r.data.tags[schema.TAG_TRIAL_KEY] in computed]
    assert not set(computed) & first and all(seed >= 2 for seed in seeds)  # round 0's seeds were all known
