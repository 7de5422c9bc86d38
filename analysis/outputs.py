"""Where the analysis writes its outputs: a local folder, or an object-store URI.

`--out` of `python -m analysis report` and `python -m analysis cka` is a local folder (created) or a
URI such as `s3://bucket/sweeps/report?endpoint_override=127.0.0.1:9000&scheme=http`
(trainables/core/object_storage.py: the endpoint in the query, else AWS_ENDPOINT_URL, else AWS;
credentials only from the AWS chain, never in the URI).

- `check_out(out)`: refuses, before anything is read or computed, a folder that cannot be made or
  written, or a URI that cannot work (bad scheme, credentials in it, a bucket that does not exist,
  credentials refused, an endpoint that does not answer);
- `local_folder(out)`: the local folder to write into: `out` itself, or for a URI a temporary folder
  that is uploaded whole to the URI when the block ends without an error, and removed in any case
  (no local folder is ever named after a URI);
- `location(out, folder, path)`: where a file written under that folder ends up (a URI keeps its
  query at the end).
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from trainables.core import object_storage
from trainables.core.errors import SweepInputError
from trainables.core.paths import check_folder_target


def check_out(out, flag: str = "--out") -> None:
    if object_storage.is_uri(out):
        object_storage.check_location(str(out), flag)
    else:
        check_folder_target(out, flag)


@contextmanager
def local_folder(out, flag: str = "--out"):
    """Yield the local folder to write into (see the module docstring)."""
    if not object_storage.is_uri(out):
        yield Path(out)
        return
    folder = Path(tempfile.mkdtemp(prefix="embsweep-out-"))
    try:
        yield folder
        upload(folder, str(out), flag)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def upload(folder: Path, uri: str, flag: str = "--out") -> None:
    """Every file under `folder` to the same relative keys under `uri`."""
    try:
        object_storage.upload_dir(folder, uri)
    except OSError as error:
        raise SweepInputError(
            f"{flag} {uri}: the outputs could not be uploaded ({str(error).splitlines()[0][:200]}); "
            "check the bucket's policy and the store, then run the command again"
        ) from None


def location(out, folder: Path, path) -> Path | str:
    """Where `path` (a file under `folder`, the folder `local_folder(out)` gave) ends up: the path
    itself for a local `out`, else its URI."""
    if not object_storage.is_uri(out):
        return Path(path)
    return object_storage.join(str(out), Path(path).relative_to(folder).as_posix())
