"""Checks of the places a sweep (sweeps/engine) or a report (analysis) talks to, made before anything starts, each
failing
within seconds with a message instead of a hang or a traceback:

- `check_ray_address(address)`: a gRPC server (what a Ray head's GCS and Ray Client are) answers at
  `host:port` (or `ray://`): it returns an HTTP/2 SETTINGS frame to the HTTP/2 client preface;
- `mlflow_store(uri)`: a scheme MLflow can use; an HTTP tracking server answers its /health; the
  credentials of an `http(s)://user:password@host` URI go to MLflow's own environment variables
  (MLFLOW_TRACKING_USERNAME / _PASSWORD) and the URI kept, written and printed is the one
  without them;
- `check_sqlite_store(uri)`: an existing file behind `sqlite:///` is an SQLite database.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import unquote, urlsplit, urlunsplit

from trainables.core.errors import SweepInputError

TIMEOUT_S = 5.0
MLFLOW_SCHEMES = ("sqlite", "http", "https", "file", "postgresql", "mysql", "mssql", "databricks")
CREDENTIAL_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # + an empty SETTINGS frame
HTTP2_SETTINGS = 4


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S):
            return True
    except OSError:
        return False


def _speaks_grpc(host: str, port: int) -> bool:
    """The server at host:port answers the HTTP/2 preface with a SETTINGS frame (9-byte header, type 4)."""
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S) as connection:
            connection.settimeout(TIMEOUT_S)
            connection.sendall(HTTP2_PREFACE)
            header = b""
            while len(header) < 9:
                chunk = connection.recv(9 - len(header))
                if not chunk:
                    return False
                header += chunk
            return header[3] == HTTP2_SETTINGS
    except OSError:
        return False


def check_ray_address(address: str | None) -> None:
    if not address or address in ("auto", "local"):
        return
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or not port:
        raise SweepInputError(f"--address {address!r}: expected host:port of a Ray head (or ray://host:port, or auto)")
    if not _answers(host, port):
        raise SweepInputError(
            f"--address {address}: nothing answers at {host}:{port} within {TIMEOUT_S:g} s; start the "
            "Ray head there (ray start --head, or ray up cluster.yaml) or fix the address"
        )
    if not _speaks_grpc(host, port):
        raise SweepInputError(
            f"--address {address}: something answers at {host}:{port}, but not a Ray head (no gRPC "
            f"server there within {TIMEOUT_S:g} s); pass the head's GCS address (port 6379 by default) "
            "or its Ray Client address ray://host:10001"
        )


def mlflow_store(uri: str, flag: str = "--mlflow-uri") -> str:
    """The URI to use and record (credentials moved to the environment); refuses a store that
    cannot work."""
    parts = urlsplit(uri)
    scheme = parts.scheme.split("+")[0]
    if scheme not in MLFLOW_SCHEMES:
        raise SweepInputError(
            f"{flag} {uri!r}: MLflow has no store for the scheme '{parts.scheme}'; use sqlite:///path/mlflow.db, "
            "http(s)://host:port of a tracking server, or a database URL"
        )
    if scheme in ("http", "https"):
        if parts.username or parts.password:
            for name, value in zip(CREDENTIAL_ENV, (parts.username, parts.password)):
                if value:
                    os.environ.setdefault(name, unquote(value))
            netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
            uri = urlunsplit(parts._replace(netloc=netloc))
        check_tracking_server(uri, flag)
    elif scheme == "sqlite":
        check_sqlite_store(uri, flag)
    return uri


def check_tracking_server(uri: str, flag: str = "--mlflow-uri") -> None:
    import requests

    try:
        requests.get(uri.rstrip("/") + "/health", timeout=TIMEOUT_S)
    except requests.RequestException as error:
        raise SweepInputError(
            f"{flag} {uri}: the MLflow store is unreachable (no server answers there within "
            f"{TIMEOUT_S:g} s: {type(error).__name__}); start it (python -m sweeps.mlflow_server) "
            "or fix the URI"
        ) from None


def check_sqlite_store(uri: str, flag: str = "--mlflow-uri") -> None:
    path = uri[len("sqlite:///") :] if uri.startswith("sqlite:///") else ""
    if path and os.path.isfile(path):
        with open(path, "rb") as handle:
            if handle.read(16) not in (b"SQLite format 3\x00", b""):  # (empty: being created right now)
                raise SweepInputError(
                    f"{flag} {uri}: {path} is not an SQLite database; point at the mlflow.db of a sweep"
                )
    elif path and os.path.isdir(path):
        raise SweepInputError(
            f"{flag} {uri}: {path} is a folder; point at a database file inside it (e.g. {path}/mlflow.db)"
        )


def credentials_env() -> dict:
    """MLflow's credential variables, for Ray workers that write to the store."""
    return {name: os.environ[name] for name in CREDENTIAL_ENV if name in os.environ}
