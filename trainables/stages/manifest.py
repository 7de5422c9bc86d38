"""What a finished stage records, the same in every stage store (trainables/stages/store.py locally,
trainables/stages/object_store.py on S3): `stage.json`, written last, with the key, the metadata, the
compute's result, timings, host and pid, and `"complete": true`."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable

from trainables.core.errors import SweepInputError

MANIFEST = "stage.json"


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def check_metadata(metadata: dict | None) -> dict:
    metadata = dict(metadata or {})
    try:
        canonical_json(metadata)
    except (TypeError, ValueError) as exc:
        raise SweepInputError(f"stage metadata must be plain JSON: {exc}") from None
    return metadata


def check_key(key: str) -> str:
    if not key or "/" in key or key.startswith("."):
        raise ValueError(f"bad stage key {key!r}")
    return key


def run_compute(key: str, compute_fn: Callable[[Path], Any], out_dir: Path, metadata: dict) -> dict:
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
        manifest_text(manifest)
    except (TypeError, ValueError):
        manifest["result"] = {"repr": repr(result)}
    return manifest


def manifest_text(manifest: dict) -> str:
    return json.dumps(manifest, sort_keys=True, indent=2, allow_nan=False) + "\n"
