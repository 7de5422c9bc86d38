"""A content-addressed store for pipeline stages (word-similarity TMFT, DAPT, ...), in a local (or NFS)
folder or on an S3-compatible object store.

A stage's outputs live in `root/<key>/`, where `key = stage_key(model, stage_config, data_checksum)`
is the sha256 of the sorted JSON of those three things, so every trial (and every later sweep)
that needs the same stage finds the same directory. `open_store(root)` gives the store of a root:
`StageStore` for a folder, `ObjectStageStore` (trainables/stages/object_store.py) for an s3:// URI;
`local_stage(location)` gives a reader a local folder of a finished stage either way.

Layout under a local `root`:

- `<key>/`            the finished stage: whatever `compute_fn` wrote, plus `stage.json`
                      (key, model, config, data checksum, metadata, the compute's result,
                      timings, host/pid, `"complete": true`).
- `<key>.lock`        the lock file of that key (left in place; deleting lock files races).
- `.tmp-<key>-<...>/` a stage being computed; renamed to `<key>/` once complete.

`get_or_compute` protocol (local):

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

On an object store the same protocol runs on S3's conditional writes instead of locks and renames:
trainables/stages/object_store.py.
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

from trainables.core import object_storage
from trainables.core.errors import SweepInputError
from trainables.stages.manifest import MANIFEST, canonical_json, check_key, check_metadata, manifest_text, run_compute
from trainables.stages.object_store import ObjectStageStore, local_copy

TMP_PREFIX = ".tmp-"


def stage_key(model: str, stage_config: dict, data_checksum: str) -> str:
    """sha256 (hex) of the sorted JSON of {model, config, data}: equal inputs give equal keys."""
    try:
        blob = canonical_json({"model": str(model), "config": stage_config, "data": str(data_checksum)})
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
        return self.root / check_key(key)

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
        metadata = check_metadata(metadata)

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
                manifest = run_compute(key, compute_fn, tmp, metadata)
                (tmp / MANIFEST).write_text(manifest_text(manifest), encoding="utf-8")
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


def local_stage(location) -> Path:
    """A local folder holding the finished stage at `location` (`<root>/<key>`, as trials get it in
    `_upstream_path`): the folder itself when it is local; for a URI, this node's checked copy."""
    return local_copy(location) if object_storage.is_uri(location) else Path(location)


def open_store(root) -> StageStore | ObjectStageStore:
    """The stage store at `root`: a local (or NFS) folder, or an s3:// URI."""
    return ObjectStageStore(root) if object_storage.is_uri(root) else StageStore(root)


def stage_root(stage_dir: str | None, storage_path: str) -> str:
    """The stage store's location: `--stage-dir`, else `<storage-path>/stages`; a local absolute path, or
    an s3:// URI (its query, the endpoint, kept)."""
    location = stage_dir or object_storage.join(storage_path, "stages")
    flag = "--stage-dir" if stage_dir else "--storage-path"
    if not object_storage.is_uri(location):
        return object_storage.absolute(location)
    object_storage.refuse_credentials(location, flag)
    object_storage.check_key(location, flag)
    if object_storage.split(location)[0] != "s3":
        raise SweepInputError(
            f"{flag} {location}: the stage store on an object store needs S3's conditional writes; use an s3:// URI "
            "(GCS, R2, MinIO and Ceph all offer one: pass its endpoint as ?endpoint_override=host:port), or a "
            "local or NFS folder as --stage-dir"
        )
    return str(location)


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
