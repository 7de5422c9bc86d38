"""cluster/slurm.sbatch run as SLURM would run it, on this machine, through stand-ins for SLURM's commands:
`sbatch` (runs the script with the SLURM_* variables its #SBATCH lines and options set, as the job's batch shell),
`srun` (runs the command here, dropping SLURM's options), `scontrol` (names two nodes). The node check's torch is a
stand-in that sees the GPUs a test gives it (this machine has none); Ray and the sweep are real, with the GPUs
`--num-gpus` declares (trials run on the CPU build of torch, as in the tests' local Ray).

- fast: the GPUs each node gets from `--gpus-per-task`, `--gres=gpu:N`, SLURM_JOB_GPUS or CUDA_VISIBLE_DEVICES
  (with a stand-in `ray`); a job without GPUs whose trials need them, and a node whose torch sees fewer GPUs than
  the job gives it: one line each, before Ray starts.
- slow: docs/cluster.md's `sbatch` command as written (plus `--smoke-test --data-dir`): a two-node Ray, the MLflow
  server, the sweep, and the run history in $STORAGE/mlflow.db; and the same job ended by the time limit's signals
  (USR1 from `--signal=B:USR1@300`, or SIGTERM to every process of the job, then SIGKILL after SLURM's KillWait):
  the history is on the storage path, and the sweep continues with `--resume`."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from server_helpers import free_port, session_members

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "cluster" / "slurm.sbatch"
DOCS = ROOT / "docs" / "cluster.md"

SBATCH = r'''#!/usr/bin/env python3
"""SLURM's sbatch, for a test: the job's variables from the script's #SBATCH lines and this command's options
(the options win), then the script runs here as the job's batch shell, in the foreground."""
import os, re, sys

args = sys.argv[1:]
options = []
while args and args[0].startswith("-"):
    options.append(args.pop(0))
script, rest = args[0], args[1:]
lines = [l[len("#SBATCH "):].strip() for l in open(script) if l.startswith("#SBATCH ")]
values = {}
for option in lines + options:
    key, _, value = option.lstrip("-").partition("=")
    values[key] = value
env = dict(os.environ)
nodes = int(values.get("nodes", "1"))
env.update(
    SLURM_JOB_ID=env.get("SLURM_JOB_ID", "4242"),
    SLURM_JOB_NUM_NODES=str(nodes),
    SLURM_JOB_NODELIST=f"node[0-{nodes - 1}]",
    SLURM_CPUS_PER_TASK=values.get("cpus-per-task", "1"),
)
if "gpus-per-task" in values:
    env["SLURM_GPUS_PER_TASK"] = values["gpus-per-task"]
gres = re.fullmatch(r"gpu(?::[\w-]+)?:(\d+)", values.get("gres", ""))
if gres:
    env["SLURM_GPUS_ON_NODE"] = gres.group(1)
    env["SLURM_JOB_GPUS"] = ",".join(str(i) for i in range(int(gres.group(1))))
