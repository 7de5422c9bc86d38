"""Where the project looks for data and local model copies, settable without editing code.

- data: `--data-dir`, else `$EMBSWEEP_DATA_DIR`, else `../shared/data` beside the project checkout.
- local models: `$EMBSWEEP_MODELS_DIR`, else `~/.cache/embsweep/models`; a hub id `org/name`
  maps to `<models dir>/org/name` (what `embsweep-assets install` writes).
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def default_data_dir() -> Path:
    env = os.environ.get("EMBSWEEP_DATA_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return (PROJECT_ROOT.parent / "shared" / "data").resolve()


def models_dir() -> Path:
    env = os.environ.get("EMBSWEEP_MODELS_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return Path("~/.cache/embsweep/models").expanduser().resolve()


def check_folder_target(path, flag: str) -> None:
    """Refuse (SweepInputError), creating nothing, an output folder that cannot be made or written:
    the path or a parent of it is a file, or its nearest existing parent cannot be written (checked
    with a probe file, removed at once). Whoever writes the outputs creates the folder then."""
    import tempfile

    from trainables.core.errors import SweepInputError

    path = Path(path).expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise SweepInputError(f"{flag} {path} is a file; pass a folder (it is created if missing)")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise SweepInputError(f"{flag} {path}: {existing} is a file, so no folder can be made there; pass a folder")
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".write-probe-"):
            pass
    except OSError as error:
        raise SweepInputError(
            f"{flag} {path} cannot be written ({error.strerror or error} in {existing}); pass a folder you can write"
        ) from None
