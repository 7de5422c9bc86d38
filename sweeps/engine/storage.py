"""The sweep's home: `<storage-path>/<name>` holds Ray Tune's experiment state and `sweep.json`
(the arguments, MLflow URI and parent run id), which is what `--resume` reads back.
Local paths and URIs (s3://, gs://, ...) both work, through pyarrow's filesystems."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import psutil

from trainables.core import conditional_writes, object_storage
from trainables.core.errors import SweepInputError
from trainables.core.object_storage import absolute, is_uri, join

SWEEP_FILE = "sweep.json"
CLAIM_STALE_S = 300.0  # a claim on an object store whose sweep.json never came: its starter died

__all__ = ["absolute", "is_uri", "join", "SWEEP_FILE"]


def write_json(path: str, data: dict) -> None:
    object_storage.write_bytes(path, json.dumps(data, indent=2, default=str).encode())


def read_json(path: str) -> dict | None:
    try:
        return object_storage.read_json(path)
    except OSError:
        return None


def latest_sweep(storage_path: str) -> str | None:
    """The most recently created sweep directory under a storage path (a folder or a URI)."""
    import pyarrow.fs

    if not is_uri(storage_path) and not Path(storage_path).is_dir():
        return None
    fs, _ = object_storage.filesystem(storage_path)
    newest, newest_time = None, None
    for info in object_storage.list_dir(storage_path):
        if info.type != pyarrow.fs.FileType.Directory:
            continue
        found = fs.get_file_info(f"{info.path}/{SWEEP_FILE}")
        if found.type == pyarrow.fs.FileType.File and (newest_time is None or found.mtime > newest_time):
            newest, newest_time = join(storage_path, info.base_name), found.mtime
    return newest


CLAIM_FILE = ".claim"


def claim(sweep_dir: str, name: str) -> None:
    """Make this process the one starting the sweep in `sweep_dir`: the claim file is created
    atomically (O_EXCL on a folder, a conditional write `If-None-Match: *` on an object store), so
    the same --name started twice together starts once. A claim left by a starter that died is
    taken over: on this host, when its process is gone; on an object store, also when it is older
    than CLAIM_STALE_S and no sweep.json followed it."""
    path = join(sweep_dir, CLAIM_FILE)
    me = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}).encode()
    if conditional_writes.create_if_absent(path, me) is not None:
        return
    found = conditional_writes.read_versioned(path)
    if found is None:  # removed meanwhile: try once more
        if conditional_writes.create_if_absent(path, me) is not None:
            return
        found = conditional_writes.read_versioned(path) or (b"", "")
    text, tag = found
    host, pid, when = _claim_fields(text)
    dead_here = host == socket.gethostname() and pid is not None and not psutil.pid_exists(pid)
    stale = is_uri(sweep_dir) and when is not None and time.time() - when > CLAIM_STALE_S
    if (dead_here or stale) and read_json(join(sweep_dir, SWEEP_FILE)) is None:
        if conditional_writes.replace_if_match(path, me, tag) is not None:
            return
    raise SweepInputError(
        f"A sweep named {name!r} is being started by another process ({host}, pid {pid}) at {sweep_dir}; pick "
        "another --name"
    )


def _claim_fields(text: bytes) -> tuple[str, int | None, float | None]:
    """(host, pid, time) of a claim: JSON, or the `host pid` line older versions wrote."""
    try:
        value = json.loads(text.decode())
        return str(value.get("host", "")), int(value["pid"]), float(value["time"])
    except (ValueError, KeyError, TypeError, AttributeError):
        host, _, pid = text.decode(errors="replace").partition(" ")
        return host, int(pid) if pid.strip().isdigit() else None, None


def check_writable(storage_path: str) -> None:
    """A local storage path must be a folder this process can write, or one it can create; nothing
    is created here (a refused sweep leaves nothing behind): the sweep creates it when it starts.
    A URI must name a store that answers, with a bucket that exists and credentials it accepts."""
    if is_uri(storage_path):
        object_storage.check_location(storage_path, "--storage-path")
        if object_storage.split(storage_path)[0] != "s3":  # claims of names and stages are conditional writes
            raise SweepInputError(
                f"--storage-path {storage_path}: a sweep's storage on an object store goes through the S3 API (its "
                "claims are S3 conditional writes); pass s3://<bucket>/<path>, with the endpoint of GCS, R2, MinIO "
                "or Ceph as ?endpoint_override=<host>:<port>"
            )
        return
    from trainables.core.paths import check_folder_target

    check_folder_target(storage_path, "--storage-path")
