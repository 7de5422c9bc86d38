"""A two-node Ray on this machine for the slow tests: a head and one worker, each `ray start --block`
in its own process group (token authentication on), so that a node can be stopped alone (its
process group killed, as when a machine goes away) and started again."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_cli() -> str:
    return os.path.join(os.path.dirname(sys.executable), "ray")


class TwoNodeRay:
    """`start()`, then `address`; `stop_worker()` / `start_worker()`; `stop()` ends both."""

    def __init__(self, logs: Path, env: dict | None = None, cpus_per_node: int = 1):
        self.logs = Path(logs)
        self.env = {**(env or os.environ), "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"}
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.common = [f"--num-cpus={cpus_per_node}", "--num-gpus=0", "--block", "--disable-usage-stats"]
        self.head = None
        self.worker = None

    def _start(self, args: list[str], log: str) -> subprocess.Popen:
        return subprocess.Popen(
            [_ray_cli(), "start", *args, "--node-ip-address=127.0.0.1", *self.common],
            env=self.env,
            start_new_session=True,
            stdout=open(self.logs / log, "a"),
            stderr=subprocess.STDOUT,
        )

    def start(self, timeout: float = 90) -> "TwoNodeRay":
        subprocess.run([_ray_cli(), "get-auth-token", "--generate"], env=self.env, capture_output=True)
        self.head = self._start(["--head", f"--port={self.port}", "--include-dashboard=false"], "head.log")
        deadline = time.time() + timeout
        while self._run_status().returncode != 0:
            assert time.time() < deadline, (self.logs / "head.log").read_text()[-2000:]
            time.sleep(2)
        return self.start_worker(timeout)

    def start_worker(self, timeout: float = 90) -> "TwoNodeRay":
        self.worker = self._start([f"--address={self.address}"], "worker.log")
        deadline = time.time() + timeout
        while self.nodes() < 2:
            assert time.time() < deadline, (self.logs / "worker.log").read_text()[-2000:]
            time.sleep(2)
        return self

    def stop_worker(self) -> None:
        """The worker node goes away at once (SIGKILL to its process group: raylet, workers, all)."""
        _kill(self.worker, signal.SIGKILL)
        self.worker = None

    def stop(self) -> None:
        # SIGTERM to a head's group ends its GCS first; `ray start --block` then waits 30 s to drain the
        # node through that GCS before it exits: whatever is left after a few seconds is killed
        for node in (self.worker, self.head):
            _kill(node, signal.SIGTERM, grace=5)
        # `ray start --head` records its address for later `ray.init()` calls; it is gone now
        current = Path(tempfile.gettempdir(), "ray", "ray_current_cluster")
        if current.is_file() and current.read_text().strip().endswith(f":{self.port}"):
            current.unlink()

    def _run_status(self) -> subprocess.CompletedProcess:
        return subprocess.run(
            [_ray_cli(), "status", f"--address={self.address}"], env=self.env, capture_output=True, text=True
        )

    def nodes(self) -> int:
        text = self._run_status().stdout
        active = text.split("Active:")[1].split("Pending:")[0] if "Active:" in text else ""
        return sum(1 for line in active.splitlines() if "node_" in line)


def _kill(node, sig, grace: float = 30) -> None:
    if node is None:
        return
    try:
        os.killpg(node.pid, sig)
        node.wait(timeout=grace)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(node.pid, signal.SIGKILL)
        node.wait()
