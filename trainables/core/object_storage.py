"""Storage locations that are a local folder or an object-store URI (s3://, gs://, ...), one API for both.

A location is a local path, or a URI `scheme://bucket/path?query` as pyarrow and Ray Tune take it.
The query carries the endpoint of an S3-compatible service (MinIO, Ceph, R2, GCS's S3 API, a moto
server): `s3://runs/embsweep?endpoint_override=127.0.0.1:9000&scheme=http`; without it the endpoint
comes from `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, else AWS itself. Credentials come only from
the standard AWS chain (environment, profile, instance role): a URI that carries them is refused,
because locations are written to sweep.json, MLflow params and logs.

- `join`, `parent`, `basename`: path arithmetic that keeps the query at the end of a URI;
- `filesystem(location)`: pyarrow's filesystem and the path inside it;
- `read_bytes` / `write_bytes` / `list_dir` / `delete` / `delete_tree`, `upload_dir`, `download_dir`;
- the atomic writes that locks are made of are in trainables/core/conditional_writes.py, the verified
  copies of stored folders (manifests, the node's cache) in trainables/core/verified_copies.py;
- `check_location(location, flag)`: refuses, within seconds and before any compute, a URI pyarrow
  cannot open, a bucket that does not exist, credentials the service refuses, an endpoint that does
  not answer, credentials in the URI (`refuse_credentials`) and a key with `..`, `.` or empty segments
  (`check_key`, which `filesystem` also applies: no object is written at such a key);
- `retrying`: every read and write of an object store is tried again, with growing pauses, while
  the store does not answer (up to $EMBSWEEP_STORAGE_RETRY_S, 300 s): an outage delays a sweep.

`python -m trainables.core.object_storage download URI FOLDER` (or `upload FOLDER URI`) copies a
folder, e.g. the data sets onto each node of a cluster without a shared file system.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from trainables.core.errors import SweepInputError, redact

CHECK_TIMEOUT_S = 4.0  # connect and read timeouts of the check before a sweep starts
CREDENTIAL_KEYS = ("access_key", "secret_key", "session_token", "aws_access_key_id", "aws_secret_access_key")


class StorageUnavailable(RuntimeError):
    """The object store did not answer (after retries): the operation may succeed later."""


class StorageLost(RuntimeError):
    """The store answers but what a sweep wrote there is gone (a bucket emptied, a prefix deleted)."""


# --- locations ----------------------------------------------------------------------------------
def is_uri(location) -> bool:
    return "://" in str(location)


def split(uri: str) -> tuple[str, str, str]:
    """`scheme://path?query` -> (scheme, path without slashes at its ends, query)."""
    scheme, _, rest = str(uri).partition("://")
    path, _, query = rest.partition("?")
    return scheme, path.strip("/"), query


def _unsplit(scheme: str, path: str, query: str) -> str:
    return f"{scheme}://{path}" + (f"?{query}" if query else "")


def join(base, *parts) -> str:
    """`base/part/...`: a local path, or a URI with the parts before its query."""
    if not is_uri(base):
        return str(Path(base, *map(str, parts)))
    scheme, path, query = split(base)
    inner = "/".join(p for p in [path, *(str(x).strip("/") for x in parts)] if p)
    return _unsplit(scheme, inner, query)


def parent(location) -> str:
    if not is_uri(location):
        return str(Path(location).parent)
    scheme, path, query = split(location)
    return _unsplit(scheme, path.rsplit("/", 1)[0] if "/" in path else path, query)


def basename(location) -> str:
    return split(location)[1].rsplit("/", 1)[-1] if is_uri(location) else Path(location).name


def absolute(location) -> str:
    return str(location) if is_uri(location) else str(Path(location).expanduser().resolve())


def with_query_of(path: str, scheme: str, template: str) -> str:
    """A path inside a filesystem (as Ray reports checkpoints: `bucket/key`) as a URI with the
    scheme given and the endpoint query of `template` (a URI of the same store)."""
    return _unsplit(scheme, path.strip("/"), split(template)[2] if is_uri(template) else "")


def bucket_key(uri: str) -> tuple[str, str]:
    _, path, _ = split(uri)
    bucket, _, key = path.partition("/")
    return bucket, key


def query(uri: str) -> dict:
    return dict(parse_qsl(split(uri)[2])) if is_uri(uri) else {}


def refuse_credentials(uri: str, flag: str) -> None:
    """Refuse a URI that carries credentials, in its user info (`s3://KEY:SECRET@bucket/...`) or its
    query (`?access_key=...&secret_key=...`): the message shows the URI without them."""
    scheme, _, rest = str(uri).partition("://")
    bucket = rest.partition("?")[0].partition("/")[0]
    found = [k for k in query(uri) if k.lower() in CREDENTIAL_KEYS]
    if "@" in bucket:
        found.insert(0, "user info before '@'")
    if found:
        kept = urlencode({k: v for k, v in query(uri).items() if k.lower() not in CREDENTIAL_KEYS})
        clean = _unsplit(scheme, split(uri)[1].rpartition("@")[2] if "@" in bucket else split(uri)[1], kept)
        raise SweepInputError(
            f"{flag}: the URI carries credentials ({', '.join(found)}), which would be written to sweep.json, "
            f"MLflow and logs; pass {clean} and give the credentials as AWS does (AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, a profile in ~/.aws, or the instance's role)"
        )


def check_key(uri: str, flag: str) -> None:
    """Refuse an object-store URI whose key a local path would not be allowed to have: a `..` or `.`
    segment, an empty segment (`//`), a leading `/` (an empty bucket). The store's HTTP layer resolves
    `..` and `.`, so such a key writes elsewhere than it reads; nothing is written with one."""
    if not is_uri(uri):
        return
    path = str(uri).partition("://")[2].partition("?")[0]
    segments = path.split("/")
    if len(segments) > 1 and segments[-1] == "":  # one trailing slash: a folder
        segments = segments[:-1]
    bad = next((s for s in segments if s in ("", ".", "..")), None)
    if bad is None:
        return
    why = {
        "..": "'..' leads out of its folder (the store resolves it, so the sweep would write elsewhere)",
        ".": "'.' is resolved by the store, so the key would not be the one written",
        "": "an empty segment ('//', or a leading '/' before the bucket) is no folder name",
    }[bad]
    raise SweepInputError(
        f"{flag} {uri}: the segment {bad!r} of the object key is refused: {why}; an object key follows the rules of "
        "a local path (no '..', '.' or empty segments, no leading '/'): write s3://<bucket>/<folder>/<folder>"
    )


# --- filesystems and clients --------------------------------------------------------------------
_FILESYSTEMS: dict = {}


def filesystem(location):
    """(pyarrow filesystem, path inside it) of a location; one filesystem per store and process."""
    import pyarrow.fs

    if not is_uri(location):
        return pyarrow.fs.LocalFileSystem(), str(Path(location).expanduser().absolute())
    check_key(location, "storage")  # the last guard: no object is ever read or written at such a key
    scheme, path, query_text = split(location)
    key = (scheme, bucket_key(location)[0] if scheme == "s3" else "", query_text)
    if key not in _FILESYSTEMS:
        _FILESYSTEMS[key] = pyarrow.fs.FileSystem.from_uri(str(location))[0]
    return _FILESYSTEMS[key], path


def endpoint_url(uri: str) -> str | None:
    """The S3 endpoint a URI names in its query (`endpoint_override`, `scheme`), else None: boto3 and
    pyarrow then read AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else use AWS."""
    values = query(uri)
    override = values.get("endpoint_override")
    if not override:
        return None
    return override if "://" in override else f"{values.get('scheme', 'https')}://{override}"


def s3_client(uri: str, timeout: float | None = None, attempts: int | None = None):
    import boto3
    from botocore.config import Config

    options = {"signature_version": "s3v4"}
    if timeout is not None:
        options.update(connect_timeout=timeout, read_timeout=timeout)
    if attempts is not None:
        options["retries"] = {"max_attempts": attempts, "mode": "standard"}
    region = query(uri).get("region")
    # a session of its own: boto3's default session keeps the credentials it found first, even when the
    # environment no longer holds them (and pyarrow, which reads them afresh, would then be refused)
    session = boto3.session.Session()
    return session.client("s3", endpoint_url=endpoint_url(uri), region_name=region, config=Config(**options))


def error_code(error) -> str:
    """The error code of a botocore ClientError ('' for any other error)."""
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


# --- reading and writing ------------------------------------------------------------------------
RETRY_ENV = "EMBSWEEP_STORAGE_RETRY_S"


def retry_seconds() -> float:
    """How long a read or write of an object store is tried again while the store does not answer."""
    return float(os.environ.get(RETRY_ENV, 300.0))


def _transient(error: BaseException) -> bool:
    if isinstance(error, StorageUnavailable):
        return True
    if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    text = str(error)
    return isinstance(error, OSError) and any(
        mark in text
        for mark in (
            "NETWORK_CONNECTION",
            "connect to server",
            "curlCode",
            "Connection refused",
            "timed out",
            "SERVICE_UNAVAILABLE",
            "SLOW_DOWN",
            "INTERNAL_FAILURE",
        )
    )


def retrying(operation, location, what: str):
    """`operation()`, tried again with growing pauses while an object store does not answer (a local
    location is tried once): a storage outage of a few minutes delays the sweep instead of failing it.
    One line goes to stderr when the store stops answering, and one when it answers again."""
    import sys
    import time

    if not is_uri(location):
        return operation()
    deadline, pause, warned = time.monotonic() + retry_seconds(), 0.5, False
    while True:
        try:
            result = operation()
        except Exception as error:
            if not _transient(error) or time.monotonic() + pause > deadline:
                raise
            if not warned:
                print(
                    f"warning: the object store does not answer ({what} {redact(location)}); trying again for up to "
                    f"{retry_seconds():.0f} s ({RETRY_ENV})",
                    file=sys.stderr,
                    flush=True,
                )
                warned = True
            time.sleep(pause)
            pause = min(pause * 2, 10.0)
            continue
        if warned:
            print(f"the object store answers again ({what} {redact(location)})", file=sys.stderr, flush=True)
        return result


def read_bytes(location) -> bytes | None:
    """The object's or file's bytes, None when it does not exist."""
    if not is_uri(location):
        path = Path(location)
        return path.read_bytes() if path.is_file() else None
    fs, inner = filesystem(location)

    def read():
        try:
            with fs.open_input_stream(inner) as stream:
                return stream.read()
        except FileNotFoundError:
            return None

    return retrying(read, location, "reading")


def write_bytes(location, data: bytes) -> None:
    """Write whole: a reader sees the old content or the new, never part (rename locally; an object
    store's PUT is atomic)."""
    if not is_uri(location):
        path = Path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return
    fs, inner = filesystem(location)

    def write():
        with fs.open_output_stream(inner) as stream:
            stream.write(data)

    retrying(write, location, "writing")


def read_json(location) -> dict | None:
    data = read_bytes(location)
    if data is None:
        return None
    try:
        value = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def list_dir(location, recursive: bool = False) -> list:
    """pyarrow FileInfo of what is under `location` (empty when nothing is)."""
    import pyarrow.fs

    fs, inner = filesystem(location)
    selector = pyarrow.fs.FileSelector(inner, recursive=recursive, allow_not_found=True)
    return retrying(lambda: fs.get_file_info(selector), location, "listing")


def delete_tree(location) -> None:
    if not is_uri(location):
        shutil.rmtree(location, ignore_errors=True)
        return
    fs, inner = filesystem(location)
    try:
        fs.delete_dir(inner)
    except (FileNotFoundError, OSError):
        pass


def delete(location) -> None:
    if not is_uri(location):
        Path(location).unlink(missing_ok=True)
        return
    fs, inner = filesystem(location)
    try:
        fs.delete_file(inner)
    except (FileNotFoundError, OSError):
        pass


def upload_dir(local: Path, location) -> None:
    import pyarrow.fs

    fs, inner = filesystem(location)
    local_fs = pyarrow.fs.LocalFileSystem()
    retrying(
        lambda: pyarrow.fs.copy_files(str(local), inner, source_filesystem=local_fs, destination_filesystem=fs),
        location,
        "uploading to",
    )


def download_dir(location, local: Path) -> None:
    import pyarrow.fs

    fs, inner = filesystem(location)
    Path(local).mkdir(parents=True, exist_ok=True)
    local_fs = pyarrow.fs.LocalFileSystem()
    retrying(
        lambda: pyarrow.fs.copy_files(inner, str(local), source_filesystem=fs, destination_filesystem=local_fs),
        location,
        "downloading",
    )


# --- the check before anything starts -------------------------------------------------------------
def check_location(location, flag: str) -> None:
    """Refuse, within seconds, a storage URI that cannot work: credentials in it, a scheme pyarrow
    cannot open, and for s3:// a bucket that does not exist, credentials refused or missing, an
    endpoint that does not answer."""
    if not is_uri(location):
        return
    refuse_credentials(location, flag)
    check_key(location, flag)
    scheme = split(location)[0]
    import pyarrow.fs

    try:
        pyarrow.fs.FileSystem.from_uri(str(location))
    except (pyarrow.ArrowInvalid, pyarrow.ArrowNotImplementedError, ValueError, OSError) as error:
        raise SweepInputError(
            f"{flag} {location}: pyarrow cannot open this URI ({str(error).splitlines()[0][:200]}); use s3://bucket/"
            "path (with ?endpoint_override=host:port&scheme=http for MinIO and other S3-compatible services), "
            "gs://, or a local folder"
        ) from None
    if scheme != "s3":
        return
    _check_bucket(location, flag)


def _check_bucket(location: str, flag: str) -> None:
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    bucket, _ = bucket_key(location)
    where = endpoint_url(location) or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    client = s3_client(location, timeout=CHECK_TIMEOUT_S, attempts=1)
    try:
        client.head_bucket(Bucket=bucket)
    except NoCredentialsError:
        raise SweepInputError(
            f"{flag} {location}: no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE, or run on a machine with an instance role"
        ) from None
    except ClientError as error:
        code = error_code(error)
        if code in ("404", "NoSuchBucket"):
            raise SweepInputError(
                f"{flag} {location}: the bucket {bucket!r} does not exist at {where or 'AWS S3'}; create it "
                f"(aws s3 mb s3://{bucket}, or mc mb for MinIO) or fix the name"
            ) from None
        if code in ("403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied"):
            raise SweepInputError(
                f"{flag} {location}: the store refused the credentials for bucket {bucket!r} ({code}); check "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the profile, and the bucket's policy"
            ) from None
        raise SweepInputError(f"{flag} {location}: the store answered {code or error} for bucket {bucket!r}") from None
    except BotoCoreError as error:
        raise SweepInputError(
            f"{flag} {location}: the object store at {where or 'AWS S3'} does not answer "
            f"({type(error).__name__}); start it or fix endpoint_override / AWS_ENDPOINT_URL"
        ) from None


def main(argv=None) -> int:
    """`python -m trainables.core.object_storage download URI FOLDER` (or `upload FOLDER URI`): copy a
    folder between an object store and this machine, e.g. the data sets onto each node of a cluster
    without a shared file system (cluster.yaml)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m trainables.core.object_storage", description=main.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    download = commands.add_parser("download", help="copy URI's folder into FOLDER")
    download.add_argument("uri")
    download.add_argument("folder")
    upload = commands.add_parser("upload", help="copy FOLDER to URI")
    upload.add_argument("folder")
    upload.add_argument("uri")
    args = parser.parse_args(argv)
    try:
        check_location(args.uri, args.command)
        if args.command == "download":
            download_dir(args.uri, Path(args.folder))
        else:
            if not Path(args.folder).is_dir():
                raise SweepInputError(f"upload: {args.folder} is not a folder")
            upload_dir(Path(args.folder), args.uri)
    except SweepInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{args.command}ed {args.uri if args.command == 'download' else args.folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
