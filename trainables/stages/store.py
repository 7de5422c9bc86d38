"""A content-addressed store for pipeline stages (word-similarity TMFT, DAPT, ...), in a local (or NFS)
folder or on an S3-compatible object store.

A stage's outputs live in `root/<key>/`, where `key = stage_key(model, stage_config, data_checksum)`
is the sha256 of the sorted JSON of those three things, so every trial (and every later sweep)
that needs the same stage finds the same directory. `open_store(root)` gives the store of a root:
`StageStore` for a folder, `ObjectStageStore` for an s3:// URI; `local_stage(location)` gives a
reader a local folder of a finished stage either way.

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

On an object store (`s3://bucket/path?endpoint_override=...`, the root `<storage-path>/stages` or
`--stage-dir`), there are no locks and no renames; the same guarantees come from S3's conditional
writes (trainables/core/object_storage.py `create_if_absent`: `If-None-Match: *`):

- `<key>/stage.json`       the commit: the manifest above plus `attempt` (the id of the attempt whose
                           files are the stage) and `files` / `digest` (`file_manifest` of them).
                           Written last, only if absent, so exactly one attempt commits.
- `<key>/<attempt>/...`    an attempt's files, uploaded from the local folder it computed in.
- `<key>.claim.<n>`        claims, n = 1, 2, ...: the highest n is the current one. A claim holds the
                           claimer's host, pid, attempt, the time of its claim and its `heartbeat`,
                           which a thread of the holder rewrites every few seconds while it computes.
- `<key>.progress.json`, `executions/<key>-<uuid>.json`: trainables/stages/progress.py, upstream.py.

`get_or_compute` then polls (with a growing delay, at most POLL_MAX_S):

1. `<key>/stage.json` complete: return `<key>` (a reader copies `<key>/<attempt>/` with `local_stage`).
2. No claim yet, or the current claim `n` released (its holder failed) or dead (its heartbeat older
   than the TTL, EMBSWEEP_STAGE_CLAIM_TTL_S, default 60 s, by this waiter's clock or unchanged for a
   TTL of polling): create `<key>.claim.<n+1>` only if absent. Of several takers one creates it;
   the others keep polling. A live claim: keep polling (until `timeout`, then TimeoutError).
3. The claim's holder looks at the manifest again, runs `compute_fn` in a local temporary folder
   (in the node cache, EMBSWEEP_CACHE_DIR), uploads the files under `<key>/<attempt>/`, and creates
   `<key>/stage.json`. If another attempt committed first (a holder taken for dead that still
   finished), it deletes its own prefix and returns the winner's stage; the winner deletes the
   prefixes of other (failed, dead) attempts.
4. If `compute_fn` raises, the holder deletes what it uploaded and marks its claim released; no
   manifest is written, so the next call recomputes. If the holder dies, its heartbeat stops and a
   waiter takes over after the TTL.

An object store that does not answer (an outage) is waited for: every read and write is tried again
for up to $EMBSWEEP_STORAGE_RETRY_S (trainables/core/object_storage.py `retrying`), and a waiter's
poll goes on through errors until its timeout.
Clocks of the nodes must agree to well within the TTL (NTP); a holder whose clock runs behind may be
taken for dead, which costs a second compute, never a wrong stage.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from trainables.core import object_storage
from trainables.core.errors import SweepInputError
from trainables.core.object_storage import StorageUnavailable

MANIFEST = "stage.json"
TMP_PREFIX = ".tmp-"
CLAIM_TTL_ENV = "EMBSWEEP_STAGE_CLAIM_TTL_S"
DEFAULT_CLAIM_TTL_S = 60.0
POLL_MAX_S = 2.0  # the longest wait between two looks at an object store


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def stage_key(model: str, stage_config: dict, data_checksum: str) -> str:
    """sha256 (hex) of the sorted JSON of {model, config, data}: equal inputs give equal keys."""
    try:
        blob = _canonical_json({"model": str(model), "config": stage_config, "data": str(data_checksum)})
    except (TypeError, ValueError) as exc:
        raise SweepInputError(f"stage config must be plain JSON (str keys, numbers, strings, lists): {exc}") from None
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _check_metadata(metadata: dict | None) -> dict:
    metadata = dict(metadata or {})
    try:
        _canonical_json(metadata)
    except (TypeError, ValueError) as exc:
        raise SweepInputError(f"stage metadata must be plain JSON: {exc}") from None
    return metadata


def _check_key(key: str) -> str:
    if not key or "/" in key or key.startswith("."):
        raise ValueError(f"bad stage key {key!r}")
    return key


def _run_compute(key: str, compute_fn: Callable[[Path], Any], out_dir: Path, metadata: dict) -> dict:
    """Run `compute_fn(out_dir)`; the stage's manifest (plain JSON: a result that is not becomes its repr)."""
    started = time.time()
    result = compute_fn(out_dir)
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
        _manifest_text(manifest)
    except (TypeError, ValueError):
        manifest["result"] = {"repr": repr(result)}
    return manifest


