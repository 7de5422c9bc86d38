"""A sweep's start-up: what runs before its first trial, overlapped where it can be, and timed.

- `ray_and_store(plan, start_ray, prepare_store)`: a new sweep on a local Ray prepares its MLflow store
  (a fresh SQLite store's tables, several seconds of schema migrations, and the experiment) in a thread
  while Ray starts; neither needs the other. Both are waited for before either's error is raised, so a
  failure of one never leaves the other half done. A store this call created is removed again when
  Ray's side refuses the sweep (e.g. more CPUs per trial than Ray has): a refusal writes nothing.
  Sweeps that resume, or that join a Ray cluster (`--address`, whose connection may refuse bad input),
  start one after the other as before.
- `mark(name)`: a timestamp of a start-up phase; with `EMBSWEEP_TIMELINE=<file>` the marks (seconds
  since the process started) are written there as JSON at the end (benchmarks/fixed_costs.py reads them).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

TIMELINE_ENV = "EMBSWEEP_TIMELINE"
_marks: dict[str, float] = {}


def process_started() -> float:
    """When this process started (epoch seconds), from the OS."""
    import psutil

    return psutil.Process().create_time()


def mark(name: str) -> None:
    """Note that phase `name` ended now (the first time only: a resumed phase keeps its first mark)."""
    _marks.setdefault(name, time.time())


def write_timeline() -> None:
    """The marks as {name: seconds since the process started} in `$EMBSWEEP_TIMELINE`, if set."""
    path = os.environ.get(TIMELINE_ENV)
    if not path:
        return
    origin = process_started()
    Path(path).write_text(json.dumps({k: round(v - origin, 3) for k, v in _marks.items()}, indent=1))


def _sqlite_file(tracking_uri: str) -> Path | None:
    return Path(tracking_uri[len("sqlite:///") :]) if str(tracking_uri).startswith("sqlite:///") else None


def overlaps(plan) -> bool:
    """Whether this sweep prepares its store while Ray starts: a new sweep on a local Ray."""
    return plan.parent_run_id is None and not plan.args.get("address")


def prepare_store(plan) -> None:
    """The MLflow store (a local one created whole) and the sweep's experiment, ready for the parent run."""
    from sweeps.engine.tracking import configure_http, ensure_experiment, store_lock

    configure_http(plan.mlflow_uri)
    with store_lock(plan.mlflow_uri):
        ensure_experiment(plan.mlflow_uri, plan.experiment)


def ray_and_store(plan, start_ray) -> None:
    """Run `start_ray()` here and `prepare_store(plan)` in a thread at the same time (only `start_ray()` where
    `overlaps(plan)` is false: the parent run's creation prepares the store then); raise the first error
    once both have ended."""
    if not overlaps(plan):
        start_ray()
        mark("ray_started")
        return
    database = _sqlite_file(plan.mlflow_uri)
    new_store = database is not None and not database.exists()
    errors: list[BaseException] = []

    def store() -> None:
        try:
            prepare_store(plan)
            mark("store_ready")
        except BaseException as error:  # raised below, in the caller's thread
            errors.append(error)

    thread = threading.Thread(target=store, name="mlflow-store", daemon=True)
    thread.start()
    try:
        start_ray()
        mark("ray_started")
    except BaseException:
        thread.join()
        if new_store:
            _remove_store(database)
        raise
    thread.join()
    if errors:
        raise errors[0]


def _remove_store(database: Path) -> None:
    """A store this sweep created, and its lock file, removed after a refusal (unless another program
    wrote runs to it meanwhile)."""
    from sweeps.engine import sqlite_store

    if database.exists() and sqlite_store.holds_runs(database):
        return
    for path in (database, Path(f"{database}.lock")):
        path.unlink(missing_ok=True)
