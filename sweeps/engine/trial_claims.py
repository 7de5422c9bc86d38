"""One computation per trial key: two sweeps that need the same trial at once compute it once.

Before it schedules a trial it did not find finished (sweeps/engine/reuse.py), a sweep claims the trial's
key: `<storage-path>/.trial_claims/<key>.json` (host, pid, sweep, time), created only if absent with the
conditional writes the stage store uses (trainables/core/conditional_writes.py: O_EXCL in a folder, S3's
`If-None-Match: *` on an object store). A key claimed by a sweep whose driver still runs is not scheduled:
the sweep runs its own trials, then waits for that run to finish and links it (`reuse.settle`). A claim
whose driver is gone (its process ended on this host, or, from another host, the claim is older than
`STALE_S`) is taken over (`If-Match` on its version), so a sweep that died never blocks a key for long; a
finished trial is found in MLflow before any claim is read, so a claim left behind costs nothing.
"""

from __future__ import annotations

import json
import os
import socket
import time

import psutil

from trainables.core import conditional_writes, object_storage

CLAIMS = ".trial_claims"
STALE_S = 24 * 3600.0  # a claim from another host, whose process cannot be checked, counts as dead after this


def location(storage_path: str, key: str) -> str:
    return object_storage.join(storage_path, CLAIMS, f"{key}.json")


def _mine(sweep: str) -> bytes:
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "sweep": sweep, "time": time.time()}).encode()


def holder(claim: bytes) -> dict | None:
    """The claim's fields while its sweep's driver may still run; None when it is gone."""
    try:
        fields = json.loads(claim.decode())
        host, pid, when = str(fields["host"]), int(fields["pid"]), float(fields["time"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if host == socket.gethostname():
        return fields if pid != os.getpid() and psutil.pid_exists(pid) else None
    return fields if time.time() - when < STALE_S else None


def claim(storage_path: str, key: str, sweep: str) -> dict | None:
    """Claim `key` for this sweep: None when it is now ours (new, or taken over from a driver that is gone),
    else the live claim's fields (host, pid, sweep, time)."""
    where = location(storage_path, key)
    mine = _mine(sweep)
    for _ in range(3):  # another sweep may take a dead claim over between our read and our write
        if conditional_writes.create_if_absent(where, mine) is not None:
            return None
        found = conditional_writes.read_versioned(where)
        if found is None:
            continue
        data, tag = found
        live = holder(data)
        if live is not None:
            return live
        if conditional_writes.replace_if_match(where, mine, tag) is not None:
            return None
    found = conditional_writes.read_versioned(where)
    return holder(found[0]) if found else None


def still_held(storage_path: str, key: str) -> dict | None:
    """The live claim on `key`, if any."""
    found = conditional_writes.read_versioned(location(storage_path, key))
    return holder(found[0]) if found else None
