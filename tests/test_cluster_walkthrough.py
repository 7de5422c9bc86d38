"""docs/cluster.md's commands, run as written on this machine where they can run: the head's `ray start` line of
cluster.yaml (with its dashboard, which needs ray[default]), the MLflow tracking server of section 3, the sweep
submitted through Ray's job API with an unquoted entrypoint, and its `--resume` (section 5). Only addresses,
ports and the shared folder are replaced, by a local port and a temporary folder; `--smoke-test` keeps it short.

Slow (a Ray head with its dashboard, an MLflow server and two jobs: about two minutes on two cores)."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import types
import urllib.request
from pathlib import Path

import pytest
import yaml
from server_helpers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "cluster.md"
NEEDS_DASHBOARD = "the Ray dashboard needs ray[default] (pip install -e '.[cluster]')"


def doc_commands(prefix: str) -> list[str]:
    """The commands of docs/cluster.md's code blocks that start with `prefix`, continuation lines joined."""
    blocks = re.findall(r"(?m)^```[\w-]*\n(.*?)^```", DOCS.read_text(), re.S)  # every fence, ```text too
    commands = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [re.sub(r"\s+", " ", c).strip() for c in commands if c.startswith(prefix)]


def cli(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


def wait_for(url: str, timeout: float, log: Path) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            assert time.time() < deadline, log.read_text()[-3000:] if log.exists() else url
            time.sleep(2)


@pytest.fixture
def head(tmp_path):
    """cluster.yaml's head `ray start` line, on local ports, in its own process group; the environment a node's
    ~/.bashrc gives (this venv's python first on PATH). No token authentication, as on a fresh node."""
    if importlib.util.find_spec("aiohttp_cors") is None:
        pytest.skip(NEEDS_DASHBOARD)
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    (line,) = [c for c in config["head_start_ray_commands"] if "ray start --head" in c]
    start = shlex.split(line.split(";", 1)[1])
    assert start[:3] == ["ray", "start", "--head"] and "--dashboard-port=8265" in start
    port, dashboard = free_port(), free_port()
    ports = {"--port": port, "--dashboard-port": dashboard, "--object-manager-port": free_port()}
    args = [a for a in start[3:] if not a.startswith("--autoscaling-config")]
    args = [f"{a.split('=')[0]}={ports[a.split('=')[0]]}" if a.split("=")[0] in ports else a for a in args]
    temp = Path("/tmp") / f"rayw{port}"  # Ray's socket paths must stay short
    env = {
        **os.environ,
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    log = tmp_path / "head.log"
    process = subprocess.Popen(
        # one GPU declared, as the tests' local Ray does (trials then run on the CPU build of torch)
        [cli("ray"), "start", "--head", *args, "--num-cpus=2", "--num-gpus=1", f"--temp-dir={temp}", "--block"],
        env=env,
        start_new_session=True,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(f"http://127.0.0.1:{dashboard}/api/version", 120, log)
        yield types.SimpleNamespace(url=f"http://127.0.0.1:{dashboard}", env=env)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture
def tracking_server(tmp_path, head):
    """Section 3's tracking server command, with the head's home and the shared folder in tmp_path."""
    command = doc_commands("ray exec cluster.yaml --tmux 'cd ~/embsweep && python -m sweeps.mlflow_server")[0]
    inner = shlex.split(command)[-1].split("&&", 1)[1]
    port = free_port()
    inner = inner.replace("$HOME", str(tmp_path / "home")).replace("/mnt/shared", str(tmp_path / "shared"))
    inner = inner.replace("--port 5000", f"--port {port}")
    argv = shlex.split(inner)
    assert argv[:3] == ["python", "-m", "sweeps.mlflow_server"] and "--backend-store-uri" in argv
    assert not any("/mnt/shared" in a and a.endswith(".db") for a in shlex.split(command))  # not SQLite on NFS
    (tmp_path / "home").mkdir()
    log = tmp_path / "mlflow.log"
    process = subprocess.Popen(
        [sys.executable, *argv[1:]], cwd=ROOT, env=head.env, start_new_session=True, stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(f"http://127.0.0.1:{port}/health", 120, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def localised(command: str, head, server: str, shared: Path, data_dir, submission: str) -> list[str]:
    argv = shlex.split(command)
    entry = argv.index("--")
    # the entrypoint is the command itself, not one quoted string that the CLI would quote again
    assert argv[entry + 1 : entry + 3] == ["python", "sweeps/electra_layers.py"], argv
    assert argv[argv.index("--working-dir") + 1] == "."
    text = " ".join(shlex.quote(a) for a in argv)
    text = text.replace("http://127.0.0.1:8265", head.url).replace("http://127.0.0.1:5000", server)
    text = text.replace("/mnt/shared", str(shared))
    argv = shlex.split(text)
    entry = argv.index("--")
    job = [*argv[1:entry], "--submission-id", submission, *argv[entry:]]
    return [cli("ray"), *job, "--smoke-test", "--data-dir", str(data_dir)]


def run_job(argv: list[str], head, submission: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, cwd=ROOT, env=head.env, capture_output=True, text=True, timeout=900)
    finally:  # a job still running (this test failed or timed out) is stopped before its head goes
        stop = [cli("ray"), "job", "stop", "--address", head.url, submission]
        subprocess.run(stop, env=head.env, capture_output=True, timeout=120)


def test_the_walkthrough_runs_a_sweep_through_the_job_api_and_resumes_it(head, tracking_server, tmp_path, data_dir):
    from mlflow.tracking import MlflowClient

    shared = tmp_path / "shared"
    submit = doc_commands("ray job submit --address http://127.0.0.1:8265 --working-dir . -- python sweeps/")
    assert len(submit) >= 2, submit  # section 3's sweep and section 5's resume
    first, resume = submit[0], next(c for c in submit if "--resume" in c)
    done = run_job(localised(first, head, tracking_server, shared, data_dir, "sweep"), head, "sweep")
    assert done.returncode == 0 and "succeeded" in done.stdout, (done.stdout + done.stderr)[-4000:]
    client = MlflowClient(tracking_server)
    (experiment,) = [e for e in client.search_experiments() if e.name != "Default"]
    runs = client.search_runs([experiment.experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert children and all(r.info.status == "FINISHED" for r in children), [r.info.status for r in runs]
    assert (shared / "runs" / "electra-layers").is_dir()

    again = run_job(localised(resume, head, tracking_server, shared, data_dir, "resume"), head, "resume")
    assert again.returncode == 0 and "succeeded" in again.stdout, (again.stdout + again.stderr)[-4000:]
    after = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_id for r in after) == sorted(r.info.run_id for r in runs)  # nothing rerun or added
    listed = subprocess.run(
        [cli("ray"), "job", "list", "--address", head.url], env=head.env, capture_output=True, text=True, timeout=120
    )
    assert listed.stdout.count("SUCCEEDED") >= 2, listed.stdout[-3000:]
