"""Start an MLflow tracking server (UI + REST API) on a sweep storage path's store.

    python -m sweeps.mlflow_server                       # runs/mlflow.db on http://127.0.0.1:5000
    python -m sweeps.mlflow_server --storage-path /mnt/shared/runs --port 5001
    python -m sweeps.mlflow_server --backend-store-uri postgresql://... --host 0.0.0.0 \
        --allowed-hosts mlflow.example.org

The store is `sqlite:///<storage-path>/mlflow.db` (the file a local sweep writes by default, so
the same runs can be served), artifacts go to `<storage-path>/mlartifacts` and are proxied by the
server. It binds to 127.0.0.1 unless `--host` says otherwise; on another interface, also pass
`--allowed-hosts` (MLflow 3 rejects requests whose Host header is not localhost or a private IP).
Sweeps then log to it with `--mlflow-uri http://127.0.0.1:5000`. A PostgreSQL store
(`postgresql://user@host:5432/db`) needs the driver (`pip install -e '.[postgres]'`); a missing
driver or an unreachable database is refused (exit 2) before the server starts. MLflow's background job
runner (GenAI jobs: a job process and several Huey consumers, ~1 GB) is off unless `--enable-jobs`
is given: a sweep's runs do not use it. Arguments after `--` go to `mlflow server` unchanged. The process is
replaced by `mlflow server` (same pid; Ctrl-C stops it).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sweeps.mlflow_server",
        description="Start an MLflow tracking server on a sweep storage path's store, bound to 127.0.0.1 by default.",
        epilog="Arguments after `--` are passed to `mlflow server` unchanged.",
    )
    parser.add_argument(
        "--storage-path",
        default="runs",
        help="the sweeps' --storage-path: the store is <storage-path>/mlflow.db, artifacts "
        "<storage-path>/mlartifacts (runs)",
    )
    parser.add_argument(
        "--backend-store-uri",
        default=None,
        help="another store instead (e.g. sqlite:////abs/mlflow.db or postgresql://...)",
    )
    parser.add_argument(
        "--artifacts-destination", default=None, help="where proxied artifacts go (<storage-path>/mlartifacts)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=5000, help="port (5000)")
    parser.add_argument("--workers", type=int, default=1, help="server worker processes (1; each holds ~0.5 GB)")
    parser.add_argument(
        "--allowed-hosts",
        default=None,
        help="Host headers to accept besides localhost and private IPs (needed when serving beyond this machine)",
    )
    parser.add_argument(
        "--enable-jobs",
        action="store_true",
        help="also start MLflow's job runner (GenAI jobs; not needed for sweeps; ~1 GB more)",
    )
    parser.add_argument("--print-command", action="store_true", help="print the mlflow command and exit")
    return parser


def server_command(args: argparse.Namespace, extra: list[str] | None = None) -> list[str]:
    storage = Path(args.storage_path).expanduser().resolve()
    store = args.backend_store_uri or f"sqlite:///{storage / 'mlflow.db'}"
    artifacts = args.artifacts_destination or str(storage / "mlartifacts")
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        store,
        "--artifacts-destination",
        artifacts,
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--workers",
        str(args.workers),
    ]
    if args.allowed_hosts:
        command += ["--allowed-hosts", args.allowed_hosts]
    return command + list(extra or [])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = build_parser()
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if "://" in args.storage_path and not (args.backend_store_uri and args.artifacts_destination):
        parser.error(
            "--storage-path is a URI: a SQLite store needs a local path; pass --backend-store-uri and "
            "--artifacts-destination"
        )
    command = server_command(args, extra)
    if args.print_command:
        print(shlex.join(command))
        return 0
    if args.backend_store_uri is None:
        Path(args.storage_path).expanduser().resolve().mkdir(parents=True, exist_ok=True)
    else:  # a missing driver or an unreachable database: one line now, not a traceback in the server's log
        from trainables.core.endpoints import mlflow_store
        from trainables.core.errors import SweepInputError

        try:  # a password moves to the driver's variable (PGPASSWORD), which the server inherits
            store = mlflow_store(args.backend_store_uri, "--backend-store-uri")
        except SweepInputError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        command[command.index("--backend-store-uri") + 1] = store
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(
        f"MLflow server on http://{shown}:{args.port} (store: {command[command.index('--backend-store-uri') + 1]}); "
        f"sweeps log to it with --mlflow-uri http://{shown}:{args.port}",
        flush=True,
    )
    if args.host not in LOCAL_HOSTS:
        print(
            f"note: bound to {args.host}, reachable from other machines and unauthenticated; "
            "MLflow accepts only localhost/private-IP Host headers unless --allowed-hosts is given.",
            flush=True,
        )
    os.environ["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "true" if args.enable_jobs else "false"
    os.execv(command[0], command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