def _manifest_text(manifest: dict) -> str:
    return json.dumps(manifest, sort_keys=True, indent=2, allow_nan=False) + "\n"


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
        return self.root / _check_key(key)

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
        metadata = _check_metadata(metadata)

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
                manifest = _run_compute(key, compute_fn, tmp, metadata)
                (tmp / MANIFEST).write_text(_manifest_text(manifest), encoding="utf-8")
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


class _Claim:
    """A claim `<key>.claim.<n>` this process created: while held (`with claim:`), a thread rewrites its
    heartbeat every `interval` seconds; leaving marks it released, so a waiter need not wait for a TTL."""

    def __init__(self, location: str, record: dict, interval: float):
        self.location, self.record, self.interval = location, record, interval
        self.attempt = record["attempt"]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"stage-claim-{self.attempt}", daemon=True)

    def __enter__(self) -> "_Claim":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._write(released=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            self._write()

    def _write(self, released: bool = False) -> None:
        self.record.update(heartbeat=time.time(), released=released)
        try:
            object_storage.write_bytes(self.location, json.dumps(self.record).encode())
        except (StorageUnavailable, OSError):
            pass  # the next beat tries again; a store down for longer than the TTL lets a waiter take over


class ObjectStageStore:
    """Content-addressed stages under an s3:// URI `root` (the protocol in this module's docstring)."""

    def __init__(self, root):
        self.root = str(root)
        self.ttl = float(os.environ.get(CLAIM_TTL_ENV) or DEFAULT_CLAIM_TTL_S)
        self.heartbeat_s = min(5.0, self.ttl / 4)
        self._highest: dict[str, int] = {}  # the highest claim number seen, per key

    def path(self, key: str) -> str:
        return object_storage.join(self.root, _check_key(key))

    def read_manifest(self, key: str) -> dict | None:
        """The stage's committed `stage.json`, or None while there is none."""
        manifest = object_storage.read_json(object_storage.join(self.path(key), MANIFEST))
        if manifest is None or manifest.get("complete") is not True or not isinstance(manifest.get("files"), dict):
            return None
        return manifest

    def lookup(self, key: str) -> str | None:
        """`root/<key>` if that stage is committed, else None (never blocks)."""
        return self.path(key) if self.read_manifest(key) is not None else None

    def get_or_compute(
        self, key: str, compute_fn: Callable[[Path], Any], metadata: dict | None = None, timeout: float | None = None
    ) -> str:
        """As `StageStore.get_or_compute`, on the object store: `compute_fn(tmp_dir)` writes into a local
        temporary folder, which is uploaded; the location `root/<key>` is returned."""
        metadata = _check_metadata(metadata)
        claim = self._wait_for_claim(key, timeout)
        if claim is None:
            return self.path(key)
        with claim:
            if self.read_manifest(key) is None:
                self._compute(key, claim.attempt, compute_fn, metadata)
        return self.path(key)

    # --- claims -------------------------------------------------------------------------------
    def _claim_location(self, key: str, number: int) -> str:
        return object_storage.join(self.root, f"{key}.claim.{number}")

    def _wait_for_claim(self, key: str, timeout: float | None) -> _Claim | None:
        """A claim of `key` this process holds, or None once the stage is committed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay, watched, failing_since = 0.05, {}, None
        while True:
            try:
                if self.read_manifest(key) is not None:
                    return None
                claim = self._try_claim(key, watched)
                if claim is not None:
                    return claim
                failing_since = None
            except (StorageUnavailable, OSError):
                failing_since = failing_since or time.monotonic()
                if deadline is None and time.monotonic() - failing_since > object_storage.retry_seconds():
                    raise
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(
                    f"stage {key} is still being computed by another process after {timeout:g} s "
                    f"(claim {self._claim_location(key, self._highest.get(key, 0))})"
                )
            time.sleep(delay if remaining is None else min(delay, remaining))
            delay = min(delay * 2, POLL_MAX_S)

    def _try_claim(self, key: str, watched: dict) -> _Claim | None:
        """Claim `key` if nobody holds a live claim of it; None when somebody does (or claimed it first)."""
        number, record = self._current_claim(key)
        if number and not self._dead(record, watched):
            return None
        now = time.time()
        attempt = uuid.uuid4().hex[:16]
        mine = {"host": socket.gethostname(), "pid": os.getpid(), "attempt": attempt, "claimed": now}
        mine.update(heartbeat=now, released=False)
        location = self._claim_location(key, number + 1)
        if object_storage.create_if_absent(location, json.dumps(mine).encode()) is None:
            return None
        self._highest[key] = number + 1
        return _Claim(location, mine, self.heartbeat_s)

    def _current_claim(self, key: str) -> tuple[int, dict]:
        """The highest claim number of `key` (0: none yet) and that claim's record."""
        number = self._highest.get(key, 0)
        data = object_storage.read_bytes(self._claim_location(key, number)) if number else None
        while (newer := object_storage.read_bytes(self._claim_location(key, number + 1))) is not None:
            number, data = number + 1, newer
        self._highest[key] = number
        try:
            record = json.loads(data) if data else {}
        except ValueError:
            record = {}
        return number, record if isinstance(record, dict) else {}

    def _dead(self, record: dict, watched: dict) -> bool:
        """A claim whose holder released it, or whose heartbeat is older than the TTL by this clock or has not
        changed for a TTL of this waiter's polling (a holder whose clock runs ahead)."""
        if record.get("released") or not isinstance(record.get("heartbeat"), (int, float)):
            return True
        if watched.get("record") != record:
            watched.update(record=record, since=time.monotonic())
        return time.time() - record["heartbeat"] > self.ttl or time.monotonic() - watched["since"] > self.ttl

    # --- computing and committing -------------------------------------------------------------
    def _compute(self, key: str, attempt: str, compute_fn: Callable[[Path], Any], metadata: dict) -> None:
        prefix = object_storage.join(self.path(key), attempt)
        object_storage.cache_root().mkdir(parents=True, exist_ok=True)  # this node's disk for large copies
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-stage-{key[:16]}-", dir=object_storage.cache_root()))
        try:
            try:
                manifest = _run_compute(key, compute_fn, tmp, metadata)
                manifest.update(attempt=attempt, **object_storage.file_manifest(tmp))
                object_storage.upload_dir(tmp, prefix)
            except BaseException:
                _quietly(object_storage.delete_tree, prefix)
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        text = _manifest_text(manifest).encode()
        object_storage.create_if_absent(object_storage.join(self.path(key), MANIFEST), text)
        # The manifest, not create_if_absent's answer, says who committed: a retried create that had succeeded
        # the first time answers None.
        winner = self.read_manifest(key)
        if winner is None:
            raise RuntimeError(f"stage {key}: {MANIFEST} was committed but cannot be read back from {self.root}")
        if winner["attempt"] == attempt:
            _quietly(self._discard_other_attempts, key, attempt)
        else:
            _quietly(object_storage.delete_tree, prefix)

    def _discard_other_attempts(self, key: str, attempt: str) -> None:
        """Delete the uploads of attempts that failed, died, or lost the commit."""
        for info in object_storage.list_dir(self.path(key)):
            if info.base_name not in (attempt, MANIFEST):
                object_storage.delete_tree(object_storage.join(self.path(key), info.base_name))


def _quietly(action: Callable, *args) -> None:
    """Clean-up that may fail (the store is down): what it leaves is garbage, not a wrong stage."""
    try:
        action(*args)
    except (StorageUnavailable, OSError):
        pass


def open_store(root) -> StageStore | ObjectStageStore:
    """The stage store at `root`: a local (or NFS) folder, or an s3:// URI."""
    return ObjectStageStore(root) if object_storage.is_uri(root) else StageStore(root)


def local_stage(location) -> Path:
    """A local folder holding the finished stage at `location` (`<root>/<key>`, as trials get it in
    `_upstream_path`): the folder itself when it is local; for a URI, this node's copy of the committed
    attempt's files, checked against the manifest when it is made (once per node), with the stage's
    `stage.json` beside them as in a local store."""
    if not object_storage.is_uri(location):
        return Path(location)
    root, key = object_storage.parent(location), object_storage.basename(location)
    manifest = ObjectStageStore(root).read_manifest(key)
    if manifest is None:
        raise SweepInputError(f"{location}: no finished stage there (no complete {MANIFEST}); run the sweep again")
    name = f"stages/{key}"
    if _local_manifest(object_storage.cache_root() / name).get("attempt") not in (None, manifest["attempt"]):
        shutil.rmtree(object_storage.cache_root() / name, ignore_errors=True)  # a copy of a stage computed again
    expected = {"files": manifest["files"], "digest": manifest.get("digest")}
    files = object_storage.join(location, manifest["attempt"])
    copy = object_storage.cached_copy(files, name, expected)
    if _local_manifest(copy) != manifest:
        object_storage.write_bytes(copy / MANIFEST, _manifest_text(manifest).encode())
    return copy


def _local_manifest(folder: Path) -> dict:
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def stage_root(stage_dir: str | None, storage_path: str) -> str:
    """The stage store's location: `--stage-dir`, else `<storage-path>/stages`; a local absolute path, or
    an s3:// URI (its query, the endpoint, kept)."""
    location = stage_dir or object_storage.join(storage_path, "stages")
    flag = "--stage-dir" if stage_dir else "--storage-path"
    if not object_storage.is_uri(location):
        return object_storage.absolute(location)
    object_storage.refuse_credentials(location, flag)
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
