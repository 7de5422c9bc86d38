"""Fault injection for tests of retries and resume: a trial config may carry
`_fault = {"epoch": e, "kind": "raise" | "kill", "marker": path}`; the fault fires once, in
epoch e, the first time only (the marker file records that it fired)."""
from __future__ import annotations

import os
import signal
from pathlib import Path


class InjectedFault(RuntimeError):
    pass


def maybe_inject_fault(config: dict, epoch: int) -> None:
    fault = config.get("_fault")
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
