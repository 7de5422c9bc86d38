"""The MLflow history's home on the storage path: a tracking server's SQLite store kept on a node's own disk
(SQLite is not safe on NFS) and copied to `<storage-path>/mlflow.db`, so that no end of a cluster loses it.

`python -m sweeps.mlflow_server --storage-path P --local-store FILE` runs `mlflow server` on FILE through
`Keeper`, which:

- restores FILE from `P/mlflow.db` when FILE does not exist (a new cluster, or a new job, on the same storage);
- copies FILE to `P/mlflow.db` with SQLite's online backup (a consistent snapshot while the server writes)
  once its writes have paused for `QUIET_S` seconds, and at least every `--backup-interval` seconds while
  they go on: the copy on the storage path is at most that far behind the store;
- copies it again when the server stops: SIGTERM (a node's shutdown, `kill`, a SLURM job's end or time
  limit signal, a pod's deletion), SIGINT, SIGHUP or the server's own exit.

P is a folder (a shared file system) or an s3:// URI; a copy replaces the previous one whole (a rename, or
one PUT), so a reader never sees part of one. One server at a time owns a home: it holds
`P/mlflow.db.owner` (its host and pid, renewed every `RENEW_S` seconds); a second server on the same home
is refused while the owner is renewed, and takes it over once the owner has not been renewed for
`LEASE_S` seconds (a node that went away), or at once when the owner was a process of the same machine that
is no longer running.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path

from trainables.core import object_storage
from trainables.core.conditional_writes import create_if_absent, read_versioned, replace_if_match
from trainables.core.errors import SweepInputError, redact

HOME_NAME = "mlflow.db"
QUIET_S = 2.0  # a pause in the store's writes this long: copy now (a sweep's end, a report done)
RENEW_S = 15.0
LEASE_S = 60.0


def home_of(storage_path: str) -> str:
    return object_storage.join(storage_path, HOME_NAME)


def snapshot(store: Path) -> bytes:
    """The store's content as one consistent SQLite database (its journal or WAL applied)."""
    with tempfile.TemporaryDirectory(prefix="mlflow-copy-") as folder:
        copy = Path(folder) / HOME_NAME
        with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as source:
            with contextlib.closing(sqlite3.connect(copy)) as target:
                source.backup(target)
        return copy.read_bytes()


def back_up(store: Path, home: str) -> int:
    """Copy the store to its home whole; the bytes copied."""
    data = snapshot(store)
    object_storage.write_bytes(home, data)
    return len(data)


def restore(home: str, store: Path) -> bool:
    """Put the home's copy at `store` (which does not exist); False when the home holds none yet."""
    data = object_storage.read_bytes(home)
    if data is None:
        return False
    store.parent.mkdir(parents=True, exist_ok=True)
    partial = store.with_name(f".{store.name}.restoring")
    partial.write_bytes(data)
    with contextlib.closing(sqlite3.connect(partial)) as db:
        if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            partial.unlink()
            raise SweepInputError(f"{redact(home)} is not a sound SQLite database: restore it from a backup of yours")
    os.replace(partial, store)
    return True


def signature(store: Path) -> tuple:
    """What changes when the store is written: its files' sizes and modification times."""
    found = []
    for suffix in ("", "-wal", "-journal"):
        try:
            stat = Path(f"{store}{suffix}").stat()
            found.append((suffix, stat.st_size, stat.st_mtime_ns))
        except FileNotFoundError:
            pass
    return tuple(found)


class Lease:
    """The claim of one server on a home (`<home>.owner`), so that two servers never overwrite each other's copy."""

    def __init__(self, home: str):
        self.location = object_storage.join(object_storage.parent(home), f"{HOME_NAME}.owner")
        self.home = home
        self.tag: str | None = None

    def _record(self) -> bytes:
        return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "renewed": time.time()}).encode()

    def acquire(self) -> None:
        """Take the home, or raise SweepInputError (one line) when another live server holds it."""
        self.tag = create_if_absent(self.location, self._record())
        if self.tag:
            return
        found = read_versioned(self.location)
        if found is None:  # released meanwhile
            return self.acquire()
        content, tag = found
        try:
            owner = json.loads(content)
            age = time.time() - float(owner["renewed"])
        except (ValueError, KeyError, TypeError):
            owner, age = {"host": "?", "pid": "?"}, LEASE_S
        if age < LEASE_S and not _gone(owner):
            raise SweepInputError(
                f"{redact(self.home)} is the MLflow history of the server on {owner['host']} (pid {owner['pid']}, "
                f"alive {age:.0f} s ago): point the sweeps at that server (--mlflow-uri), or give this one another "
                f"--storage-path; a server that went away is taken over after {LEASE_S:.0f} s"
            )
        self.tag = replace_if_match(self.location, self._record(), tag)
        if self.tag is None:
            raise SweepInputError(f"another MLflow server took {redact(self.home)} at the same moment: start one only")

    def renew(self) -> bool:
        """False when another server has taken the home over (this one must stop copying)."""
        self.tag = replace_if_match(self.location, self._record(), self.tag) if self.tag else None
        return self.tag is not None

    def release(self) -> None:
        if self.tag and read_versioned(self.location) is not None:
            with contextlib.suppress(OSError):
                object_storage.delete(self.location)
        self.tag = None