os.execvpe("bash", ["bash", script, *rest], env)
'''
SRUN = """#!/bin/bash
# SLURM's srun, for a test: drop its options (and the host after -w), run the command here; the node check
# (`python -c`) sees the stand-in torch of $FAKE_TORCH, when given
while [ "$#" -gt 0 ]; do
    case "$1" in
        -w) shift 2 ;;
        -*) shift ;;
        *) break ;;
    esac
done
echo "srun $*" >> "$CALLS"
if [ "$1 $2" = "python -c" ] && [ -n "${FAKE_TORCH:-}" ]; then
    export PYTHONPATH="$FAKE_TORCH${PYTHONPATH:+:$PYTHONPATH}"
fi
exec "$@"
"""
SCONTROL = """#!/bin/bash
printf '%s\\n' node0 node1
"""
RAY = """#!/bin/bash
# Ray's CLI, for the fast tests: `ray start` recorded, `ray status` answers with both nodes up
echo "ray $*" >> "$CALLS"
if [ "$1" = status ]; then printf 'Active:\\n 1 node_a\\n 1 node_b\\nPending:\\n'; fi
"""
FAKE_TORCH = """__version__ = "2.13.0+cu130"


class cuda:
    @staticmethod
    def is_available():
        return {gpus} > 0

    @staticmethod
    def device_count():
        return {gpus}
"""


def stand_ins(tmp_path: Path, gpus_seen: int, fake_ray: bool) -> dict:
    """The environment of a job on this machine. With `fake_ray`, the job's VENV is a folder whose python is this
    one and whose ray is the stand-in (the script puts $VENV/bin first on PATH)."""
    bin_dir, venv = tmp_path / "bin", tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(exist_ok=True)
    scripts = {"sbatch": SBATCH, "srun": SRUN, "scontrol": SCONTROL}
    if fake_ray:
        scripts |= {"../venv/bin/ray": RAY, "../venv/bin/python": f'#!/bin/bash\nexec {sys.executable} "$@"\n'}
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    torch = tmp_path / "fake-torch" / "torch"
    torch.mkdir(parents=True, exist_ok=True)
    (torch / "__init__.py").write_text(FAKE_TORCH.format(gpus=gpus_seen))
    venv_bin = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "CUDA_VISIBLE_DEVICES"}
    return {
        **env,
        "PATH": f"{bin_dir}:{venv_bin}:{os.environ['PATH']}",
        "CALLS": str(tmp_path / "calls"),
        "FAKE_TORCH": str(torch.parent),
        "EMBSWEEP_DIR": str(ROOT),
        "VENV": str(venv) if fake_ray else sys.prefix,
        "RAY_PORT": str(free_port()),
        "STORAGE": str(tmp_path / "shared"),
        "PYTHONPATH": str(ROOT),
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def calls(env: dict) -> list[str]:
    path = Path(env["CALLS"])
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize(
    "options, variables",
    [
        ([], {}),  # the script's own #SBATCH --gpus-per-task=4
        (["--gres=gpu:4"], {"SLURM_GPUS_PER_TASK": ""}),
        ([], {"SLURM_GPUS_PER_TASK": "", "SLURM_JOB_GPUS": "0,1,2,3"}),
        ([], {"SLURM_GPUS_PER_TASK": "", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}),
        (["--gpus-per-task=a100:4"], {}),
    ],
    ids=["gpus-per-task", "gres", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES", "typed"],
)
def test_each_way_of_asking_for_gpus_gives_every_node_its_gpus(tmp_path, options, variables):
    env = stand_ins(tmp_path, gpus_seen=4, fake_ray=True)
    env["MLFLOW_URI"] = "http://mlflow.example.org:5000"  # the group's server: none started here
    script = tmp_path / "job.sbatch"  # the script with an empty SLURM_GPUS_PER_TASK, as a --gres site leaves it
    text = SCRIPT.read_text()
    if "SLURM_GPUS_PER_TASK" in variables:
        text = text.replace("#SBATCH --gpus-per-task=4\n", "")
    script.write_text(text)
    env.update({k: v for k, v in variables.items() if v})
    done = subprocess.run(
        ["sbatch", *options, str(script), "true"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    starts = [c for c in calls(env) if c.startswith("ray start")]
    assert len(starts) == 2 and all("--num-gpus=4" in c for c in starts), starts


def test_a_job_without_gpus_whose_trials_need_them_stops_before_anything_starts(tmp_path):
    env = stand_ins(tmp_path, gpus_seen=0, fake_ray=True)
    script = tmp_path / "job.sbatch"
    script.write_text(SCRIPT.read_text().replace("#SBATCH --gpus-per-task=4\n", ""))
    sweep = ["python", "sweeps/electra_layers.py", "--name", "electra-layers", "--gpus-per-trial", "auto"]
    done = subprocess.run(["sbatch", str(script), *sweep], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "slurm.sbatch: this job has no GPUs (SLURM_GPUS_PER_TASK, SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS and "
        "CUDA_VISIBLE_DEVICES are empty) but the sweep's trials ask for GPUs: request them (#SBATCH "
        "--gpus-per-task=N or --gres=gpu:N), or run the sweep with --gpus-per-trial 0"
    ]
    assert calls(env) == [] and not (tmp_path / "shared").exists()
    for cpu in (["--gpus-per-trial", "0"], ["--gpus-per-trial=0"]):  # CPU trials need none
        env["MLFLOW_URI"] = "http://mlflow.example.org:5000"
        done = subprocess.run(["sbatch", str(script), "true", *cpu], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_a_node_whose_torch_sees_fewer_gpus_than_the_job_gives_stops_before_ray(tmp_path):
    import torch  # its version as the script prints it: a CUDA build's has a local part (2.14.1+cu130)

    env = stand_ins(tmp_path, gpus_seen=0, fake_ray=True)
    env.pop("FAKE_TORCH")  # this machine's own torch, which sees no GPU
    done = subprocess.run(["sbatch", str(SCRIPT), "true"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.startswith("slurm.sbatch")]
    assert lines and set(lines) == {
        f"slurm.sbatch: on {os.uname().nodename} torch {torch.__version__} sees 0 GPU(s) of the 4 "
        f"the job gives each node: install torch's CUDA build in {tmp_path / 'venv'}, or request GPUs this node has "
        "(--gpus-per-task or --gres=gpu:N)"
    }, done.stderr
    assert not any(c.startswith("ray start") for c in calls(env))


def test_the_script_refuses_to_start_without_a_sweep(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env={**os.environ})
    assert done.returncode == 2 and "give the sweep's command" in done.stderr


# --- slow: a two-node Ray, the MLflow server and a sweep ---


def docs_sbatch() -> list[str]:
    """docs/cluster.md's sbatch command, as written (variables set before it included)."""
    fenced = re.findall(r"(?m)^[ \t]*```([\w-]*)[^\n]*\n(.*?)^[ \t]*```", DOCS.read_text(), re.S)
    blocks = [block for fence, block in fenced if fence != "text"]  # a diagram or an output is ```text
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    (command,) = [line.split("#", 1)[0].strip() for line in lines if "sbatch cluster/slurm.sbatch" in line]
    return shlex.split(command)


class Job:
    """The docs' sbatch command as the job's batch shell, in a session of its own (what SLURM ends at the job's end)."""

    def __init__(self, tmp_path: Path, data_dir, extra: list[str]):
        self.env = stand_ins(tmp_path, gpus_seen=4, fake_ray=False)
        self.port = free_port()
        self.local = Path("/tmp") / f"sl{self.port}"  # the job's TMPDIR: Ray's socket paths must stay short
        self.env.update(TMPDIR=str(self.local), RAY_PORT=str(self.port))
        command = docs_sbatch()
        assigned = [word for word in command if re.fullmatch(r"[A-Z_]+=.*", word)]
        command = command[len(assigned) :]
        assert command[:2] == ["sbatch", "cluster/slurm.sbatch"], command
        for word in assigned:  # the docs' variables, with the shared folder in tmp_path
            name, value = word.split("=", 1)
            value = value.replace("$HOME/embsweep-runs", self.env["STORAGE"])
            self.env[name] = value.replace("$HOME/embsweep", str(ROOT))
        self.storage = Path(self.env["STORAGE"])
        self.store = self.local / f"embsweep-{self.env.get('SLURM_JOB_ID', '4242')}" / "mlflow.db"  # the node's copy
        self.log = tmp_path / "job.out"
        self.local.mkdir()
        self.process = subprocess.Popen(
            [*command, "--smoke-test", "--data-dir", str(data_dir), *extra],
            cwd=ROOT,
            env=self.env,
            start_new_session=True,
            stdout=open(self.log, "w"),
            stderr=subprocess.STDOUT,
        )

    def processes(self) -> list[int]:
        return session_members(self.process.pid)

    def signal_all(self, number) -> None:
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, number)

    def end(self) -> None:
        """SLURM at the job's end: every process of it goes, the Ray nodes with them."""
        for number in (signal.SIGTERM, signal.SIGKILL):
            if not self.processes():
                break
            self.signal_all(number)
            deadline = time.time() + 10
            while self.process.poll() is None or self.processes():  # poll(): the batch shell is no zombie
                if time.time() > deadline:
                    break
                time.sleep(0.5)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        shutil.rmtree(self.local, ignore_errors=True)

    def output(self) -> str:
        return self.log.read_text()


def history(database: Path) -> dict[str, str]:
    """run name -> status of a SQLite MLflow store ({} while it has none)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
            return dict(db.execute("select name, status from runs"))
    except sqlite3.OperationalError:
        return {}


@pytest.mark.slow
def test_the_docs_sbatch_command_runs_the_sweep_and_keeps_its_history_on_the_storage_path(tmp_path, data_dir):
    job = Job(tmp_path, data_dir, [])
    try:
        code = job.process.wait(timeout=900)
    finally:
        job.end()
    out = job.output()
    assert code == 0, out[-4000:]
    assert (job.storage / "runs" / "electra-layers").is_dir()
    runs = history(job.storage / "mlflow.db")  # the job's node-local store is gone; its history is here
    assert runs and set(runs.values()) == {"FINISHED"}, runs
    assert sum(c.startswith("srun ray start") for c in calls(job.env)) == 2
    assert all("--num-gpus=4" in c for c in calls(job.env) if c.startswith("srun ray start"))


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["USR1 before the time limit", "TERM at the time limit"])
def test_a_job_ended_by_its_time_limit_keeps_its_history_on_the_storage_path(tmp_path, data_dir, ending):
    job = Job(tmp_path, data_dir, ["--simulate", "--simulate-seconds", "120"])
    try:
        deadline = time.time() + 600
        while "RUNNING" not in [s for name, s in history(job.store).items() if name != "electra-layers"]:
            assert time.time() < deadline and job.process.poll() is None, job.output()[-4000:]
            time.sleep(2)
        if ending.startswith("USR1"):  # `--signal=B:USR1@300`: the batch shell only
            job.process.send_signal(signal.SIGUSR1)
            job.process.wait(timeout=300)
        else:  # the limit: SIGTERM to every process of the job, SIGKILL after KillWait (30 s)
            job.signal_all(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                job.process.wait(timeout=30)
    finally:
        job.end()
    out = job.output()
    assert not job.local.exists()  # the node's disk, with the store's working copy, is gone
    runs = history(job.storage / "mlflow.db")
    assert "electra-layers" in runs, (runs, out[-4000:])  # the sweep's parent run is on the storage path
    assert len(runs) > 1, runs  # and its trials' runs
    if ending.startswith("USR1"):
        assert "slurm.sbatch: USR1 received: stopping the sweep" in out
        assert re.search(r"^copied the MLflow store to .*mlflow\.db .*SIGTERM received", out, re.M), out[-3000:]
