"""A content-addressed store for pipeline stages (word-similarity TMFT, DAPT, ...).

A stage's outputs live in `root/<key>/`, where `key = stage_key(model, stage_config, data_checksum)`
is the sha256 of the sorted JSON of those three things, so every trial (and every later sweep)
that needs the same stage finds the same directory.

Layout under `root`:

- `<key>/`            the finished stage: whatever `compute_fn` wrote, plus `stage.json`
                      (key, model, config, data checksum, metadata, the compute's result,
                      timings, host/pid, `"complete": true`).
- `<key>.lock`        the lock file of that key (left in place; deleting lock files races).
- `.tmp-<key>-<...>/` a stage being computed; renamed to `<key>/` once complete.

`get_or_compute` protocol:

1. If `<key>/stage.json` says complete, return `<key>/` (no locking).
2. Otherwise take an exclusive `fcntl.flock` on `<key>.lock` (blocking, or polling when a
   timeout is given). Whoever gets it first computes; the others wait on the lock.
3. Holding the lock, look again: a waiter finds the finished stage and returns it.
4. Otherwise discard leftovers of earlier attempts (temp dirs of this key and an incomplete
   `<key>/`: only a lock holder writes them, so they belong to a process that died or failed),
   run `compute_fn(tmp_dir)` in a fresh temp dir in `root` (same filesystem), write
   `stage.json` into it, fsync, and `os.rename` it to `<key>/` (atomic on POSIX). A reader
   therefore sees either no `<key>/` or a complete one.
5. If `compute_fn` raises, its temp dir is removed and the exception propagates; nothing
   complete is left, so the next call recomputes. If the computing process dies (killed, OOM),
   the kernel releases its flock and the next waiter takes over, discarding the partial temp dir.

Shared storage: `flock` locks are per open file description, so they also exclude threads and
separate `StageStore` instances within one process. On Linux NFS clients (>= 2.6.12), `flock` is
emulated with whole-file POSIX (NLM / NFSv4) locks, which do exclude processes on different
hosts, provided the server supports locking (`nolock`/`local_lock=flock` mounts make locks
host-local). After a client crash, an NFSv4 lock is freed only when its lease expires (typically
90 s), so waiters on other hosts wait that long before taking over. Where the filesystem has no
lock support, `flock` fails (ENOLCK) and so does `get_or_compute`: put the store on a local or
lock-capable filesystem. Where locks are silently host-local, two hosts may both compute a stage;
the first rename wins and the other copy is discarded, but a late starter can also delete the
other's temp dir as a leftover, failing that compute.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from trainables.core.errors import SweepInputError

MANIFEST = "stage.json"
TMP_PREFIX = ".tmp-"


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def stage_key(model: str, stage_config: dict, data_checksum: str) -> str:
    """sha256 (hex) of the sorted JSON of {model, config, data}: equal inputs give equal keys."""
    try:
        blob = _canonical_json({"model": str(model), "config": stage_config, "data": str(data_checksum)})
    except (TypeError, ValueError) as exc:
        raise SweepInputError(f"stage config must be plain JSON (str keys, numbers, strings, lists): {exc}") from None
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _fsync(path: Path) -> None:
    """Flush a file or a directory entry to disk, if the file system allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            _fsync(Path(dirpath, name))
        _fsync(Path(dirpath))


