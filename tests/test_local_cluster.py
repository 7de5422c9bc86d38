"""`python -m sweeps.local_cluster`: the fake multi-node cluster starts, scales from 0 GPU nodes for
0.25-GPU tasks, packs them at most four to a GPU id, and `down` stops its processes and no others. It
listens on the loopback address only, with Ray's token authentication on: its token made readable by its
owner only, given to its processes and found by a sweep given its address."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from sweeps import local_cluster
from sweeps.engine import ray_internals

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def listening(processes) -> dict[int, tuple[str, list[str]]]:
    """The addresses each process listens on (TCP listeners and bound UDP sockets), with its name."""
    names = {}
    for process in processes:
        try:
            names[process.pid] = process.name()
        except psutil.Error:
            pass
    found = {}
    for connection in psutil.net_connections("inet"):
        if connection.pid in names and (connection.status == psutil.CONN_LISTEN or not connection.raddr):
            found.setdefault(connection.pid, (names[connection.pid], []))[1].append(connection.laddr.ip)
    return found


def is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


@pytest.mark.sweep  # about 2 s: out of the fast run, which stays under 3 minutes
def test_down_stops_only_the_processes_naming_its_temp_folder(tmp_path):
    ours, other = tmp_path / "cluster", tmp_path / "cluster-other"
    ours.mkdir()
    (ours / local_cluster.STATE).write_text(json.dumps({"address": "x"}))
    mine = subprocess.Popen([*SLEEPER, f"--temp-dir={ours}"])
    # a child started by one of the cluster's processes goes too, whatever its command line
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, time; subprocess.Popen({SLEEPER!r}); time.sleep(120)", str(ours)]
    )
    neighbours = [subprocess.Popen([*SLEEPER, f"--temp-dir={other}"]), subprocess.Popen(SLEEPER)]
    try:
        deadline = time.time() + 20
        while not psutil.Process(parent.pid).children() and time.time() < deadline:
            time.sleep(0.1)
        (child,) = psutil.Process(parent.pid).children()
        assert local_cluster.down(ours, grace=5) == 3
        assert mine.wait(10) is not None and parent.wait(10) is not None
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
        assert all(n.poll() is None for n in neighbours)
        assert not (ours / local_cluster.STATE).exists()
    finally:
        for process in (mine, parent, *neighbours):
            process.kill()
            process.wait()


def test_down_spares_the_processes_that_started_it(tmp_path):
    """`timeout 60 python -m sweeps.local_cluster down --temp-dir X`: the wrapper names X too, and lives."""
    ours = tmp_path / "cluster"
    ours.mkdir()
    stopper = f"from sweeps import local_cluster; print(local_cluster.down({str(ours)!r}, grace=5))"
    wrapper = f"import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', {stopper!r}]).returncode)"
    done = subprocess.run(
        [sys.executable, "-c", wrapper, f"--temp-dir={ours}"],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "0", (done.returncode, done.stdout, done.stderr)


# The client runs in its own process: this test process may hold the session's local Ray already.
PLACE_QUARTER_GPU_TASKS = """
import json, os, sys, time
import ray

ray.init(address=sys.argv[1], log_to_driver=False)


@ray.remote(num_cpus=0, num_gpus=0.25)
def where():
    time.sleep(3)
    return ray.get_runtime_context().get_node_id(), os.environ["CUDA_VISIBLE_DEVICES"]


