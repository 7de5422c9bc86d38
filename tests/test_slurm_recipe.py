"""cluster/slurm.sbatch run as SLURM would run it, on this machine: its two nodes are this machine twice, through a
stand-in `srun` (runs the command here, dropping SLURM's options) and `scontrol` (names two nodes). Everything else
is the script's own: the Python and torch check on every node, `ray start --head` and `ray start --address` with
`--block`, the wait for both nodes, the MLflow server on the first node, the sweep's driver with the address,
storage path and tracking URI it adds, and the store copied to the shared folder at the end.

Slow (a two-node Ray and a smoke sweep: about two minutes on two cores)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from server_helpers import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

SRUN = """#!/bin/bash
# SLURM's srun, for a test: drop its options (and the host after -w), run the command here
while [ "$#" -gt 0 ]; do
    case "$1" in
        -w) shift 2 ;;
        -*) shift ;;
        *) break ;;
    esac
done
exec "$@"
"""
SCONTROL = """#!/bin/bash
printf '%s\\n' node0 node1
"""


def test_the_sbatch_script_starts_ray_on_its_nodes_and_runs_the_sweep(tmp_path, data_dir):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    storage = tmp_path / "shared"
    port = free_port()
    local = Path("/tmp") / f"sl{port}"  # the job's TMPDIR, where Ray keeps its sockets: their paths must stay short
    local.mkdir()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "EMBSWEEP_DIR": str(ROOT),
        "VENV": sys.prefix,
        "STORAGE": str(storage),
        "TMPDIR": str(local),
        "RAY_PORT": str(port),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "node[0-1]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_CPUS_PER_TASK": "1",
        "SLURM_GPUS_PER_TASK": "0",
        "PYTHONPATH": str(ROOT),
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    sweep = ["python", "sweeps/electra_layers.py", "--smoke-test", "--data-dir", str(data_dir), "--name", "slurm"]
    sweep += ["--gpus-per-trial", "0"]  # the nodes have no GPU here
    log = tmp_path / "job.out"
    job = subprocess.Popen(
        ["bash", str(ROOT / "cluster" / "slurm.sbatch"), *sweep],
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        code = job.wait(timeout=900)
    finally:  # what SLURM does at the job's end: every process of it goes, the Ray nodes with them
        for sig in (signal.SIGTERM, signal.SIGKILL):  # Ray's processes get a moment to stop, then go anyway
            try:
                os.killpg(job.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(10)
        shutil.rmtree(local, ignore_errors=True)
    out = log.read_text()
    assert code == 0, out[-4000:]
    assert (storage / "runs" / "slurm").is_dir()
    assert (storage / "mlflow-4242.db").stat().st_size > 0  # the job's MLflow store, kept in the shared folder
    assert "Ray runtime started" in out and "Connected to Ray cluster" in out or "node_" in out


def test_the_script_refuses_to_start_without_a_sweep(tmp_path):
    done = subprocess.run(
        ["bash", str(ROOT / "cluster" / "slurm.sbatch")], capture_output=True, text=True, env={**os.environ}
    )
    assert done.returncode == 2 and "give the sweep's command" in done.stderr
