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
