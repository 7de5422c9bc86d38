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
- `create_if_absent` and `replace_if_match`: the atomic writes that locks are made of (O_EXCL
  locally, S3's conditional writes `If-None-Match: *` / `If-Match: <etag>` on an object store);
- `file_manifest(folder)`: every file's size and sha256, and one digest over them, which a reader
  checks a copy against (`cached_copy`: a verified copy in this node's cache, made once);
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

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from trainables.core.errors import SweepInputError, redact

CHECK_TIMEOUT_S = 4.0  # connect and read timeouts of the check before a sweep starts
CREDENTIAL_KEYS = ("access_key", "secret_key", "session_token", "aws_access_key_id", "aws_secret_access_key")
CACHE_ENV = "EMBSWEEP_CACHE_DIR"


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


def _s3(uri: str) -> bool:
    return split(uri)[0] == "s3"


def _error_code(error) -> str:
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


# --- atomic writes that locks are made of ---------------------------------------------------------
def create_if_absent(location, data: bytes) -> str | None:
    """Create the file or object only if nothing is there; its version tag (an ETag, or the local
    file's mtime and size) when this call created it, None when it already existed."""
    if not is_uri(location):
        path = Path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return None
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return _local_tag(path)
    _needs_s3(location)
    from botocore.exceptions import ClientError

    bucket, key = bucket_key(location)
    try:
        return _s3_call(location, "put_object", Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")["ETag"]
    except ClientError as error:
        if _error_code(error) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
            return None
        raise


def read_versioned(location) -> tuple[bytes, str] | None:
    """(content, version tag) or None: the tag is what `replace_if_match` compares."""
    if not is_uri(location):
        path = Path(location)
        try:
            return path.read_bytes(), _local_tag(path)
        except FileNotFoundError:
            return None
    _needs_s3(location)
    from botocore.exceptions import ClientError

    bucket, key = bucket_key(location)
    try:
        answer = _s3_call(location, "get_object", Bucket=bucket, Key=key)
    except ClientError as error:
        if _error_code(error) in ("NoSuchKey", "404"):
            return None
        raise
    return answer["Body"].read(), answer["ETag"]


def replace_if_match(location, data: bytes, tag: str) -> str | None:
    """Overwrite only if the content is still the version `tag`; the new tag, or None when another
    writer changed it first. (Locally, the check and the write are not one step: the local stores
    that use this also hold a lock file, trainables/stages/store.py.)"""
    if not is_uri(location):
        path = Path(location)
        try:
            if _local_tag(path) != tag:
                return None
        except FileNotFoundError:
            return None
        write_bytes(path, data)
        return _local_tag(path)
    _needs_s3(location)
    from botocore.exceptions import ClientError

    bucket, key = bucket_key(location)
    try:
        return _s3_call(location, "put_object", Bucket=bucket, Key=key, Body=data, IfMatch=tag)["ETag"]
    except ClientError as error:
        if _error_code(error) in ("PreconditionFailed", "412", "NoSuchKey", "404", "ConditionalRequestConflict"):
            return None
        raise


def _local_tag(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_mtime_ns}-{stat.st_size}-{stat.st_ino}"


_CLIENTS: dict = {}


def _s3_call(location: str, operation: str, **kwargs):
    """One S3 API call through a client per endpoint; a store that does not answer raises
    StorageUnavailable (botocore retries first)."""
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

    check_key(location, "storage")
    key = (endpoint_url(location), query(location).get("region"))
    if key not in _CLIENTS:
        _CLIENTS[key] = s3_client(location)

    def call():
        try:
            return getattr(_CLIENTS[key], operation)(**kwargs)
        except (EndpointConnectionError, BotoConnectionError, ReadTimeoutError) as error:
            where = endpoint_url(location) or "AWS"
            raise StorageUnavailable(f"the object store at {where} did not answer: {error}") from None

    return retrying(call, location, operation)


def _needs_s3(location: str) -> None:
    if not _s3(location):
        raise SweepInputError(
            f"{location}: this store needs conditional writes, which the tool makes through the S3 API; use an "
            "s3:// URI (GCS, R2, MinIO and Ceph all offer one: pass its endpoint as ?endpoint_override=host:port)"
        )


# --- verified copies ------------------------------------------------------------------------------
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
        code = _error_code(error)
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
