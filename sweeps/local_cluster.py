"""cluster_local.yaml on this machine: Ray's fake multi-node provider, started and stopped alone.

    python -m sweeps.local_cluster up      # prints the address to pass as --address
    python -m sweeps.local_cluster status  # `ray status` at that address: the nodes, the demand
    python -m sweeps.local_cluster down    # stops this cluster's processes and no other Ray

`up` runs `RAY_FAKE_CLUSTER=1 ray start --head --autoscaling-config=...` with the cluster's own
temp folder (default: `embsweep-local-cluster` in the system's temp folder; `--temp-dir`) and its
own free ports (GCS, client server, agents, metrics, the autoscaler's metrics), so it neither meets
nor disturbs another Ray on the machine. It listens on the loopback address only (its head, the
autoscaler and the worker nodes it adds: `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, which makes Ray keep
127.0.0.1 as the node address rather than replace it with the machine's outward one) and with Ray's
token authentication on (`RAY_AUTH_MODE=token`): `up` makes a token (`auth_token` in the temp folder,
readable by its owner only) and gives it to the cluster's processes; a sweep given the printed
`--address` finds it (`token_env`), other drivers take `driver_env`'s variables (`up` prints them).
The head gets the head node type's resources; the autoscaler then adds GPU worker nodes (real
raylets advertising the node type's GPUs) for the demand of what runs on it. `--max-workers N` and
`--gpus-per-worker G` start a smaller copy of the file (tests, a small machine);
`--idle-timeout-minutes M` (a fraction is honoured: Ray's autoscaler waits `60 * M` seconds) reaps
idle nodes sooner than the file's minute. A worker whose raylet died is reaped the same way, as idle
since its last report, and replaced then if trials are still waiting.

`down` ends every process whose command line names the cluster's temp folder (head, workers'
raylets, autoscaler, GCS) and everything they started, by process id: never a blanket `ray stop`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

from sweeps.cluster_config import validate_cluster_config
from sweeps.engine import ray_internals

CLUSTER_FILE = Path(__file__).resolve().parents[1] / "cluster_local.yaml"
DEFAULT_TEMP = Path(tempfile.gettempdir()) / "embsweep-local-cluster"
STATE = "embsweep-cluster.json"
TOKEN = "auth_token"
LOOPBACK = "127.0.0.1"
# address -> temp folder of this user's local clusters, for drivers given only the address (`token_env`)
REGISTRY = Path(tempfile.gettempdir()) / f"embsweep-local-clusters-{os.getuid()}"
# Ray's sockets live in <temp>/session_<date>_<time>_<us>_<pid>/sockets/plasma_store, at most 107 bytes.
MAX_TEMP_DIR = 107 - len("/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _ray_cli() -> str:
    return str(Path(sys.executable).with_name("ray"))


def cluster_env(temp_dir: Path = DEFAULT_TEMP, base: dict | None = None) -> dict:
    """The environment of this cluster's processes and of `ray status` against it: loopback only, its token."""
    return {
        **(os.environ if base is None else base),
        "RAY_FAKE_CLUSTER": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        **driver_env(temp_dir),
    }


LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # Ray keeps 127.0.0.1 as a node's (and a driver's) address


def driver_env(temp_dir: Path = DEFAULT_TEMP) -> dict:
    """What a driver (or any Ray client) needs to connect to this cluster: its token, and its own node address
    on the loopback too (a driver finds its node's raylet by that address)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(Path(temp_dir).resolve() / TOKEN), **LOOPBACK_ENV}


def _make_token(temp_dir: Path) -> Path:
    """A new token for this cluster, readable by its owner only (256 random bits, as Ray's own generator)."""
    path = temp_dir / TOKEN
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_hex(32))
    return path


def _registered(port: int | str) -> Path:
    return REGISTRY / f"{port}.json"


def _register(temp_dir: Path, address: str) -> None:
    REGISTRY.mkdir(mode=0o700, exist_ok=True)
    _registered(address.rsplit(":", 1)[1]).write_text(json.dumps({"address": address, "temp_dir": str(temp_dir)}))


def token_env(address: str) -> dict:
    """`driver_env` of this user's local cluster at `address` (host:port on the loopback address), or {}: for
    another address, when none of ours answers there, or when the environment already names a token."""
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return {}
    host, _, port = str(address).rpartition(":")
    if host not in (LOOPBACK, "localhost") or not port.isdigit():
        return {}
    entry = _registered(int(port))
    try:
        if REGISTRY.stat().st_uid != os.getuid() or entry.stat().st_uid != os.getuid():
            return {}
        temp_dir = Path(json.loads(entry.read_text())["temp_dir"])
    except (OSError, ValueError, KeyError):
        return {}
    state = read_state(temp_dir)
    if not state or state.get("address") != f"{LOOPBACK}:{port}" or not (temp_dir / TOKEN).is_file():
        return {}
    return driver_env(temp_dir)


