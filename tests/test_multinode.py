"""A two-node Ray on this machine (a head and one worker, each `ray start --block` in its own
process group, token authentication on): a smoke sweep with --address runs trials on both
nodes (each run records its node id), then both nodes are stopped by their process groups."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from mlflow_helpers import runs_by_role
from sweep_helpers import run_script, sweep_args

from trainables.core.paths import PROJECT_ROOT

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_cli() -> str:
    return os.path.join(os.path.dirname(sys.executable), "ray")


@pytest.fixture
def two_nodes(tmp_path):
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run([_ray_cli(), "get-auth-token", "--generate"], env=env, capture_output=True)
    port = _free_port()
    address = f"127.0.0.1:{port}"
    common = ["--num-cpus=1", "--num-gpus=0", "--block", "--disable-usage-stats"]
    nodes = [
        subprocess.Popen(
            [
                _ray_cli(),
                "start",
                "--head",
                f"--port={port}",
                "--node-ip-address=127.0.0.1",
                "--include-dashboard=false",
                *common,
            ],
            env=env,
            start_new_session=True,
            stdout=open(tmp_path / "head.log", "w"),
            stderr=subprocess.STDOUT,
        )
    ]
    try:
        deadline = time.time() + 90
        while (
            subprocess.run([_ray_cli(), "status", f"--address={address}"], env=env, capture_output=True).returncode != 0
        ):
            assert time.time() < deadline, (tmp_path / "head.log").read_text()[-2000:]
            time.sleep(2)
        nodes.append(
            subprocess.Popen(
                [_ray_cli(), "start", f"--address={address}", "--node-ip-address=127.0.0.1", *common],
                env=env,
                start_new_session=True,
                stdout=open(tmp_path / "worker.log", "w"),
                stderr=subprocess.STDOUT,
            )
        )
        while "2 node" not in _status(address, env) and _count_nodes(address, env) < 2:
            assert time.time() < deadline, (tmp_path / "worker.log").read_text()[-2000:]
            time.sleep(2)
        yield address, env
    finally:
        for node in reversed(nodes):
            try:
                os.killpg(node.pid, signal.SIGTERM)
                node.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(node.pid, signal.SIGKILL)
        # `ray start --head` records its address for later `ray.init()` calls; it is gone now
        current = Path(tempfile.gettempdir(), "ray", "ray_current_cluster")
        if current.is_file() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()


def _status(address, env) -> str:
    return subprocess.run(
        [_ray_cli(), "status", f"--address={address}"], env=env, capture_output=True, text=True
    ).stdout


def _count_nodes(address, env) -> int:
    text = _status(address, env)
    active = text.split("Active:")[1].split("Pending:")[0] if "Active:" in text else ""
    return sum(1 for line in active.splitlines() if "node_" in line)


def test_sweep_runs_on_both_nodes(two_nodes, sweep_env, tiny_models):
    address, env = two_nodes
    flags = list(sweep_env["flags"])
    flags[flags.index("--cpus-per-trial") + 1] = "1"
    # With actor reuse, Tune hands a trial whose actor is still starting on the worker node to the
    # head's finished actor; on a loaded machine every tiny trial can then run on the head.
    flags.append("--no-reuse-actors")
    sweep = f"--layers 0,1 --seeds 0,1 --epochs 2 --max-train-samples 400 --name two-nodes --address {address}"
    run_script(["sweeps/electra_layers.py", *sweep_args(tiny_models["bert"], sweep, *flags)], PROJECT_ROOT, env)
    _, children = runs_by_role(sweep_env["uri"])
    assert len(children) == 4 and all(c.info.status == "FINISHED" for c in children)
    nodes = {c.data.tags["node_id"] for c in children}
    assert len(nodes) == 2, nodes
