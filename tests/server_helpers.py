"""A real MLflow tracking server for tests, started with the project's own command
(`python -m sweeps.mlflow_server`) in its own process group, so that stopping it ends the
server's worker too; and a minimal REST client (urllib) to read the runs back."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MlflowServer:
    """`start()` / `kill()` / `start()` again on the same port and store."""

    def __init__(self, storage: Path, port: int | None = None, extra: list[str] | None = None):
        self.storage = Path(storage)
        self.port = port or free_port()
        self.extra = list(extra or [])
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.log = self.storage / "mlflow-server.log"

    def start(self, timeout: float = 120.0) -> "MlflowServer":
        self.storage.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "sweeps.mlflow_server",
            "--storage-path",
            str(self.storage),
            "--port",
            str(self.port),
            "--workers",
            "1",
            *self.extra,
        ]
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                command,
                cwd=self.storage,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the MLflow server exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}"
                )
            if self.healthy():
                return self
            time.sleep(0.5)
        self.kill()
        raise RuntimeError(f"the MLflow server did not answer within {timeout:.0f} s:\n{self.log.read_text()[-3000:]}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.uri + "/health", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def kill(self) -> None:
        """SIGKILL the server's process group (the `mlflow server` process and its uvicorn worker)."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)
        self.process = None

    def rest(self, endpoint: str, body: dict | None = None, params: dict | None = None) -> dict:
        """GET (no body) or POST (body) `/api/2.0/mlflow/<endpoint>`; the decoded JSON answer."""
        url = f"{self.uri}/api/2.0/mlflow/{endpoint}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            url, data=data, headers={"Content-Type": "application/json"}, method="POST" if data is not None else "GET"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read().decode() or "{}")

    def runs(self, experiment: str = "test") -> tuple[list, list]:
        """(parents, children) of an experiment, as the REST API's run dicts, all pages."""
        experiment_id = self.rest("experiments/get-by-name", params={"experiment_name": experiment})["experiment"][
            "experiment_id"
        ]
        runs, token = [], None
        while True:
            page = self.rest(
                "runs/search",
                {"experiment_ids": [experiment_id], "max_results": 1000, **({"page_token": token} if token else {})},
            )
            runs += page.get("runs", [])
            token = page.get("next_page_token")
            if not token:
                break
        role = lambda run: tags(run).get("embsweep.role")
        return [r for r in runs if role(r) == "sweep"], [r for r in runs if role(r) == "trial"]

    def metric_history(self, run_id: str, key: str) -> list[dict]:
        return self.rest("metrics/get-history", params={"run_id": run_id, "metric_key": key, "max_results": 1000}).get(
            "metrics", []
        )


def tags(run: dict) -> dict:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def params(run: dict) -> dict:
    return {p["key"]: p["value"] for p in run["data"].get("params", [])}


def metrics(run: dict) -> dict:
    return {m["key"]: m["value"] for m in run["data"].get("metrics", [])}


def session_members(session: int) -> list[int]:
    """The pids of every process in a session (its leader's pid), read from /proc."""
    import contextlib
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(entry.name)) == session:
                    found.append(int(entry.name))
    return found
