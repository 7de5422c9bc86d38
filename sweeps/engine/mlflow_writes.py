"""The sweep driver's MLflow writes: the connection to the store, the writer that spools through
outages, and the thread that takes the writes off Ray Tune's loop (used by sweeps/engine/tracking.py,
sweeps/engine/stages_plan.py and `python -m sweeps.mlflow_sync`).

The sweep's callback never waits for the store: its writes go, in order, to a `BackgroundWriter`, whose
thread applies them (consecutive writes to one run merged into one `log_batch`) and which is closed,
every queued write sent or spooled, when Tune's experiment ends (normally, on an error or on Ctrl-C)
and before the parent run is marked finished. A queued write is also kept in `mlflow-spool-queued.jsonl`
beside the spool until it is sent or spooled, so that a driver killed outright loses none: the next
writer for that spool (`--resume`, the sweep's end, `mlflow_sync`) moves them into the spool first.

Outages: every write goes through `MlflowWriter.submit` as one JSON-able operation that names
its run by key (parent run id + config hash), never by run id. If the store is unreachable
(connection refused, timeout, 5xx, a locked database), the operation and every later one are
appended to a local spool (`<sweep dir>/mlflow-spool.jsonl`), one warning is printed, and
training goes on; on later events the spool is replayed in order as soon as the store answers.
Whatever is still spooled when the sweep ends stays on disk, and
`python -m sweeps.mlflow_sync <spool>` uploads it later. Replaying is idempotent (runs are found
or created by key, steps already logged are skipped), so a spool can be replayed any number of
times, also after a partial replay.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import sys
import threading
import time
import weakref
from pathlib import Path

from trainables.core import schema

SPOOL_FILE = "mlflow-spool.jsonl"
SYNC_COMMAND = "python -m sweeps.mlflow_sync"
# MLflow's HTTP client retries a refused connection 7 times with exponential backoff (minutes)
# and waits 120 s for an answer; the sweep driver must not stall that long, it spools instead.
HTTP_ENV_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",  # no "View run" lines (and no extra request) per finished trial
}
# libpq and psycopg wait 130 s for a PostgreSQL server that does not answer; the driver spools after this many.
POSTGRES_ENV_DEFAULTS = {"PGCONNECT_TIMEOUT": "10"}
_TRANSIENT_CODES = {"INTERNAL_ERROR", "TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED", "DEADLINE_EXCEEDED"}


def _client(tracking_uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def is_http(tracking_uri: str) -> bool:
    return str(tracking_uri).startswith(("http://", "https://"))


def is_postgres(tracking_uri: str) -> bool:
    return str(tracking_uri).startswith(("postgresql:", "postgresql+"))


def configure_http(tracking_uri: str) -> None:
    """Short HTTP retries/timeouts, or a short PostgreSQL connect timeout, for this process (values the user set
    are kept)."""
    defaults = (
        HTTP_ENV_DEFAULTS if is_http(tracking_uri) else POSTGRES_ENV_DEFAULTS if is_postgres(tracking_uri) else {}
    )
    for key, value in defaults.items():
        os.environ.setdefault(key, value)


def is_transient(error: BaseException) -> bool:
    """True for failures that may go away by themselves: the store is down or overloaded."""
    import requests

    if isinstance(
        error, (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError, TimeoutError)
    ):
        return True
    try:
        from sqlalchemy.exc import OperationalError

        if isinstance(error, OperationalError):  # e.g. "database is locked"
            return True
    except ImportError:  # pragma: no cover
        pass
    from mlflow.exceptions import MlflowException

    if isinstance(error, MlflowException):
        text = str(error)
        if "API request to" in text and "failed with" in text:  # refused, timed out, retries exhausted
            return True
        if "database is locked" in text or "unable to open database" in text:
            return True
        return getattr(error, "error_code", None) in _TRANSIENT_CODES
    return False


def _short(error: BaseException) -> str:
    text = " ".join(str(error).split())
    for needle, reason in (
        ("Connection refused", "connection refused"),
        ("timed out", "timed out"),
        ("Connection aborted", "connection dropped"),
        ("RemoteDisconnected", "connection dropped"),
        ("Name or service not known", "unknown host"),
        ("timeout expired", "timed out"),
        ("database is locked", "database is locked"),
    ):
        if needle in text:
            return reason
    return text if len(text) <= 200 else text[:197] + "..."


def _param_value(value) -> str:
    text = str(value)
    return text if len(text) <= 6000 else text[:5997] + "..."


def queued_path(spool: str | Path) -> Path:
    """Where a `BackgroundWriter` keeps the writes it has queued but not yet sent or spooled."""
    spool = Path(spool)
    return spool.with_name(f"{spool.stem}-queued.jsonl")


def recover_queued(spool: str | Path) -> int:
    """Move the writes a killed driver had queued (`queued_path`) to the end of the spool, where they are
    replayed in order like any spooled write (some may have been sent already: replaying is idempotent);
    returns how many."""
    queued = queued_path(spool)
    ops = read_spool(queued)
    if ops:
        _append_lines(Path(spool), ops)
    queued.unlink(missing_ok=True)
    return len(ops)


def spool_path(sweep_dir: str | None, parent_run_id: str) -> Path:
    """`<sweep dir>/mlflow-spool.jsonl`; a sweep kept at a URI spools on this machine instead."""
    if sweep_dir and "://" not in str(sweep_dir):
        return Path(sweep_dir) / SPOOL_FILE
    return Path.home() / ".cache" / "embsweep" / "mlflow-spool" / f"{parent_run_id}.jsonl"


# --- the one way to write -------------------------------------------------------------------
class MlflowWriter:
    """Applies write operations to MLflow, or spools them while the store is unreachable.

    Operations (dicts, one JSON line each in the spool; `uri` is added by `submit`):
      {"op": "run", "parent": P, "key": K, "name": N, "params": {...}}    find or create the child run
          (optional "role": "stage" and "tags": {...} for an upstream stage's run, keyed by its stage key)
      {"op": "log", "parent": P, "key": K, "metrics": [[key, value, timestamp_ms, step], ...],
       "params": {...}, "tags": {...}}                                     steps already logged are skipped
      {"op": "status", "parent": P, "key": K, "status": "RUNNING"|"FINISHED"|"FAILED", "time": ms}
      {"op": "parent_status", "parent": P, "status": "FINISHED"|"FAILED", "time": ms}
      {"op": "delete", "parent": P, "key": K}                               delete the child run (a stage
          another sweep computed and recorded in the same store while this one waited for it)
    """

    def __init__(self, tracking_uri: str, spool: str | Path | None, retry_interval: float | None = None, stream=None):
        self.tracking_uri = tracking_uri
        self.spool = Path(spool) if spool else None
        self.retry_interval = float(
            os.environ.get("EMBSWEEP_MLFLOW_RETRY_S", 10.0) if retry_interval is None else retry_interval
        )
        self.stream = stream
        self._client = None
        self._runs: dict[tuple[str, str], str] = {}
        self._experiments: dict[str, str] = {}
        self._steps: dict[tuple[str, str], set] = {}
        self._fresh: set[str] = set()
        self._last_attempt = 0.0
        self._warned = False
        self.refused: str | None = None
        configure_http(tracking_uri)

    @property
    def client(self):
        if self._client is None:
            self._client = _client(self.tracking_uri)
        return self._client

    def _say(self, text: str) -> None:
        print(text, file=self.stream or sys.stderr, flush=True)

    # --- submitting ----------------------------------------------------------------------
    def submit(self, op: dict) -> None:
        """Apply `op` now, or spool it (in order, behind anything already spooled)."""
        op = {"uri": self.tracking_uri, **op}
        if self.spooling():
            self._append(op)
            self.maybe_drain()
            return
        try:
            self.apply(op)
        except Exception as error:
            if self.spool is None:
                raise
            self._append(op)  # whatever went wrong, the write is kept and training goes on
            self._failed(error)

    def spooling(self) -> bool:
        """Writes are waiting in the spool (so new ones queue behind them)."""
        try:
            return self.spool is not None and self.spool.stat().st_size > 0
        except FileNotFoundError:
            return False

    def pending(self) -> int:
        if self.spool is None or not self.spool.is_file():
            return 0
        with self.spool.open() as handle:
            return sum(1 for line in handle if line.strip())

    def _append(self, op: dict) -> None:
        _append_lines(self.spool, [op])

    def _failed(self, error: BaseException) -> None:
        if is_transient(error):
            self._outage(error)
            return
        # The store answered but refused the write: replaying it now would fail the same way, so
        # stop sending for this process; the spool keeps it and all later writes for mlflow_sync.
        self._forget()
        if self.refused is None:
            self.refused = _short(error)
            self._say(
                f"WARNING: MLflow at {self.tracking_uri} refused a write ({self.refused}). Training goes on; "
                f"this and all later MLflow writes are kept in {self.spool}. Once the cause is fixed, "
                f"upload them with: {SYNC_COMMAND} {self.spool}"
            )

    def _outage(self, error: BaseException) -> None:
        self._last_attempt = time.monotonic()
        self._forget()
        if not self._warned:
            self._warned = True
            self._say(
                f"WARNING: MLflow at {self.tracking_uri} is unreachable ({_short(error)}). Training goes on; "
                f"MLflow writes are kept in {self.spool} and sent when the store answers again "
                f"(tried every {self.retry_interval:g} s). To upload them later: {SYNC_COMMAND} {self.spool}"
            )

    def _forget(self) -> None:
        """After a failure a write may have half-happened: read logged steps back before the next one."""
        self._steps.clear()
        self._fresh.clear()

    # --- replaying -----------------------------------------------------------------------
    def reachable(self, timeout: float = 2.0) -> bool:
        """A cheap probe before replaying (a tracking server's /health, a PostgreSQL server's port; other stores:
        just try)."""
        if is_postgres(self.tracking_uri):
            from trainables.core.endpoints import postgres_answers

            return postgres_answers(self.tracking_uri, timeout)
        if not is_http(self.tracking_uri):
            return True
        import requests

        try:
            return requests.get(self.tracking_uri.rstrip("/") + "/health", timeout=timeout).status_code == 200
        except requests.RequestException:
            return False

    def maybe_drain(self, force: bool = False) -> bool:
        """Replay the spool if the retry interval has passed (or `force`); True when it is empty."""
        if not self.spooling():
            return True
        if self.refused is not None:
            return False
        if not force and time.monotonic() - self._last_attempt < self.retry_interval:
            return False
        self._last_attempt = time.monotonic()
        if not self.reachable():
            return False
        return self.drain()

    def drain(self) -> bool:
        """Apply the spooled operations in order. Stops at the first failure and keeps the rest
        (`refused` says why when the store answered with an error); True when everything was
        sent (the spool file is then removed)."""
        ops = read_spool(self.spool, self.stream)
        done = 0
        try:
            for op in ops:
                self.apply(op)
                done += 1
        except Exception as error:
            _write_spool(self.spool, ops[done:])
            self._failed(error)
            return False
        self.spool.unlink(missing_ok=True)
        if self._warned:
            self._say(f"MLflow at {self.tracking_uri} answers again: {done} spooled write(s) logged.")
            self._warned = False
        return True

    # --- applying one operation (idempotent) ---------------------------------------------
    def apply(self, op: dict) -> None:
        kind = op["op"]
        if kind == "parent_status":
            self.client.set_terminated(op["parent"], status=op["status"], end_time=op.get("time"))
            return
        if kind == "delete":  # idempotent: a deleted run is found no more
            run_id = self._runs.pop((op["parent"], op["key"]), None)
            if run_id is None:
                found = self._find(op["parent"], op["key"])
                run_id = found.info.run_id if found else None
            if run_id is not None:
                self.client.delete_run(run_id)
            return
        run_id = self.resolve(op)
        if kind == "run":
            return
        if kind == "status":
            if op["status"] == "RUNNING":
                if run_id not in self._fresh:  # a run created just now is RUNNING already
                    self.client.update_run(run_id, status="RUNNING")
            else:
                self.client.set_terminated(run_id, status=op["status"], end_time=op.get("time"))
            return
        if kind != "log":
            raise ValueError(f"unknown MLflow spool operation {kind!r}")
        from mlflow.entities import Metric, Param, RunTag

        metrics = [m for m in op.get("metrics", []) if int(m[3]) not in self._logged_steps(run_id, m[0])]
        if not (metrics or op.get("params") or op.get("tags")):
            return
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), int(ts), int(step)) for k, v, ts, step in metrics],
            params=[Param(k, _param_value(v)) for k, v in op.get("params", {}).items()],
            tags=[RunTag(k, str(v)) for k, v in op.get("tags", {}).items()],
        )
        for key, _, _, step in metrics:
            self._steps[(run_id, key)].add(int(step))

    def _logged_steps(self, run_id: str, key: str) -> set:
        if (run_id, key) not in self._steps:
            fresh = run_id in self._fresh
            self._steps[(run_id, key)] = (
                set() if fresh else {m.step for m in self.client.get_metric_history(run_id, key)}
            )
        return self._steps[(run_id, key)]

    def run_id(self, parent: str, key: str) -> str | None:
        """The run of (parent, key) once a write has reached the store (None while spooled)."""
        return self._runs.get((parent, key))

    def _find(self, parent: str, key: str):
        """The active child run of (parent, key) in the store, or None."""
        if parent not in self._experiments:
            self._experiments[parent] = self.client.get_run(parent).info.experiment_id
        found = self.client.search_runs(
            [self._experiments[parent]],
            filter_string=f"tags.`{schema.TAG_PARENT}` = '{parent}' and tags.`{schema.TAG_CONFIG_HASH}` = '{key}'",
            max_results=2,
        )
        return found[0] if found else None

    def resolve(self, op: dict) -> str:
        """The child run of (parent, key): found by its tags, or created (with its params)."""
        parent, key = op["parent"], op["key"]
        if (parent, key) in self._runs:
            return self._runs[(parent, key)]
        found = self._find(parent, key)
        params = {k: _param_value(v) for k, v in op.get("params", {}).items()} if op["op"] == "run" else {}
        if found:
            run_id = found.info.run_id
            params = {k: v for k, v in params.items() if k not in found.data.params}
        else:
            run = self.client.create_run(
                self._experiments[parent],
                run_name=op.get("name"),
                tags={
                    schema.TAG_PARENT: parent,
                    schema.TAG_ROLE: op.get("role", "trial"),
                    schema.TAG_CONFIG_HASH: key,
                    **op.get("tags", {}),
                },
            )
            run_id = run.info.run_id
            self._fresh.add(run_id)
        if params:
            from mlflow.entities import Param

            self.client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])
        self._runs[(parent, key)] = run_id  # only once its params are in
        return run_id


# --- writing off the trial loop -------------------------------------------------------------
_STOP = object()


def merge_logs(ops: list[dict]) -> list[dict]:
    """The same writes with each "log" op folded into the latest earlier "log" op of the same run, when no
    other op of that run (its creation, a status) lies between them: one `log_batch` instead of several.
    Later params and tags win; metric lists are joined in order. A parent's status or a delete ends the
    merging, so nothing moves across them."""
    merged: list[dict] = []
    last: dict[tuple, int] = {}  # (parent, key) -> index in `merged` of that run's latest op
    for op in ops:
        run = (op.get("parent"), op.get("key"))
        if op["op"] in ("parent_status", "delete"):
            last.clear()
        at = last.get(run)
        if (
            op["op"] == "log"
            and at is not None
            and merged[at]["op"] == "log"
            and merged[at].get("uri") == op.get("uri")
        ):
            into = merged[at]
            merged[at] = {
                **into,
                "metrics": [*into.get("metrics", []), *op.get("metrics", [])],
                "params": {**into.get("params", {}), **op.get("params", {})},
                "tags": {**into.get("tags", {}), **op.get("tags", {})},
            }
            continue
        merged.append(op)
        if op["op"] not in ("parent_status", "delete"):
            last[run] = len(merged) - 1
    return merged


class BackgroundWriter:
    """An `MlflowWriter` fed through a queue and applied on a thread of its own, so that the caller (Ray
    Tune's loop) never waits for the store. Writes are applied in the order they were submitted, up to
    `batch` at a time with `merge_logs`; the outage and spool rules are `MlflowWriter.submit`'s, and a
    spooled backlog is retried every `retry_interval` also while no new write comes. `close()` returns once
    every submitted write has been applied or spooled; writers still open when the process exits, or when
    `close_all()` is called, are closed then."""

    _open: "weakref.WeakSet[BackgroundWriter]" = weakref.WeakSet()

    def __init__(self, writer: MlflowWriter, batch: int = 256):
        self.writer = writer
        self.batch = batch
        self.error: BaseException | None = None
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()  # the queued-writes file and its counts
        self._queued = self._done = 0
        self._journal = None
        if writer.spool is not None:  # writes a killed driver had queued go first
            recover_queued(writer.spool)
            writer.spool.parent.mkdir(parents=True, exist_ok=True)
            self._journal = queued_path(writer.spool).open("a")
        self._thread = threading.Thread(target=self._work, name="mlflow-writer", daemon=True)
        self._closed = False
        self._thread.start()
        BackgroundWriter._open.add(self)

    def submit(self, op: dict) -> None:
        if self._closed:
            raise RuntimeError("MLflow writer already closed")
        op = {"uri": self.writer.tracking_uri, **op}
        with self._lock:
            if self._journal is not None:  # flushed to the OS: kept if this process is killed
                self._journal.write(json.dumps(op, sort_keys=True) + "\n")
                self._journal.flush()
            self._queued += 1
            self._queue.put(op)

    def flush(self) -> None:
        """Wait until every write submitted so far has been applied or spooled."""
        self._queue.join()
        self._raise()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join()
        BackgroundWriter._open.discard(self)
        if self._journal is not None and not self._journal.closed:
            self._journal.close()
            if self._done == self._queued:
                queued_path(self.writer.spool).unlink(missing_ok=True)
        self._raise()

    @classmethod
    def close_all(cls) -> None:
        for writer in list(cls._open):
            writer.close()

    def _raise(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def _work(self) -> None:
        if self.writer.spooling():
            self._guarded(self.writer.maybe_drain, True)
        while True:
            try:
                first = self._queue.get(timeout=self.writer.retry_interval if self.writer.spooling() else None)
            except queue.Empty:
                self._guarded(self.writer.maybe_drain)
                continue
            items = [first]
            while len(items) < self.batch:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            ops = [item for item in items if item is not _STOP]
            for op in merge_logs(ops):
                self._guarded(self.writer.submit, op)
            with self._lock:
                self._done += len(ops)
                if self._journal is not None and self._done == self._queued:  # all sent or spooled
                    self._journal.truncate(0)
            for _ in items:
                self._queue.task_done()
            if any(item is _STOP for item in items):
                return

    def _guarded(self, call, *args) -> None:
        try:
            call(*args)
        except BaseException as error:  # kept for the caller's next flush/close; later writes still go on
            if self.error is None:
                self.error = error


atexit.register(BackgroundWriter.close_all)


def read_spool(path: str | Path, stream=None) -> list[dict]:
    """The spooled operations. A torn line (a driver killed while writing it: the last line, or one that later
    writes were appended behind) is reported once, on `stream` (stderr), with its file and line, and skipped:
    the rest of the spool is still sent."""
    ops = []
    lines = Path(path).read_text(errors="replace").splitlines() if Path(path).is_file() else []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            op = json.loads(line)
        except json.JSONDecodeError:
            op = None
        if isinstance(op, dict) and "op" in op:
            ops.append(op)
        elif (str(path), number, line) not in _REPORTED:
            _REPORTED.add((str(path), number, line))
            print(
                f"warning: {path}, line {number}: a torn MLflow write (its driver was killed while writing it), "
                "skipped; the other writes are sent",
                file=stream or sys.stderr,
                flush=True,
            )
    return ops


_REPORTED: set = set()  # the torn lines already reported by this process (a spool is read more than once)


def _append_lines(path: Path, ops: list[dict]) -> None:
    """`ops` appended to `path`, one JSON line each, on a line of their own even behind a torn last line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab+") as handle:
        torn = False
        if handle.seek(0, os.SEEK_END) > 0:
            handle.seek(-1, os.SEEK_END)
            torn = handle.read(1) != b"\n"
        handle.write((("\n" if torn else "") + "".join(json.dumps(op, sort_keys=True) + "\n" for op in ops)).encode())
        handle.flush()
        os.fsync(handle.fileno())


def _write_spool(path: Path, ops: list[dict]) -> None:
    tmp = Path(str(path) + ".tmp")
    tmp.write_text("".join(json.dumps(op, sort_keys=True) + "\n" for op in ops))
    os.replace(tmp, path)
