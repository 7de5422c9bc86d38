"""Fault injection for tests of retries, resume and scheduling: a trial config may carry
`_fault = fault_spec(epoch, kind, marker)` (a JSON string, so Tune treats it as one value); the
fault fires once, in that epoch, the first time only (the marker file records that it fired)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path


def maybe_hold(config: dict) -> None:
    """`_hold = seconds`: keep the trial busy that long (tests that need trials to overlap)."""
    if config.get("_hold"):
        import time

        time.sleep(float(config["_hold"]))


class InjectedFault(RuntimeError):
    pass


def fault_spec(epoch: int, kind: str, marker) -> str:
    """kind: "raise" (the trial raises) or "kill" (its worker process gets SIGKILL)."""
    return json.dumps({"epoch": epoch, "kind": kind, "marker": str(marker)})


def maybe_inject_fault(config: dict, epoch: int) -> None:
    fault = json.loads(config["_fault"]) if config.get("_fault") else None
    if not fault or int(fault["epoch"]) != epoch:
        return
    marker = Path(fault["marker"])
    if marker.exists():
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(str(os.getpid()))
    if fault.get("kind", "raise") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFault(f"injected fault in epoch {epoch}")