def _gone(owner: dict) -> bool:
    """The owner was a process of this machine that is no longer running."""
    if owner.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, KeyError, TypeError):
        return False
    return False


def _generation_of(location) -> str | None:
    data = object_storage.read_bytes(location)
    return data.decode().strip() if data else None


class Keeper:
    """Copies a store to its home as its writes pause, at least every `interval` seconds, and once at the end.

    Each copy is stamped with a new generation, written beside the home (`mlflow.db.generation`) and beside the
    store: a store whose stamp is not its home's was left behind while another server wrote the home (a node that
    comes back after the history moved on), and is refused rather than copied over the newer history."""

    def __init__(self, store: Path, home: str, interval: float, say=print):
        self.store, self.home, self.interval, self.say = Path(store), home, interval, say
        self.lease = Lease(home)
        self.home_generation = object_storage.join(object_storage.parent(home), f"{HOME_NAME}.generation")
        self.store_generation = self.store.with_name(f"{self.store.name}.generation")
        self.copied: tuple | None = None  # the store's signature the home holds; None: not known to hold it
        self.seen: tuple = ()
        self.last_copy = self.last_change = self.last_renew = time.monotonic()

    def start(self) -> None:
        """Own the home, and restore the store from it where the store does not exist (or refuse one left behind);
        before the server starts."""
        self.lease.acquire()
        try:
            at_home = self._restore_or_check()
        except BaseException:
            self.lease.release()
            raise
        self.store.parent.mkdir(parents=True, exist_ok=True)
        self.seen = signature(self.store)
        self.copied = self.seen if at_home else None  # a store its home does not hold yet: copied at the first tick

    def _restore_or_check(self) -> bool:
        """Restore a missing store from the home; refuse a store left behind. True when the home holds the store."""
        home_generation = _generation_of(self.home_generation)
        if not self.store.exists():
            if restore(self.home, self.store):
                if home_generation:
                    self.store_generation.write_text(home_generation)
                self.say(f"restored the MLflow store {self.store} from {redact(self.home)}")
            else:
                self.say(f"no MLflow history in {redact(self.home)} yet: a new store, copied there as it is written")
            return True
        mine = self.store_generation.read_text().strip() if self.store_generation.exists() else None
        if home_generation and mine != home_generation:
            raise SweepInputError(
                f"the MLflow store {self.store} is not the last copy of its home {redact(self.home)} (another server "
                f"has written the home since): move {self.store} away, and this server restores the home's history"
            )
        return home_generation is not None

    def copy(self, why: str) -> None:
        if not self.store.exists() or self.lease.tag is None:
            return
        current = signature(self.store)
        size = back_up(self.store, self.home)
        generation = uuid.uuid4().hex
        object_storage.write_bytes(self.home_generation, generation.encode())
        self.store_generation.write_text(generation)
        self.copied, self.last_copy = current, time.monotonic()
        self.say(f"copied the MLflow store to {redact(self.home)} ({size / 1e6:.1f} MB, {why})")

    def tick(self) -> None:
        """Call about once a second while the server runs."""
        now = time.monotonic()
        if now - self.last_renew >= RENEW_S:
            self.last_renew = now
            if not self.lease.renew():
                self.say(f"warning: another MLflow server took over {redact(self.home)}: this one no longer copies")
        current = signature(self.store)
        if current != self.seen:
            self.seen, self.last_change = current, now
        if current == self.copied:
            return
        if self.copied is None:
            self.copy("a store its home did not hold")
        elif now - self.last_change >= QUIET_S:
            self.copy("writes paused")
        elif now - self.last_copy >= self.interval:
            self.copy(f"every {self.interval:g} s")

    def finish(self, why: str) -> None:
        """The last copy (whatever changed), then the home is free for the next server."""
        try:
            if signature(self.store) != self.copied:
                self.copy(why)
        finally:
            self.lease.release()
