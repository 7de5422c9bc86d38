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
