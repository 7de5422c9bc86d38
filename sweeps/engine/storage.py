"""The sweep's home: `<storage-path>/<name>` holds Ray Tune's experiment state and `sweep.json`
(the arguments, MLflow URI and parent run id), which is what `--resume` reads back.
Local paths and URIs (s3://, gs://, ...) both work, through pyarrow's filesystems."""

from __future__ import annotations

import json
import os
from pathlib import Path

SWEEP_FILE = "sweep.json"


def is_uri(path: str) -> bool:
    return "://" in str(path)


def absolute(path: str) -> str:
    return str(path) if is_uri(path) else str(Path(path).expanduser().resolve())


def join(base: str, *parts: str) -> str:
    return "/".join([str(base).rstrip("/"), *parts]) if is_uri(base) else str(Path(base, *parts))


def _fs(path: str):
    import pyarrow.fs

    return pyarrow.fs.FileSystem.from_uri(path)


def write_json(path: str, data: dict) -> None:
    text = json.dumps(data, indent=2, default=str)
    if not is_uri(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(str(path) + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        return
    fs, inner = _fs(path)
    with fs.open_output_stream(inner) as stream:
        stream.write(text.encode())


def read_json(path: str) -> dict | None:
    try:
        if not is_uri(path):
            return json.loads(Path(path).read_text()) if Path(path).is_file() else None
        fs, inner = _fs(path)
        with fs.open_input_stream(inner) as stream:
            return json.loads(stream.read().decode())
    except (FileNotFoundError, OSError, json.JSONDecodeError):
        return None


def latest_sweep(storage_path: str) -> str | None:
    """The most recently created sweep directory under a local storage path."""
    if is_uri(storage_path) or not Path(storage_path).is_dir():
        return None
    candidates = [p for p in Path(storage_path).iterdir() if (p / SWEEP_FILE).is_file()]
    return str(max(candidates, key=lambda p: (p / SWEEP_FILE).stat().st_mtime)) if candidates else None


CLAIM_FILE = ".claim"


def claim(sweep_dir: str, name: str) -> None:
    """Make this process the one starting the sweep in `sweep_dir` (a local folder): the claim
    file is created atomically, so the same --name started twice together starts once. A claim
    left by a process that died on this host is taken over."""
    if is_uri(sweep_dir):
        return
    import socket

    from trainables.core.errors import SweepInputError

    Path(sweep_dir).mkdir(parents=True, exist_ok=True)
    path = Path(sweep_dir, CLAIM_FILE)
    me = f"{socket.gethostname()} {os.getpid()}"
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            host, _, pid = path.read_text().partition(" ")
            if host == socket.gethostname() and pid.isdigit() and not _alive(int(pid)):
                path.unlink(missing_ok=True)
                continue
            raise SweepInputError(
                f"A sweep named {name!r} is being started by another process ({host}, pid {pid}) "
                f"at {sweep_dir}; pick another --name"
            ) from None
        with os.fdopen(fd, "w") as handle:
            handle.write(me)
        return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_writable(storage_path: str) -> None:
    """A local storage path must be a folder this process can write, or one it can create; nothing
    is created here (a refused sweep leaves nothing behind): the sweep creates it when it starts."""
    if is_uri(storage_path):
        return
    from trainables.core.paths import check_folder_target

    check_folder_target(storage_path, "--storage-path")
