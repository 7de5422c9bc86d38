"""The stage store on an S3-compatible object store (trainables/stages/store.py has the local one and
`open_store`, which picks between them).

On an object store (`s3://bucket/path?endpoint_override=...`, the root `<storage-path>/stages` or
`--stage-dir`), there are no locks and no renames; the same guarantees come from S3's conditional
writes (trainables/core/object_storage.py `create_if_absent`: `If-None-Match: *`):

- `<key>/stage.json`       the commit: a stage's manifest (trainables/stages/manifest.py) plus `attempt`
                           (the id of the attempt whose files are the stage) and `files` / `digest`
                           (`file_manifest` of them).
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

import json
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from trainables.core import conditional_writes, object_storage, verified_copies
from trainables.core.errors import SweepInputError
from trainables.core.object_storage import StorageUnavailable
from trainables.stages.manifest import MANIFEST, check_key, check_metadata, manifest_text, run_compute

CLAIM_TTL_ENV = "EMBSWEEP_STAGE_CLAIM_TTL_S"
DEFAULT_CLAIM_TTL_S = 60.0
POLL_MAX_S = 2.0  # the longest wait between two looks at an object store


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
        return object_storage.join(self.root, check_key(key))

    def read_manifest(self, key: str) -> dict | None:
        """The stage's committed `stage.json`, or None while there is none."""
        manifest = object_storage.read_json(object_storage.join(self.path(key), MANIFEST))
        if manifest is None or manifest.get("complete") is not True or not isinstance(manifest.get("files"), dict):
            return None
        if not re.fullmatch(r"[0-9a-f]{16}", str(manifest.get("attempt"))):  # it becomes part of a path
            raise SweepInputError(
                f"{object_storage.join(self.path(key), MANIFEST)}: its attempt {manifest.get('attempt')!r} is not one "
                "this store writes; the stage store was changed by someone else: delete the stage's folder"
            )
        return manifest

    def lookup(self, key: str) -> str | None:
        """`root/<key>` if that stage is committed, else None (never blocks)."""
        return self.path(key) if self.read_manifest(key) is not None else None

    def get_or_compute(
        self, key: str, compute_fn: Callable[[Path], Any], metadata: dict | None = None, timeout: float | None = None
    ) -> str:
        """As `StageStore.get_or_compute`, on the object store: `compute_fn(tmp_dir)` writes into a local
        temporary folder, which is uploaded; the location `root/<key>` is returned."""
        metadata = check_metadata(metadata)
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
        if conditional_writes.create_if_absent(location, json.dumps(mine).encode()) is None:
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
        verified_copies.cache_root().mkdir(parents=True, exist_ok=True)  # this node's disk for large copies
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-stage-{key[:16]}-", dir=verified_copies.cache_root()))
        try:
            try:
                manifest = run_compute(key, compute_fn, tmp, metadata)
                manifest.update(attempt=attempt, **verified_copies.file_manifest(tmp))
                object_storage.upload_dir(tmp, prefix)
            except BaseException:
                _quietly(object_storage.delete_tree, prefix)
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        text = manifest_text(manifest).encode()
        conditional_writes.create_if_absent(object_storage.join(self.path(key), MANIFEST), text)
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


def local_copy(location) -> Path:
    """This node's copy of the finished stage at the URI `location` (`<root>/<key>`): the committed
    attempt's files, checked against the manifest when the copy is made (once per node), with the
    stage's `stage.json` beside them as in a local store."""
    root, key = object_storage.parent(location), object_storage.basename(location)
    manifest = ObjectStageStore(root).read_manifest(key)
    if manifest is None:
        raise SweepInputError(f"{location}: no finished stage there (no complete {MANIFEST}); run the sweep again")
    name = f"stages/{key}"
    if _local_manifest(verified_copies.cache_root() / name).get("attempt") not in (None, manifest["attempt"]):
        shutil.rmtree(verified_copies.cache_root() / name, ignore_errors=True)  # a copy of a stage computed again
    expected = {"files": manifest["files"], "digest": manifest.get("digest")}
    files = object_storage.join(location, manifest["attempt"])
    copy = verified_copies.cached_copy(files, name, expected)
    if _local_manifest(copy) != manifest:
        object_storage.write_bytes(copy / MANIFEST, manifest_text(manifest).encode())
    return copy


def _local_manifest(folder: Path) -> dict:
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}
