"""A local SQLite MLflow store that no other program sees half-made.

MLflow creates a store's tables on first use by running its schema migrations in place, so a second
client (the UI, a script) opening the same fresh file at the same moment can interleave with them
and leave it half-migrated (`_alembic_tmp_*` tables) for every later client. The sweep therefore:

- creates a missing store in a temporary file beside it and links it into place in one step
  (`os.link` never replaces: if another program created the file meanwhile, that one is used);
- finds a store left half-migrated (leftover `_alembic_tmp_*` tables that stay after another
  client had time to finish): one that holds no runs is rebuilt the same way (the old file kept as
  `<name>.half-migrated-<time>`); one that holds runs is refused, naming the tables and what to do.

Call `prepare(path)` holding the store's lock (`tracking.store_lock`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
import uuid
from pathlib import Path

from trainables.core.errors import SweepInputError

SETTLE_S = 10.0  # how long another client's migration may still be running


def half_migrated(database: Path) -> list[str]:
    """The `_alembic_tmp_*` tables of a store (none in a complete one)."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        rows = db.execute(r"SELECT name FROM sqlite_master WHERE name LIKE '\_alembic\_tmp\_%' ESCAPE '\'")
        return sorted(name for (name,) in rows)


def holds_runs(database: Path) -> bool:
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        try:
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] > 0
        except sqlite3.OperationalError:  # no runs table yet
            return False


def _build(database: Path) -> Path:
    """A complete store in a temporary file beside `database`."""
    from mlflow import MlflowClient

    temporary = database.with_name(f".{database.name}.creating-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    MlflowClient(f"sqlite:///{temporary}").search_experiments()  # runs every migration
    return temporary


def prepare(database: Path) -> None:
    """Create `database` if missing, or rebuild it if it was left half-migrated (see the module doc)."""
    database = Path(database)
    if not database.exists():
        temporary = _build(database)
        try:
            os.link(temporary, database)
        except FileExistsError:
            pass  # another program created it meanwhile: checked below like any other store
        finally:
            temporary.unlink(missing_ok=True)
    deadline = time.time() + SETTLE_S
    while database.stat().st_size == 0 or half_migrated(database):
        if time.time() > deadline:
            break
        time.sleep(0.5)
    leftovers = half_migrated(database) if database.stat().st_size else ["(an empty file)"]
    if not leftovers:
        return
    if holds_runs(database):
        raise SweepInputError(
            f"the MLflow store {database} was left half-migrated by an interrupted MLflow client "
            f"(leftover tables {', '.join(leftovers)}) and it holds runs: restore it from a backup, or "
            "move it away to start a new store"
        )
    backup = database.with_name(f"{database.name}.half-migrated-{time.strftime('%Y%m%d-%H%M%S')}")
    shutil.copy2(database, backup)
    os.replace(_build(database), database)
    print(f"The MLflow store {database} was left half-migrated and held no runs: rebuilt (old file: {backup})")
