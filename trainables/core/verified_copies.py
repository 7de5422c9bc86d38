"""Verified copies of stored folders: `file_manifest(folder)` (every file's size and sha256, and one digest over
them, recorded when a folder is written) and `cached_copy`, a copy in this node's cache ($EMBSWEEP_CACHE_DIR)
made once and checked against that manifest before it is used, so that a copy cut short is never read."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

from trainables.core.errors import SweepInputError
from trainables.core.object_storage import download_dir

CACHE_ENV = "EMBSWEEP_CACHE_DIR"


def file_manifest(folder) -> dict:
    """{"files": {relative path: [size, sha256]}, "digest": sha256 of that listing} of a local folder."""
    folder = Path(folder)
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        files[path.relative_to(folder).as_posix()] = [path.stat().st_size, digest.hexdigest()]
    return {"files": files, "digest": listing_digest(files)}


def listing_digest(files: dict) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def cache_root() -> Path:
    """This node's cache of copies of remote folders: $EMBSWEEP_CACHE_DIR/objects or ~/.cache/embsweep/objects."""
    return Path(os.environ.get(CACHE_ENV) or "~/.cache/embsweep").expanduser() / "objects"


def cached_copy(location, name: str, expected: dict | None = None, ignore=()) -> Path:
    """A local copy of the folder at `location`, in this node's cache under `name`, made once: a fresh
    copy goes to a temporary folder, is checked against `expected` (a `file_manifest`: every file
    there, of that size and content; `ignore` names files the manifest does not cover), and only then
    takes its place, so a copy cut short is never used. A copy already in the cache is used when its
    files still have the sizes the manifest gives."""
    root = cache_root()
    target = root / name
    if target.is_dir() and (expected is None or _sizes_match(target, expected, ignore)):
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{name.replace('/', '_')}-{uuid.uuid4().hex[:8]}"
    try:
        download_dir(location, tmp)
        if expected is not None:
            found = file_manifest(tmp)["files"]
            for skipped in ignore:
                found.pop(skipped, None)
            if found != expected["files"]:
                missing = sorted(set(expected["files"]) - set(found))
                differ = sorted(k for k in found if k in expected["files"] and found[k] != expected["files"][k])
                raise SweepInputError(
                    f"{location}: the copy does not match what was recorded when it was written "
                    f"(missing: {missing[:5]}, different: {differ[:5]}, unexpected: "
                    f"{sorted(set(found) - set(expected['files']))[:5]}); the stored folder is incomplete or was "
                    "changed: run the trial or stage again"
                )
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp, target)
        except OSError:  # another process of this node made the same copy first
            if not target.is_dir():
                raise
        return target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _sizes_match(folder: Path, expected: dict, ignore=()) -> bool:
    for relative, (size, _) in expected["files"].items():
        path = folder / relative
        if not path.is_file() or path.stat().st_size != size:
            return False
    return True
