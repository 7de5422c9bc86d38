"""A new sweep's start-up (sweeps/engine/startup.py): the MLflow store is prepared while Ray starts,
the parent run exists before the first trial, and a failure of either side loses nothing."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest

from sweeps.engine import runner, startup
from trainables.core.errors import SweepInputError


def _plan(tmp_path, **args):
    return SimpleNamespace(
        parent_run_id=None, args=args, mlflow_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="startup-test"
    )


def test_the_store_is_prepared_while_ray_starts(tmp_path, monkeypatch):
    """Ray's start waits for the store's preparation to begin: run one after the other, it would time out."""
    store_began, store_done = threading.Event(), threading.Event()

    def prepare(plan):
        store_began.set()
        store_done.wait(10)

    def start_ray():
        assert store_began.wait(10), "the store was not being prepared while Ray started"
        store_done.set()

    monkeypatch.setattr(startup, "prepare_store", prepare)
    startup.ray_and_store(_plan(tmp_path), start_ray)
    assert store_done.is_set()


@pytest.mark.sweep  # a real store's migrations: 5 s or more
def test_a_real_store_and_experiment_are_ready_when_it_returns(tmp_path):
    from mlflow import MlflowClient

    plan = _plan(tmp_path)
    ray_started = []
    startup.ray_and_store(plan, lambda: ray_started.append(threading.current_thread()))
    assert ray_started == [threading.main_thread()]  # Ray starts in the caller's thread
    experiment = MlflowClient(plan.mlflow_uri).get_experiment_by_name("startup-test")
    assert experiment is not None and experiment.lifecycle_stage == "active"


def test_a_refusal_from_ray_waits_for_the_store_and_removes_the_store_it_made(tmp_path, monkeypatch):
    finished = []

    def prepare(plan):
        startup._sqlite_file(plan.mlflow_uri).write_bytes(b"")  # the store appears, then its set-up ends
        threading.Event().wait(0.3)
        finished.append("store")

    def start_ray():
        raise SweepInputError("--cpus-per-trial 64 is more than this Ray's 2 CPUs.")

    monkeypatch.setattr(startup, "prepare_store", prepare)
    with pytest.raises(SweepInputError, match="cpus-per-trial"):
        startup.ray_and_store(_plan(tmp_path), start_ray)
    assert finished == ["store"]  # waited for: no half-made store left behind a thread
    assert not (tmp_path / "mlflow.db").exists()


def test_a_refusal_from_ray_keeps_a_store_that_was_there(tmp_path, monkeypatch):
    (tmp_path / "mlflow.db").write_bytes(b"")
    monkeypatch.setattr(startup, "prepare_store", lambda plan: None)

    def start_ray():
        raise SweepInputError("no")

    with pytest.raises(SweepInputError):
        startup.ray_and_store(_plan(tmp_path), start_ray)
    assert (tmp_path / "mlflow.db").exists()


def test_a_failing_store_is_raised_once_ray_has_started(tmp_path, monkeypatch):
    ray_started = threading.Event()

    def prepare(plan):
        raise RuntimeError("the store is read-only")

    def start_ray():
        threading.Event().wait(0.2)
        ray_started.set()

    monkeypatch.setattr(startup, "prepare_store", prepare)
    with pytest.raises(RuntimeError, match="read-only"):
        startup.ray_and_store(_plan(tmp_path), start_ray)
    assert ray_started.is_set()


@pytest.mark.parametrize("case", [{"address": "ray://head:10001"}, {"resume": True}])
def test_a_resumed_sweep_or_a_cluster_starts_ray_alone(tmp_path, monkeypatch, case):
    """Joining a cluster may refuse the address (bad input writes nothing); a resumed sweep's store exists."""
    prepared = []
    monkeypatch.setattr(startup, "prepare_store", prepared.append)
    plan = _plan(tmp_path, **({"address": case["address"]} if "address" in case else {}))
    if case.get("resume"):
        plan.parent_run_id = "abc"
    startup.ray_and_store(plan, lambda: None)
    assert prepared == []


@pytest.mark.sweep  # a real store's migrations: 5 s or more
def test_the_parent_run_exists_before_the_first_trial(tmp_path, monkeypatch):
    """run_sweep with Ray's start and Tune stubbed: the store made in the thread, the parent run in it
    when Tune starts the trials."""
    from mlflow import MlflowClient

    seen = {}

    class Tuner:
        def fit(self):
            run = MlflowClient(plan.mlflow_uri).get_run(plan.parent_run_id)
            seen["parent"] = (run.info.run_name, run.info.status)
            raise KeyboardInterrupt  # stop here: only the start-up is under test

    sweep_dir = tmp_path / "runs" / "s"
    plan = SimpleNamespace(
        name="s",
        prog="electra_layers",
        method="tmft",
        method_label="tmft",
        sweep_dir=str(sweep_dir),
        storage_path=str(tmp_path / "runs"),
        mlflow_uri=f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}",
        experiment="startup-test",
        configs=[{}],
        static_params={},
        args={},
        parent_run_id=None,
        stages={},
        restore_tune=False,
        reused=[],
        waiting=[],
    )
    for name in ("_init_ray", "_check_resources"):
        monkeypatch.setattr(runner, name, lambda plan: None)
    monkeypatch.setattr(runner, "_credentials_stay_on_their_nodes", lambda: None)
    monkeypatch.setattr(runner, "resolve_resources", lambda plan: SimpleNamespace(describe=lambda plan: ""))
    monkeypatch.setattr(runner, "wrapped_trainable", lambda plan, resources: None)
    monkeypatch.setattr(runner, "_tuner", lambda plan, trainable, resources: Tuner())
    monkeypatch.setattr(runner.seal, "record", lambda *a: None)
    with pytest.raises(KeyboardInterrupt):
        runner.run_sweep(plan)
    assert seen["parent"] == ("s", "RUNNING")


def test_the_timeline_is_written_in_seconds_since_the_process_started(tmp_path, monkeypatch):
    monkeypatch.setattr(startup, "_marks", {})
    monkeypatch.setenv(startup.TIMELINE_ENV, str(tmp_path / "timeline.json"))
    startup.mark("planned")
    startup.mark("fit")
    startup.mark("planned")  # the first mark of a phase stays
    startup.write_timeline()
    marks = json.loads((tmp_path / "timeline.json").read_text())
    assert list(marks) == ["planned", "fit"]
    assert 0 < marks["planned"] <= marks["fit"]
