"""The atomic writes that locks and claims are made of, for a local folder or an object store: create only if
absent (O_EXCL locally, S3's `If-None-Match: *`) and replace only if unchanged (S3's `If-Match: <etag>`), with
the version tag that the second compares. Used by the sweep folder's claim (sweeps/engine/storage.py) and the
stage store's claims (trainables/stages/object_store.py); locations as trainables/core/object_storage.py takes
them."""

from __future__ import annotations

import os
from pathlib import Path

from trainables.core.errors import SweepInputError
from trainables.core.object_storage import (
    StorageUnavailable,
    bucket_key,
    check_key,
    endpoint_url,
    error_code,
    is_uri,
    query,
    retrying,
    s3_client,
    split,
    write_bytes,
)


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
        if error_code(error) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
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
        if error_code(error) in ("NoSuchKey", "404"):
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
        if error_code(error) in ("PreconditionFailed", "412", "NoSuchKey", "404", "ConditionalRequestConflict"):
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
    if split(location)[0] != "s3":
        raise SweepInputError(
            f"{location}: this store needs conditional writes, which the tool makes through the S3 API; use an "
            "s3:// URI (GCS, R2, MinIO and Ceph all offer one: pass its endpoint as ?endpoint_override=host:port)"
        )