def read_state(temp_dir: Path) -> dict | None:
    path = Path(temp_dir) / STATE
    return json.loads(path.read_text()) if path.is_file() else None


def _config_for(
    temp_dir: Path, address: str, max_workers: int | None, gpus: int | None, idle_timeout_minutes: float | None = None
) -> tuple[Path, dict]:
    config = yaml.safe_load(CLUSTER_FILE.read_text())
    config["provider"]["gcs_address"] = address
    if idle_timeout_minutes is not None:
        config["idle_timeout_minutes"] = idle_timeout_minutes
    workers = [t for name, t in config["available_node_types"].items() if name != config["head_node_type"]]
    if max_workers is not None:
        config["max_workers"] = max_workers
        for node_type in workers:
            node_type["max_workers"] = max_workers
    if gpus is not None:
        for node_type in workers:
            node_type["resources"]["GPU"] = gpus
            node_type["resources"]["CPU"] = min(node_type["resources"]["CPU"], 6 * gpus)
    path = temp_dir / "cluster_local.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    validate_cluster_config(path)
    return path, config


def up(
    temp_dir: Path = DEFAULT_TEMP,
    max_workers: int | None = None,
    gpus: int | None = None,
    timeout: float = 120,
    idle_timeout_minutes: float | None = None,
) -> str:
    """Start the cluster; returns its address. Refuses when this temp folder's cluster is up."""
    temp_dir = Path(temp_dir).resolve()
    if len(str(temp_dir)) > MAX_TEMP_DIR:
        raise ValueError(
            f"--temp-dir {temp_dir} is too long for Ray's socket paths (at most {MAX_TEMP_DIR} characters); "
            "pick a shorter folder"
        )
    state = read_state(temp_dir)
    if state and _cluster_processes(temp_dir):
        raise RuntimeError(f"a local cluster already runs from {temp_dir} at {state['address']}; `down` it first")
    temp_dir.mkdir(parents=True, exist_ok=True)
    ip = LOOPBACK
    port = _free_port()
    address = f"{ip}:{port}"
    config_path, config = _config_for(temp_dir, address, max_workers, gpus, idle_timeout_minutes)
    head = config["available_node_types"][config["head_node_type"]]["resources"]
    _make_token(temp_dir)
    env = cluster_env(temp_dir)
    env["AUTOSCALER_METRIC_PORT"] = str(_free_port())
    env["AUTOSCALER_UPDATE_INTERVAL_S"] = "2"
    log = open(temp_dir / "head.log", "ab")
    command = [
        _ray_cli(), "start", "--head", f"--port={port}", f"--node-ip-address={ip}",
        f"--temp-dir={temp_dir}", f"--autoscaling-config={config_path}",
        f"--num-cpus={head.get('CPU', 0)}", f"--num-gpus={head.get('GPU', 0)}",
        "--include-dashboard=false", "--disable-usage-stats",
        f"--dashboard-agent-listen-port={_free_port()}",
        f"--dashboard-agent-grpc-port={_free_port()}", f"--runtime-env-agent-port={_free_port()}",
        f"--metrics-export-port={_free_port()}",
    ]  # fmt: skip
    started = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (temp_dir / STATE).write_text(json.dumps({"address": address, "config": str(config_path)}))
    _register(temp_dir, address)
    if started.returncode != 0:
        down(temp_dir)
        raise RuntimeError(f"`ray start` failed (exit {started.returncode}); see {temp_dir / 'head.log'}")
    deadline = time.time() + timeout
    while status(temp_dir).returncode != 0:
        if time.time() > deadline:
            down(temp_dir)
            raise RuntimeError(f"the local cluster did not answer in {timeout:.0f} s; see {temp_dir / 'head.log'}")
        time.sleep(1)
    return address


def status(temp_dir: Path = DEFAULT_TEMP) -> subprocess.CompletedProcess:
    state = read_state(Path(temp_dir).resolve())
    if state is None:
        return subprocess.CompletedProcess([], 1, "", f"no local cluster started from {temp_dir}\n")
    return subprocess.run(
        [_ray_cli(), "status", f"--address={state['address']}"],
        env=cluster_env(temp_dir),
        capture_output=True,
        text=True,
    )