class StageStore:
    """Content-addressed stage directories under `root` (created if missing)."""

    def __init__(self, root):
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        if not key or "/" in key or key.startswith("."):
            raise ValueError(f"bad stage key {key!r}")
        return self.root / key

    def read_manifest(self, key: str) -> dict | None:
        """The stage's `stage.json` if the stage is complete, else None."""
        try:
            manifest = json.loads((self.path(key) / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(manifest, dict) or manifest.get("complete") is not True:
            return None
        return manifest

    def lookup(self, key: str) -> Path | None:
        """`root/<key>` if that stage is complete, else None (never blocks)."""
        return self.path(key) if self.read_manifest(key) is not None else None

    def _acquire(self, lock_path: Path, timeout: float | None) -> int:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            if timeout is None:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX)
                        return fd
                    except InterruptedError:
                        continue
            deadline = time.monotonic() + timeout
            delay = 0.02
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES, errno.EINTR):
                        raise
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"stage {lock_path.stem} is still being computed by another process after {timeout:g} s "
                        f"(lock {lock_path})"
                    )
                time.sleep(min(delay, remaining))
                delay = min(delay * 2, 1.0)
        except BaseException:
            os.close(fd)
            raise

    def _discard_leftovers(self, key: str) -> None:
        for stale in self.root.glob(f"{TMP_PREFIX}{key}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        final = self.path(key)
        if final.exists() and self.read_manifest(key) is None:
            shutil.rmtree(final, ignore_errors=True)

    def get_or_compute(
        self, key: str, compute_fn: Callable[[Path], Any], metadata: dict | None = None, timeout: float | None = None
    ) -> Path:
        """Return `root/<key>`, computing it with `compute_fn(tmp_dir)` unless it already exists.

        `compute_fn` writes the stage's outputs into `tmp_dir`; if it returns a dict (e.g. the
        stage's MLflow run id), that goes into the manifest as `result`. `metadata` (plain JSON)
        is stored in the manifest as is. Concurrent callers with the same key: one computes, the
        others block until it is done (or `timeout` seconds, then TimeoutError) and reuse it.
        """
        existing = self.lookup(key)
        if existing is not None:
            return existing
        metadata = dict(metadata or {})
        try:
            _canonical_json(metadata)
        except (TypeError, ValueError) as exc:
            raise SweepInputError(f"stage metadata must be plain JSON: {exc}") from None

        final = self.path(key)
        lock_fd = self._acquire(self.root / f"{key}.lock", timeout)
        try:
            existing = self.lookup(key)
            if existing is not None:
                return existing
            self._discard_leftovers(key)
            tmp = self.root / f"{TMP_PREFIX}{key}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            tmp.mkdir()
            try:
                started = time.time()
                result = compute_fn(tmp)
                finished = time.time()
                manifest = {
                    "key": key,
                    "metadata": metadata,
                    "result": result if isinstance(result, dict) else None,
                    "started_at": started,
                    "finished_at": finished,
                    "compute_seconds": finished - started,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "complete": True,
                }
                try:
                    text = json.dumps(manifest, sort_keys=True, indent=2, allow_nan=False)
                except (TypeError, ValueError):
                    manifest["result"] = {"repr": repr(result)}
                    text = json.dumps(manifest, sort_keys=True, indent=2, allow_nan=False)
                (tmp / MANIFEST).write_text(text + "\n", encoding="utf-8")
                _fsync_tree(tmp)
                try:
                    os.rename(tmp, final)
                except OSError:
                    if self.lookup(key) is None:
                        raise
                    # Another host finished first (only possible where flock does not exclude).
                    shutil.rmtree(tmp, ignore_errors=True)
                    return final
                _fsync(self.root)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            return final
        finally:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
            finally:
                os.close(lock_fd)


def stage_root(stage_dir: str | None, storage_path: str) -> Path:
    """The stage store: `--stage-dir`, else `<storage-path>/stages` (a URI storage path needs
    `--stage-dir`: the store locks files)."""
    if stage_dir:
        return Path(stage_dir).expanduser().resolve()
    if "://" in str(storage_path):
        raise SweepInputError(
            "--storage-path is a URI, but the stage store needs a file system with locks: pass --stage-dir (e.g. an "
            "NFS mount)"
        )
    return Path(storage_path) / "stages"


def model_fingerprint(model_path) -> str:
    """A cheap identity of a local model folder: config.json and the weight files' names and sizes."""
    path = Path(model_path)
    digest = hashlib.sha256()
    config = path / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    for weights in sorted(list(path.glob("*.safetensors")) + list(path.glob("*.bin"))):
        digest.update(f"{weights.name}:{weights.stat().st_size}\n".encode())
    return digest.hexdigest()[:16]


def make_spec(kind: str, model: str, model_path, root, data_dir, data_checksum: str, config: dict) -> dict:
    """A stage's plain-JSON spec (trainables/stages/upstream.py runs it): its kind, its key in the store
    (the model's identity, the config and the data checksum), and what computing it needs."""
    identity = f"{model}@{model_fingerprint(model_path)}"
    return {
        "kind": kind,
        "key": stage_key(identity, config, data_checksum),
        "root": str(root),
        "model": model,
        "model_identity": identity,
        "model_path": str(model_path),
        "data_dir": str(data_dir),
        "data_checksum": data_checksum,
        "config": config,
    }
