"""Checks of the places a sweep (sweeps/engine) or a report (analysis) talks to, made before anything starts, each
failing
within seconds with a message instead of a hang or a traceback:

- `check_ray_address(address)`: a gRPC server (what a Ray head's GCS and Ray Client are) answers at
  `host:port` (or `ray://`): it returns an HTTP/2 SETTINGS frame to the HTTP/2 client preface;
- `mlflow_store(uri)`: a scheme MLflow can use; an HTTP tracking server answers its /health; the
  credentials of an `http(s)://user:password@host` URI go to MLflow's own environment variables
  (MLFLOW_TRACKING_USERNAME / _PASSWORD) of the driver only (`credentials_hidden` keeps them from
  Ray's processes and logs) and the URI kept, written and printed is the one without them;
- `check_sqlite_store(uri)`: an existing file behind `sqlite:///` is an SQLite database;
- `check_database_store(uri)`: the driver of a database URL (`postgresql://`, `mysql://`, ...) is
  installed, and a PostgreSQL server answers and accepts the connection; messages show the URL with
  its password masked.
"""

from __future__ import annotations

import contextlib
import os
import socket
from urllib.parse import unquote, urlsplit, urlunsplit

from trainables.core.errors import SweepInputError

TIMEOUT_S = 5.0
MLFLOW_SCHEMES = ("sqlite", "http", "https", "file", "postgresql", "mysql", "mssql", "databricks")
DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")
POSTGRES_INSTALL = "pip install -e '.[postgres]'"  # psycopg 3, the driver SQLAlchemy 2.1 picks for postgresql://
CREDENTIAL_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
DATABASE_PASSWORD_ENV = {"postgresql": "PGPASSWORD"}  # the variable the scheme's driver reads a password from


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
            "http(s)://host:port of a tracking server, or a database URL (postgresql://user@host:5432/db)"
        )
    if scheme in ("http", "https"):
        for name, value in zip(CREDENTIAL_ENV, (parts.username, parts.password)):
            if value:
                os.environ.setdefault(name, unquote(value))
        uri = recorded_uri(uri)
        check_tracking_server(uri, flag)
    elif scheme == "sqlite":
        check_sqlite_store(uri, flag)
    elif scheme in DATABASE_SCHEMES:
        if parts.password and scheme in DATABASE_PASSWORD_ENV:  # kept out of what is recorded and printed
            os.environ.setdefault(DATABASE_PASSWORD_ENV[scheme], unquote(parts.password))
        uri = recorded_uri(uri)
        check_database_store(uri, flag)
    return uri


def recorded_uri(uri: str) -> str:
    """`uri` as a sweep records and prints it: a tracking server's user and password, and a
    database's password, are left out (`mlflow_store` moves them into the environment)."""
    parts = urlsplit(str(uri))
    scheme = parts.scheme.split("+")[0]
    port = f":{parts.port}" if parts.port else ""
    if scheme in ("http", "https") and (parts.username or parts.password):
        return urlunsplit(parts._replace(netloc=f"{parts.hostname}{port}"))
    if scheme in DATABASE_PASSWORD_ENV and parts.password:
        return urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname}{port}"))
    return str(uri)


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


@contextlib.contextmanager
def credentials_hidden():
    """MLflow's credential variables out of this process's environment for the block (e.g. while
    `ray.init` starts Ray's processes, which would inherit them): only the sweep's driver talks to
    the store, and Ray records what its workers get in its logs."""
    names = (*CREDENTIAL_ENV, *DATABASE_PASSWORD_ENV.values())
    saved = {name: os.environ.pop(name) for name in names if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def check_database_store(uri: str, flag: str = "--mlflow-uri") -> None:
    """The driver SQLAlchemy (hence MLflow) loads for this database URL is installed; for
    PostgreSQL, the server also answers and lets this user into the database within seconds."""
    import sqlalchemy
    from sqlalchemy.engine import make_url

    try:
        url = make_url(uri)
        shown = url.render_as_string(hide_password=True)
        dialect = url.get_dialect()
    except sqlalchemy.exc.ArgumentError as error:  # a malformed URL, or a driver SQLAlchemy does not know
        raise SweepInputError(f"{flag}: not a database URL MLflow can use ({_first_line(error)})") from None
    postgres = url.get_backend_name() == "postgresql"
    try:
        dialect.import_dbapi()
    except ImportError as error:
        module = getattr(error, "name", None) or dialect.driver
        if postgres and dialect.driver == "psycopg":
            install = f"install it with: {POSTGRES_INSTALL}"
        elif postgres:
            install = f"install it, or use psycopg 3 ({POSTGRES_INSTALL}) with postgresql:// or postgresql+psycopg://"
        else:
            install = f"install the package that provides {module!r}"
        raise SweepInputError(
            f"{flag} {shown}: MLflow's {url.get_backend_name()} store needs the Python driver {module!r}, which is "
            f"not installed; {install}"
        ) from None
    if postgres:
        check_postgres_server(url, shown, flag)


def check_postgres_server(url, shown: str, flag: str = "--mlflow-uri") -> None:
    """One connection, bounded by libpq's connect_timeout (MLflow itself retries a refused
    connection for about 100 s before it gives up)."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    args = {}
    if url.get_dialect().driver in ("psycopg", "psycopg2") and "connect_timeout" not in url.query:
        args["connect_timeout"] = int(TIMEOUT_S)
    engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args=args)
    try:
        with engine.connect():
            pass
    except Exception as error:
        cause = getattr(error, "orig", None) or error
        reason = " ".join(_first_line(cause).rsplit(" failed: ", 1)[-1].split())  # libpq: 'to server at ... failed: X'
        if url.password:
            reason = reason.replace(url.password, "***")
        if "FATAL:" not in reason and getattr(cause, "sqlstate", None) is None:  # no PostgreSQL server answered
            raise SweepInputError(
                f"{flag} {shown}: the MLflow store is unreachable (no PostgreSQL server answers there within "
                f"{TIMEOUT_S:g} s: {reason}); start it or fix the URI"
            ) from None
        raise SweepInputError(  # the server answered with an error: authentication, a missing database, ...
            f"{flag} {shown}: the PostgreSQL server refused the connection ({reason}); check the user, password "
            "and database (create it with: createdb NAME) or fix the URI"
        ) from None
    finally:
        engine.dispose()


def postgres_answers(uri: str, timeout: float = TIMEOUT_S) -> bool:
    """Something accepts TCP connections at a PostgreSQL URL's host and port (a Unix socket or a
    libpq default host: True, the caller just tries)."""
    from sqlalchemy.engine import make_url

    try:
        url = make_url(uri)
    except Exception:
        return True
    if not url.host:
        return True
    try:
        with socket.create_connection((url.host, url.port or 5432), timeout=timeout):
            return True
    except OSError:
        return False
