"""Start an MLflow tracking server (UI + REST API) on a sweep storage path's store.

    python -m sweeps.mlflow_server                       # runs/mlflow.db on http://127.0.0.1:5000
    python -m sweeps.mlflow_server --storage-path /mnt/shared/runs --port 5001
    python -m sweeps.mlflow_server --backend-store-uri postgresql://... --host 0.0.0.0 \
        --allowed-hosts mlflow.example.org
    python -m sweeps.mlflow_server --backend-store-uri postgresql://... \
        --storage-path 's3://bucket/runs?endpoint_override=minio.internal:9000&scheme=http'
    python -m sweeps.mlflow_server --storage-path /mnt/shared --local-store ~/mlflow.db   # on a cluster

The store is `sqlite:///<storage-path>/mlflow.db` (the file a local sweep writes by default, so
the same runs can be served), artifacts go to `<storage-path>/mlartifacts` and are proxied by the
server. It binds to 127.0.0.1 unless `--host` says otherwise; on another interface, also pass
`--allowed-hosts` (MLflow 3 rejects requests whose Host header is not localhost or a private IP).
Sweeps then log to it with `--mlflow-uri http://127.0.0.1:5000`. A PostgreSQL store
(`postgresql://user@host:5432/db`) needs the driver (`pip install -e '.[postgres]'`); a missing
driver or an unreachable database is refused (exit 2) before the server starts. MLflow's background job
runner (GenAI jobs: a job process and several Huey consumers, ~1 GB) is off unless `--enable-jobs`
is given: a sweep's runs do not use it. Arguments after `--` go to `mlflow server` unchanged. Without
`--local-store` the process is replaced by `mlflow server` (same pid; Ctrl-C stops it).

On a cluster, whose nodes go away, `--local-store FILE` keeps the SQLite store on this node's disk and its
home on the storage path: `<storage-path>/mlflow.db`, a folder's or an s3:// URI's, restored from there when
FILE does not exist and copied there as the writes pause, at least every `--backup-interval` seconds, and when
the server stops (SIGTERM, SIGINT, SIGHUP): sweeps/engine/mlflow_home.py. The process then stays, as the server's
parent, to copy; the storage path must exist (a folder not there is most often a volume not mounted).

Artifacts on an object store: `--artifacts-destination s3://bucket/mlartifacts?endpoint_override=host:port&scheme=http`,
or `--storage-path s3://bucket/runs...` with a `--backend-store-uri` (a database: SQLite needs a local
file), whose artifacts then go to `<storage-path>/mlartifacts`. MLflow's S3 artifact repository reads
no query from the URI: it takes the endpoint from the environment variable MLFLOW_S3_ENDPOINT_URL
(else boto3's AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS). So the server gets the destination
without its query, and MLFLOW_S3_ENDPOINT_URL set to the query's endpoint (else to AWS_ENDPOINT_URL_S3
or AWS_ENDPOINT_URL, where set). Credentials come from the AWS chain the server inherits (environment,
profile, instance role), never from the URI (refused) or the command line. The destination is checked
before the server starts (a bucket that does not exist, credentials refused, an endpoint that does not
answer: one line, exit 2). Clients log artifacts through the server (`mlflow-artifacts:` URIs), so
they need no credentials for the bucket.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from trainables.core import object_storage

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
S3_ENDPOINT_ENV = "MLFLOW_S3_ENDPOINT_URL"  # where MLflow's S3 artifact repository reads its endpoint
AWS_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sweeps.mlflow_server",
        description="Start an MLflow tracking server on a sweep storage path's store, bound to 127.0.0.1 by default.",
        epilog="Arguments after `--` are passed to `mlflow server` unchanged.",
    )
    parser.add_argument(
        "--storage-path",
        default="runs",
        help="the --storage-path the sweeps ran with: the store is <storage-path>/mlflow.db (where sweeps run "
        "without --mlflow-uri log), artifacts <storage-path>/mlartifacts (runs); a URI (s3://...) needs "
        "--backend-store-uri",
    )
    parser.add_argument(
        "--backend-store-uri",
        default=None,
        help="another store instead (e.g. sqlite:////abs/mlflow.db or postgresql://...)",
    )
    parser.add_argument(
        "--local-store",
        default=None,
        help="keep the SQLite store in this file of this node, its home <storage-path>/mlflow.db: restored from "
        "there when the file does not exist, copied there as writes pause and when the server stops (a cluster)",
    )
    parser.add_argument(
        "--backup-interval",
        type=float,
        default=60.0,
        help="with --local-store: copy the store to its home at least this often (seconds) while writes go on (60)",
    )
    parser.add_argument(
        "--artifacts-destination",
        default=None,
        help="where proxied artifacts go (<storage-path>/mlartifacts): a folder, or s3://bucket/path"
        "[?endpoint_override=host:port&scheme=http]",
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


def artifacts_destination(args: argparse.Namespace) -> str:
    """Where proxied artifacts go, as the user gave it (a URI keeps its query): --artifacts-destination,
    else <storage-path>/mlartifacts."""
    if args.artifacts_destination:
        return args.artifacts_destination
    if object_storage.is_uri(args.storage_path):
        return object_storage.join(args.storage_path, "mlartifacts")
    return str(Path(args.storage_path).expanduser().resolve() / "mlartifacts")


def _without_query(destination: str) -> str:
    """A URI without its query, which MLflow would not read (a local path as it is)."""
    return destination.split("?", 1)[0] if object_storage.is_uri(destination) else destination


def s3_endpoint(destination: str) -> str | None:
    """The S3 endpoint of an s3:// destination: its query's, else the environment's (MLflow's own
    variable first, then boto3's); None for AWS itself and for every other destination."""
    if not object_storage.is_uri(destination) or object_storage.split(destination)[0] != "s3":
        return None
    return object_storage.endpoint_url(destination) or next(
        (os.environ[name] for name in (S3_ENDPOINT_ENV, *AWS_ENDPOINT_ENV) if os.environ.get(name)), None
    )


