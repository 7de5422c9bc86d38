"""A local SQLite MLflow store is never seen half-made: a sweep and a second MLflow client opening a
fresh store at the same moment leave it whole, and a store left half-migrated is rebuilt when it
holds no runs or named when it does."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time

import pytest
from mlflow import MlflowClient

from sweeps.engine import sqlite_store
from trainables.core.errors import SweepInputError


def _other_client(uri: str, start: float) -> str:
    while time.time() < start:
        pass
    MlflowClient(uri).search_experiments()
    return "ok"


def _sweep(uri: str, start: float) -> str:
    while time.time() < start:
        pass
    from sweeps.engine.tracking import start_parent_run

    return start_parent_run(uri, "test", "sweep", {"a": 1})


@pytest.mark.slow
def test_a_sweep_and_a_second_client_opening_a_fresh_store_together_leave_it_whole(tmp_path):
    for attempt in range(3):  # without the atomic creation, most attempts left _alembic_tmp_* tables
        database = tmp_path / f"mlflow{attempt}.db"
        uri = f"sqlite:///{database}"
        start = time.time() + 8  # both processes have imported MLflow by then
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            other = pool.apply_async(_other_client, (uri, start))
            sweep = pool.apply_async(_sweep, (uri, start))
            assert other.get(120) == "ok"
            parent = sweep.get(120)
        assert sqlite_store.half_migrated(database) == []
        assert MlflowClient(uri).get_run(parent).data.tags["embsweep.role"] == "sweep"


def _half_migrate(database):
    with sqlite3.connect(database) as db:
        db.execute("CREATE TABLE _alembic_tmp_experiments (experiment_id INTEGER)")


@pytest.mark.sweep
def test_a_half_migrated_store_is_rebuilt_when_it_holds_no_runs_and_named_when_it_does(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_store, "SETTLE_S", 0.0)
    empty = tmp_path / "empty.db"
    sqlite_store.prepare(empty)  # created whole
    assert sqlite_store.half_migrated(empty) == [] and MlflowClient(f"sqlite:///{empty}").search_experiments()
    _half_migrate(empty)
    sqlite_store.prepare(empty)
    assert sqlite_store.half_migrated(empty) == []
    assert MlflowClient(f"sqlite:///{empty}").search_experiments()
    assert [p.name.split("-")[0] for p in tmp_path.glob("empty.db.half-migrated-*")] == ["empty.db.half"]

    used = tmp_path / "used.db"
    client = MlflowClient(f"sqlite:///{used}")
    client.create_run(client.create_experiment("e"))
    _half_migrate(used)
    with pytest.raises(SweepInputError, match=r"half-migrated .*_alembic_tmp_experiments.* holds runs"):
        sqlite_store.prepare(used)
    assert sqlite_store.holds_runs(used)  # left as it was
