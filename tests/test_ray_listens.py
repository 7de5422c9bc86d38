"""No Ray on the network unless a cluster is meant: a sweep run without `--address` starts a local Ray whose
processes (GCS, raylet, workers, agents) listen on the loopback address only, with Ray's token authentication
on and its token readable by its owner only; `RAY_AUTH_MODE=disabled` is refused for it. (The local cluster:
tests/test_local_cluster.py.)"""

from __future__ import annotations

import ipaddress
import os
import signal
import stat
import subprocess
import sys
import time

import psutil
import pytest
from sweep_helpers import wait_for

from trainables.core.paths import PROJECT_ROOT

SWEEP = ["--smoke-test", "--simulate", "--simulate-seconds", "60", "--epochs", "1", "--layers", "0", "--seeds", "0"]


NOT_TRIALS = ("IDLE", "RuntimeEnvAgent", "DashboardAgent")  # Ray's agents, and workers with nothing to do


def listening(pids: set[int]) -> dict[int, list[str]]:
    """The addresses each of `pids` listens on (TCP and UDP bound sockets)."""
    found = {}
    for connection in psutil.net_connections("inet"):
        if connection.pid in pids and (connection.status == psutil.CONN_LISTEN or not connection.raddr):
            found.setdefault(connection.pid, []).append(connection.laddr.ip)
    return found


def is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def ray_processes(root: int) -> dict[int, str]:
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return {}
    names = {}
    for child in children:
        try:  # a worker's title (its first word: `ray::ResourceTrainable.train`, `ray::IDLE`), else its name
            names[child.pid] = (child.cmdline() or [""])[0].split(" ")[0] or child.name()
        except psutil.Error:
            pass
    return names


@pytest.mark.sweep  # a whole sweep on its own local Ray
def test_a_local_sweeps_ray_listens_on_loopback_only_with_token_authentication(tmp_path, data_dir):
    home = tmp_path / "home"  # Ray's default token file goes to $HOME/.ray: this test's own
    home.mkdir()
    mine = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    env = {k: v for k, v in os.environ.items() if k not in mine}  # as a user's shell: Ray's defaults
    env.update(HOME=str(home), PYTHONPATH=str(PROJECT_ROOT))
    argv = [*SWEEP, "--gpus-per-trial", "0", "--data-dir", str(data_dir), "--storage-path", str(tmp_path / "runs")]
    log = tmp_path / "driver.log"
    with open(log, "w") as out:
        driver = subprocess.Popen(
            [sys.executable, str(PROJECT_ROOT / "sweeps" / "electra_layers.py"), *argv],
            cwd=tmp_path,
            env=env,
            start_new_session=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def trial_running():  # the GCS, the raylet and the trial's worker process all up and listening
        names = ray_processes(driver.pid)
        sockets = listening(set(names))
        up = {names[pid] for pid in sockets}
        trial = any(n.startswith("ray::") and n[len("ray::") :] not in NOT_TRIALS for n in up)  # a busy worker
        if trial and any(n.endswith("gcs_server") for n in up) and any(n.endswith("raylet") for n in up):
            return names, sockets
        return None

    try:
        names, sockets = wait_for(trial_running, driver, log, timeout=300, what="the trial running", every=1)
        gcs = next(pid for pid, name in names.items() if name.endswith("gcs_server"))
        auth_mode = psutil.Process(gcs).environ().get("RAY_AUTH_MODE")
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        time.sleep(1)
    exposed = {f"{names[pid]} ({pid})": ips for pid, ips in sockets.items() if not all(map(is_loopback, ips))}
    assert not exposed, f"Ray processes listening beyond the loopback address: {exposed}"
    assert auth_mode == "token"
    token = home / ".ray" / "auth_token"
    assert token.is_file() and stat.S_IMODE(token.stat().st_mode) == 0o600


@pytest.mark.sweep  # the sweep script plans up to its refusal: over 3 s
def test_a_local_sweep_with_ray_authentication_disabled_is_refused(tmp_path, data_dir, monkeypatch, capsys):
    from sweeps.electra_layers import main

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    storage = tmp_path / "runs"
    assert main([*SWEEP, "--data-dir", str(data_dir), "--storage-path", str(storage)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "RAY_AUTH_MODE=disabled: the sweep's local Ray keeps Ray's token" in error
    assert not storage.exists()