def server_environment(args: argparse.Namespace) -> dict[str, str]:
    """What the server's environment needs besides this one's: MLFLOW_S3_ENDPOINT_URL for an S3
    destination on another endpoint than AWS (MLflow reads the endpoint from there, not from a URI)."""
    endpoint = s3_endpoint(artifacts_destination(args))
    return {S3_ENDPOINT_ENV: endpoint} if endpoint else {}


def server_command(args: argparse.Namespace, extra: list[str] | None = None) -> list[str]:
    if args.backend_store_uri:
        store = args.backend_store_uri
    elif args.local_store:
        store = f"sqlite:///{Path(args.local_store).expanduser().resolve()}"
    else:
        store = f"sqlite:///{Path(args.storage_path).expanduser().resolve() / 'mlflow.db'}"
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        store,
        "--artifacts-destination",
        _without_query(artifacts_destination(args)),  # the endpoint travels in MLFLOW_S3_ENDPOINT_URL
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


def check_destination(args: argparse.Namespace) -> None:
    """Refuse (SweepInputError), within seconds, an object-store destination that cannot work; the
    check reaches the endpoint the server will use (MLFLOW_S3_ENDPOINT_URL included)."""
    destination = artifacts_destination(args)
    if not object_storage.is_uri(destination):
        return
    endpoint = s3_endpoint(destination)
    if endpoint and not object_storage.endpoint_url(destination):
        parts = urlsplit(endpoint)
        separator = "&" if object_storage.split(destination)[2] else "?"
        destination += f"{separator}endpoint_override={parts.netloc}&scheme={parts.scheme or 'https'}"
    object_storage.check_location(destination, "--artifacts-destination")


def _refused(args: argparse.Namespace) -> str | None:
    """One line when the database or the artifact store cannot work (the store's URI is then the one
    without its password: mlflow_store moves it to the driver's variable), else None."""
    from trainables.core.endpoints import mlflow_store
    from trainables.core.errors import SweepInputError

    try:
        if args.backend_store_uri is not None:
            args.backend_store_uri = mlflow_store(args.backend_store_uri, "--backend-store-uri")
        check_destination(args)
    except SweepInputError as error:
        return str(error)
    return _missing_folder(args)


def _missing_folder(args: argparse.Namespace) -> str | None:
    """One line when the store's folder is not there: the storage path of a --local-store's home (a volume not
    mounted, most often), or the folder of a SQLite --backend-store-uri (which this command does not create: a
    folder that should be a mount would be made on a disk that goes away)."""
    from trainables.core.errors import SweepInputError

    if args.local_store:
        if object_storage.is_uri(args.storage_path):
            try:
                object_storage.check_location(args.storage_path, "--storage-path")
            except SweepInputError as error:
                return str(error)
        elif not Path(args.storage_path).expanduser().is_dir():
            return (
                f"--storage-path {args.storage_path} does not exist, and it is the MLflow history's home: mount the "
                "shared storage there (or create the folder), or give the --storage-path the sweeps use"
            )
        return None
    uri = args.backend_store_uri or ""
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).parent.is_dir():
        return (
            f"the folder of the SQLite store {uri} does not exist: create it, or keep the store on this node's disk "
            "and its home on the storage path with --local-store FILE --storage-path <shared folder or s3:// URI>"
        )
    return None