placed = ray.get([where.remote() for _ in range(8)], timeout=150)
print(json.dumps({"head": ray.get_runtime_context().get_node_id(), "placed": placed}))
"""


@pytest.mark.slow
def test_local_cluster_scales_from_zero_for_quarter_gpu_tasks_and_stops(data_dir, tmp_path):
    temp_dir = Path(tempfile.mkdtemp(prefix="embsweep-lc-"))  # short: Ray's socket paths are limited
    command = [sys.executable, "-m", "sweeps.local_cluster"]
    started = subprocess.run(
        [*command, "up", f"--temp-dir={temp_dir}", "--max-workers=1", "--gpus-per-worker=2"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert started.returncode == 0, started.stderr
    address = started.stdout.strip().splitlines()[-1]
    saved = dict(os.environ)  # gcs_client gives this process the cluster's token: taken back at the end
    try:
        gcs = local_cluster.gcs_client(temp_dir)  # read in this process, as the grid benchmark samples it
        assert local_cluster.worker_nodes(temp_dir) == 0 == local_cluster.worker_nodes(temp_dir, gcs)
        assert address.startswith("127.0.0.1:") and "RAY_AUTH_TOKEN_PATH=" in started.stderr
        token = temp_dir / local_cluster.TOKEN
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        client = subprocess.run(
            [sys.executable, "-c", PLACE_QUARTER_GPU_TASKS, address],
            capture_output=True,
            text=True,
            timeout=240,
            env={**os.environ, **local_cluster.driver_env(temp_dir)},
        )
        assert client.returncode == 0, client.stderr
        # every process of the cluster, the worker node the autoscaler added included, on the loopback only
        exposed = {
            f"{name} ({pid})": ips for pid, (name, ips) in listening(local_cluster._cluster_processes(temp_dir)).items()
            if not all(map(is_loopback, ips))
        }  # fmt: skip
        assert not exposed, f"local cluster processes listening beyond the loopback address: {exposed}"
        without = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        # a sweep given only the printed address finds the cluster's token itself
        sweep = subprocess.run(
            [sys.executable, str(local_cluster.CLUSTER_FILE.parent / "sweeps" / "electra_layers.py"), "--smoke-test"]
            + ["--simulate", "--simulate-seconds", "1", "--epochs", "1", "--layers", "0", "--seeds", "0"]
            + ["--gpus-per-trial", "0", "--data-dir", str(data_dir), "--storage-path", str(tmp_path / "runs")]
            + ["--address", address],
            capture_output=True,
            text=True,
            timeout=300,
            env={**without, "PYTHONPATH": str(local_cluster.CLUSTER_FILE.parent)},
        )
        assert sweep.returncode == 0, sweep.stderr[-3000:]
        refused = subprocess.run(
            [sys.executable, "-c", "import sys, ray; ray.init(address=sys.argv[1])", address],
            capture_output=True,
            text=True,
            timeout=120,
            env={**without, **local_cluster.LOOPBACK_ENV, "RAY_AUTH_MODE": "disabled"},
        )
        assert refused.returncode != 0 and "Authentication" in refused.stderr, refused.stderr[-2000:]
        result = json.loads(client.stdout.strip().splitlines()[-1])
        placed = [tuple(p) for p in result["placed"]]
        assert result["head"] not in {node for node, _ in placed}
        assert set(Counter(placed).values()) == {4}  # two GPU ids of one new node, four tasks each
        assert local_cluster.worker_nodes(temp_dir) == 1 == local_cluster.worker_nodes(temp_dir, gcs)
        shown = subprocess.run([*command, "status", f"--temp-dir={temp_dir}"], capture_output=True, text=True)
        assert "1 gpu_worker" in shown.stdout
    finally:
        os.environ.clear()
        os.environ.update(saved)
        ray_internals.reload_auth_config()  # Ray cached the cluster's token; a later local Ray here needs its own
        stopped = subprocess.run([*command, "down", f"--temp-dir={temp_dir}"], capture_output=True, text=True)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert not local_cluster._cluster_processes(temp_dir)
    assert local_cluster.status(temp_dir).returncode != 0
    assert not (temp_dir / local_cluster.TOKEN).exists() and local_cluster.token_env(address) == {}
    shutil.rmtree(temp_dir, ignore_errors=True)


def test_up_refuses_a_temp_folder_too_long_for_rays_sockets(tmp_path):
    with pytest.raises(ValueError, match="too long for Ray's socket paths"):
        local_cluster.up(tmp_path / ("x" * 60))


def test_worker_nodes_reads_the_autoscalers_status_through_a_kept_gcs_client(tmp_path):
    """No `ray status` process per sample: the autoscaler's status is read from the GCS as `ray status` reads it."""

    class Gcs:
        status = {"autoscaler_report": {"active_nodes": {"ray.head.default": 1, "gpu_worker": 3}}}

        def internal_kv_get(self, key, namespace):
            assert key == ray_internals.autoscaler_status_key()
            return json.dumps(self.status).encode() if self.status else None

    gcs = Gcs()
    assert local_cluster.worker_nodes(tmp_path, gcs) == 3
    gcs.status = None  # the autoscaler has not reported yet
    assert local_cluster.worker_nodes(tmp_path, gcs) == 0


def test_the_idle_timeout_is_the_files_unless_given_and_a_fraction_passes_rays_schema(tmp_path):
    """The fault tests reap a dead worker in 15 s (`idle_timeout_minutes: 0.25`; Ray's schema takes a number, its
    autoscaler waits 60 x that many seconds); the user's copy keeps the file's minute."""
    _, config = local_cluster._config_for(tmp_path, "127.0.0.1:6379", 2, 4)
    assert config["idle_timeout_minutes"] == 1
    path, config = local_cluster._config_for(tmp_path, "127.0.0.1:6379", 2, 4, idle_timeout_minutes=0.25)
    assert config["idle_timeout_minutes"] == 0.25
    assert local_cluster.validate_cluster_config(path)["idle_timeout_minutes"] == 0.25


def test_a_sweep_given_the_local_clusters_address_finds_its_token(tmp_path, monkeypatch):
    """`token_env`: a driver given the loopback address of this user's local cluster connects with its token;
    any other address, a cluster gone, or a token the environment names already: nothing."""
    monkeypatch.setattr(local_cluster, "REGISTRY", tmp_path / "registry")
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    temp = tmp_path / "cluster"
    temp.mkdir()
    address = "127.0.0.1:41234"
    (temp / local_cluster.STATE).write_text(json.dumps({"address": address}))
    token = local_cluster._make_token(temp)
    local_cluster._register(temp.resolve(), address)
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text()) == 64
    assert local_cluster.token_env(address) == {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token.resolve()),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }
    assert local_cluster.token_env("127.0.0.1:41235") == {}
    assert local_cluster.token_env("10.0.0.5:41234") == {}
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/elsewhere/token")
    assert local_cluster.token_env(address) == {}
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")
    local_cluster.down(temp, grace=1)  # no process names this folder: the record and the token go
    assert local_cluster.token_env(address) == {} and not token.exists()
