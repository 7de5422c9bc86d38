"""Progress of an upstream stage, readable by the sweep driver while the stage runs elsewhere.

A stage runs as a Ray task on any node, and the driver starts Ray without forwarding workers'
output (`log_to_driver=False`), so progress crosses processes and nodes through the stage store,
a shared folder or an object store (trainables/stages/store.py), as `<store>/<key>.progress.json`:

- `clear_progress(spec)`: trainables/stages/upstream.py removes an earlier attempt's record when it
  starts computing the stage (the driver then says "starting" until the first record);
- `StageProgress(spec, total)`: the stage creates it once it knows its number of steps, calls
  `step()` once per optimiser step (per batch, for a stage without an optimiser) and `finish()`
  at the end; the record (steps done, total, start time, time of writing) is written whole (an atomic
  replace, or a PUT) at the start, after the first step, at most every `interval` seconds, and at
  the end; a write the object store does not take is skipped (the next one catches up);
- `read_progress(spec)` and `progress_line(label, record)`: what the driver prints.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from trainables.core import object_storage
from trainables.core.object_storage import StorageUnavailable

SUFFIX = ".progress.json"


def progress_path(spec: dict) -> Path | str:
    """Where the stage's record is: a local path, or a URI in an object store."""
    location = object_storage.join(spec["root"], f"{spec['key']}{SUFFIX}")
    return location if object_storage.is_uri(location) else Path(location)


def clear_progress(spec: dict) -> None:
    object_storage.delete(progress_path(spec))


class StageProgress:
    """The progress record of the stage `spec` (its `root` and `key`), `total` steps in all."""

    interval = 2.0  # seconds between writes at most

    def __init__(self, spec: dict, total: int, clock=time.time):
        self.path, self.total, self.clock = progress_path(spec), int(total), clock
        self.done = 0
        self.started = clock()
        self._write()

    def step(self, count: int = 1) -> None:
        first = self.done == 0
        self.done += count
        if first or self.clock() - self._written >= self.interval:  # the first step gives the driver a rate at once
            self._write()

    def finish(self) -> None:
        self.done = max(self.done, self.total)
        self._write()

    def _write(self) -> None:
        self._written = self.clock()
        record = {"done": self.done, "total": self.total, "started": self.started, "updated": self._written}
        try:
            object_storage.write_bytes(self.path, json.dumps(record).encode())
        except (StorageUnavailable, OSError):
            if not object_storage.is_uri(self.path):
                raise


def read_progress(spec: dict) -> dict | None:
    """The stage's latest record, or None while it has none (or the store does not answer)."""
    try:
        return object_storage.read_json(progress_path(spec))
    except (StorageUnavailable, OSError):
        return None


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def progress_line(label: str, record: dict | None, now: float | None = None) -> str:
    """e.g. `  stage dapt bert-base-cased: 120/400 steps, 3.10 steps/s, ~1:30 left (0:39 elapsed)`.

    The rate comes from the stage's own clock (steps done by the time of writing), so a driver
    on another node with a skewed clock still gets it right; only the elapsed time uses `now`."""
    if not record:
        return f"  stage {label}: starting"
    now = time.time() if now is None else now
    done, total = record["done"], record["total"]
    text = f"  stage {label}: {done}/{total} steps"
    if done:
        rate = done / max(record["updated"] - record["started"], 1e-9)
        text += f", {rate:.2f} steps/s, ~{_clock((total - done) / rate)} left"
    return text + f" ({_clock(now - record['started'])} elapsed)"