def _announce(args: argparse.Namespace, command: list[str], environment: dict[str, str]) -> None:
    shown = f"[{args.host}]" if ":" in args.host else args.host
    artifacts = command[command.index("--artifacts-destination") + 1]
    if environment:
        artifacts += f" at {environment[S3_ENDPOINT_ENV]}"
    print(
        f"MLflow server on http://{shown}:{args.port} (store: {command[command.index('--backend-store-uri') + 1]}; "
        f"artifacts: {artifacts}); sweeps log to it with --mlflow-uri http://{shown}:{args.port}",
        flush=True,
    )
    store = command[command.index("--backend-store-uri") + 1]
    if store.startswith("sqlite:///") and not args.local_store and not Path(store[len("sqlite:///") :]).exists():
        print(
            f"note: {store[len('sqlite:///') :]} does not exist yet: this server starts an empty store. Sweeps run "
            "without --mlflow-uri wrote <their --storage-path>/mlflow.db: give that --storage-path, or "
            "--backend-store-uri the --mlflow-uri they were given.",
            flush=True,
        )
    if args.host not in LOCAL_HOSTS:
        print(
            f"note: bound to {args.host}, reachable from other machines and unauthenticated; "
            "MLflow accepts only localhost/private-IP Host headers unless --allowed-hosts is given.",
            flush=True,
        )


def _print_command(args: argparse.Namespace, extra: list[str]) -> int:
    """The command on stdout and what its environment gets on stderr; nothing is reached or started."""
    from trainables.core.errors import SweepInputError

    try:
        object_storage.refuse_credentials(artifacts_destination(args), "--artifacts-destination")
    except SweepInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(shlex.join(server_command(args, extra)))
    for name, value in server_environment(args).items():
        print(f"environment: {name}={value}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = build_parser()
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if args.local_store and args.backend_store_uri:
        parser.error("--local-store is a SQLite store of this node: give it or --backend-store-uri, not both")
    if object_storage.is_uri(args.storage_path) and not (args.backend_store_uri or args.local_store):
        parser.error(
            "--storage-path is a URI: a SQLite store needs a local file; pass --local-store FILE (its home is then "
            "<storage-path>/mlflow.db) or --backend-store-uri (e.g. postgresql://user@host:5432/mlflow); artifacts "
            "go to <storage-path>/mlartifacts"
        )
    if args.backup_interval <= 0:
        parser.error("--backup-interval must be above 0 seconds")
    if args.print_command:
        return _print_command(args, extra)
    refused = _refused(args)  # a missing driver, an unreachable database or bucket: one line, not a traceback
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    if args.backend_store_uri is None and not args.local_store:
        Path(args.storage_path).expanduser().resolve().mkdir(parents=True, exist_ok=True)
    command, environment = server_command(args, extra), server_environment(args)
    if args.local_store:
        return _serve_keeping_home(args, command, environment)
    _announce(args, command, environment)
    os.environ.update(environment)
    os.environ["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "true" if args.enable_jobs else "false"
    os.execv(command[0], command)
    return 0  # not reached


def _die_with_parent() -> None:
    """In the server's process: SIGTERM when its parent (the keeper) dies, so that no server outlives it (Linux)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _serve_keeping_home(args: argparse.Namespace, command: list[str], environment: dict[str, str]) -> int:
    """`mlflow server` as a child, its store copied to the storage path while it runs and when it stops."""
    from sweeps.engine.mlflow_home import Keeper, home_of
    from trainables.core.errors import SweepInputError

    store = Path(args.local_store).expanduser().resolve()
    keeper = Keeper(store, home_of(args.storage_path), args.backup_interval, say=lambda line: print(line, flush=True))
    try:
        keeper.start()
    except SweepInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    _announce(args, command, environment)
    stop: list[int] = []
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda received, frame: stop.append(received))
    env = {**os.environ, **environment, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "true" if args.enable_jobs else "false"}
    try:
        server = subprocess.Popen(command, env=env, process_group=0, preexec_fn=_die_with_parent)
    except OSError:
        keeper.lease.release()
        raise
    try:
        while server.poll() is None and not stop:
            time.sleep(1.0)
            try:
                keeper.tick()
            except Exception as error:  # the storage unreachable beyond its retries: the next tick tries again
                print(f"warning: could not copy the MLflow store to its home: {error}", flush=True)
    finally:
        if server.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        why = f"{signal.Signals(stop[0]).name} received" if stop else f"the server exited ({server.returncode})"
        keeper.finish(why)
    return 0 if stop else server.returncode


if __name__ == "__main__":
    sys.exit(main())
