"""`python -m sweeps.mlflow_server` says when the SQLite store it would serve does not exist yet (an empty store,
most often a --storage-path other than the sweeps'), and says nothing when it does."""

from __future__ import annotations

import sqlite3

from sweeps import mlflow_server


def announce(argv, capsys) -> str:
    args = mlflow_server.build_parser().parse_args(argv)
    mlflow_server._announce(args, mlflow_server.server_command(args), {})
    return capsys.readouterr().out


def test_a_store_that_does_not_exist_is_named_before_the_server_starts(tmp_path, capsys):
    out = announce(["--storage-path", str(tmp_path / "elsewhere")], capsys)
    assert f"note: {tmp_path / 'elsewhere' / 'mlflow.db'} does not exist yet: this server starts an empty store" in out
    out = announce(["--backend-store-uri", f"sqlite:///{tmp_path / 'none.db'}"], capsys)
    assert "does not exist yet" in out


def test_an_existing_store_gets_no_note(tmp_path, capsys):
    sqlite3.connect(tmp_path / "mlflow.db").close()
    assert "does not exist" not in announce(["--storage-path", str(tmp_path)], capsys)
    assert "does not exist" not in announce(["--backend-store-uri", "postgresql://mlflow@db:5432/mlflow"], capsys)
