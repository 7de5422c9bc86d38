"""Progress of an upstream stage, readable by the sweep driver while the stage runs elsewhere.

A stage runs as a Ray task (on any node; the driver starts Ray without forwarding workers' logs),
so its progress crosses processes through the stage store, a shared file system by design:
`StageProgress` writes `<store>/<key>.progress.json` (steps done, steps in all, start time) at
most every `interval` seconds and at the end, by atomic replace; the driver reads it with
`read_progress` and prints `progress_line` for every running stage between completions.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

SUFFIX = ".progress.json"


def progress_path(spec: dict) -> Path:
    return Path(spec["root"]) / f"{spec['key']}{SUFFIX}"


class StageProgress:
    def __init__(self, spec: dict, total: int, interval: float = 2.0, clock=time.time):
        self.path, self.total, self.interval, self.clock = progress_path(spec), int(total), interval, clock
        self.done = 0
        self.started = clock()
        self._written = float("-inf")
        self._write()

    def step(self, count: int = 1) -> None:
        self.done += count
        if self.clock() - self._written >= self.interval:
            self._write()

    def finish(self) -> None:
        self.done = max(self.done, self.total)
        self._write()

    def _write(self) -> None:
        self._written = self.clock()
        record = {"done": self.done, "total": self.total, "started": self.started, "updated": self._written}
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.path)


def read_progress(spec: dict) -> dict | None:
    try:
        return json.loads(progress_path(spec).read_text())
    except (OSError, ValueError):
        return None


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def progress_line(label: str, record: dict | None, now: float | None = None) -> str:
    """e.g. `stage dapt bert-base-cased: 120/400 steps, 3.1 steps/s, ~1:30 left (0:39 elapsed)`."""
    if not record:
        return f"  stage {label}: starting"
    now = time.time() if now is None else now
    elapsed = max(now - record["started"], 1e-9)
    done, total = record["done"], record["total"]
    text = f"  stage {label}: {done}/{total} steps"
    if done:
        rate = done / elapsed
        text += f", {rate:.1f} steps/s, ~{_clock((total - done) / rate)} left"
    return text + f" ({_clock(elapsed)} elapsed)"