def worker_nodes(temp_dir: Path = DEFAULT_TEMP, gcs=None) -> int:
    """Worker nodes up now, as `ray status` counts them (its autoscaler's active nodes). With `gcs` (a
    `gcs_client(temp_dir)` kept between calls) read in this process: a benchmark that samples every few
    seconds must not start a `ray status` process each time (about a CPU-second each)."""
    if gcs is None:
        text = status(temp_dir).stdout
        active = text.split("Active:")[1].split("Pending:")[0] if "Active:" in text else ""
        return sum(int(line.split()[0]) for line in active.splitlines() if "gpu_worker" in line)
    active = ray_internals.autoscaler_report(gcs).get("active_nodes", {})
    return int(active.get("gpu_worker", 0))


def gcs_client(temp_dir: Path = DEFAULT_TEMP):
    """A client of this cluster's GCS, for `worker_nodes` (Ray's own, as `ray status` makes it), with its token:
    this process's Ray then authenticates with this cluster's token (its environment says so), for good."""
    from sweeps.engine.ray_start import use_token

    use_token(driver_env(temp_dir))
    return ray_internals.gcs_client(read_state(Path(temp_dir).resolve())["address"])


def _cluster_processes(temp_dir: Path) -> list[psutil.Process]:
    """The processes naming this cluster's temp folder, and everything they started; never this process or
    the ones that started it (a `timeout` or a shell whose command line names the folder too)."""
    needle = str(Path(temp_dir).resolve())
    me = psutil.Process()
    ours = {me.pid, *(ancestor.pid for ancestor in me.parents())}
    roots = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            parts = process.info["cmdline"] or ()
            if process.pid not in ours and any(part.endswith(needle) or needle + os.sep in part for part in parts):
                roots.append(process)
        except psutil.Error:
            continue
    found = {p.pid: p for p in roots}
    for root in roots:
        try:
            found.update({child.pid: child for child in root.children(recursive=True) if child.pid not in ours})
        except psutil.Error:
            continue
    return list(found.values())


def down(temp_dir: Path = DEFAULT_TEMP, grace: float = 10) -> int:
    """Stop this cluster's processes (SIGTERM, then SIGKILL after `grace` s); returns how many."""
    temp_dir = Path(temp_dir).resolve()
    processes = _cluster_processes(temp_dir)
    for process in processes:
        try:
            process.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)
    state = read_state(temp_dir)
    if state:
        port = str(state.get("address", "")).rpartition(":")[2]
        registered = _registered(port) if port.isdigit() else None
        if registered and registered.is_file() and json.loads(registered.read_text()).get("temp_dir") == str(temp_dir):
            registered.unlink()
        (temp_dir / STATE).unlink()
    (temp_dir / TOKEN).unlink(missing_ok=True)
    return len(processes)


UP_ONLY = ("--max-workers", "--gpus-per-worker", "--idle-timeout-minutes")  # what `up` reads, and nothing else


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sweeps.local_cluster", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--temp-dir", type=Path, default=DEFAULT_TEMP, help="the cluster's own Ray temp folder")
    parser.add_argument("--max-workers", type=int, help="at most this many GPU worker nodes (default: the file's)")
    parser.add_argument("--gpus-per-worker", type=int, help="GPUs of each worker node (default: the file's)")
    parser.add_argument(
        "--idle-timeout-minutes", type=float, help="reap a worker idle this long, a fraction too (default: the file's)"
    )
    return parser


def main(argv=None) -> int:
    ray_internals.require_supported_versions()
    args = build_parser().parse_args(argv)
    given = [flag for flag in UP_ONLY if getattr(args, flag[2:].replace("-", "_")) is not None]
    if args.command != "up" and given:
        print(f"error: {given[0]} applies only to `up` (it sizes the cluster up starts); leave it out", file=sys.stderr)
        return 2
    if args.command == "up" and not CLUSTER_FILE.is_file():
        print(
            f"{CLUSTER_FILE} not found: `up` reads cluster_local.yaml from a checkout of embsweep, which an installed "
            "wheel does not carry; run it from a checkout (pip install -e .)",
            file=sys.stderr,
        )
        return 2
    if args.command == "up":
        try:
            address = up(
                args.temp_dir, args.max_workers, args.gpus_per_worker, idle_timeout_minutes=args.idle_timeout_minutes
            )
        except (RuntimeError, ValueError) as e:
            print(e, file=sys.stderr)
            return 1
        exports = " ".join(f"{key}={value}" for key, value in driver_env(args.temp_dir).items())
        print(
            f"loopback only, token authentication on; a sweep given --address {address} finds the token itself, "
            f"other drivers: export {exports}",
            file=sys.stderr,
        )
        print(address)
        return 0
    if args.command == "status":
        result = status(args.temp_dir)
        print(result.stdout or result.stderr, end="")
        return result.returncode
    print(f"stopped {down(args.temp_dir)} processes of the local cluster in {args.temp_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
