"""A real PostgreSQL server for tests (pgserver's bundled binaries; Unix socket only, trust
authentication). pgserver runs initdb and the server as its own system user when this runs as root
(initdb refuses root)."""

from __future__ import annotations

import contextlib
import importlib
import shutil
import tempfile
from pathlib import Path

import pytest


def installed(module: str, install: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        pytest.fail(f"{module} is not installed; the PostgreSQL tests need it: {install}")


@contextlib.contextmanager
def postgres_database():
    """The URI of a fresh database `embsweep` on a server of its own, removed afterwards."""
    installed("psycopg", "pip install -e '.[postgres]'")
    pgserver = installed("pgserver", "pip install -e '.[test]'")
    import psycopg

    root = Path(tempfile.mkdtemp(prefix="embsweep-pg-"))  # short: the socket's path must stay short
    server = pgserver.get_server(root / "pgdata", cleanup_mode="delete")
    try:
        with psycopg.connect(server.get_uri(), autocommit=True) as connection:
            connection.execute("CREATE DATABASE embsweep")
        yield f"postgresql://postgres@/embsweep?host={server.get_postmaster_info().socket_dir}"
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)
