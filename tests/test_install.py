"""embsweep as a user installs it, away from a checkout: the wheel in a fresh venv runs a smoke sweep, a
report on it and every script's `--help` from a folder outside the checkout; and installing the project
into an environment that already has an allowed torch (the lowest) leaves that torch in place.

Both tests are slow (a smoke sweep; pip resolving every dependency). The wheel's venv gets its
dependencies from this environment's site-packages through a .pth file (no download), and none of
the checkout: PYTHONPATH is dropped and the commands run from an empty folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sweeps", "trainables", "analysis")

pytestmark = pytest.mark.slow


def outside_env() -> dict:
    """This environment's variables without those that would put the checkout or another Ray in reach."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "RAY_ADDRESS")}


def pip(python: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """This environment's pip acting on the venv of `python` (pip's --python), run from that venv's
    folder: from the checkout, its `embsweep.egg-info` would count as embsweep installed."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), *args],
        check=True,
        capture_output=True,
        text=True,
        cwd=python.parents[1],
        env=outside_env(),
        timeout=timeout,
    )


def fresh_venv(folder: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    return folder / "bin" / "python"


def site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        env=outside_env(),
    )
    return Path(out.stdout.strip())


def build_wheel(out: Path, scratch: Path) -> Path:
    """The wheel, built from a copy of the sources (the build writes nothing into the checkout)."""
    source = scratch / "source"
    for name in PACKAGES:
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        cwd=scratch,
        env=outside_env(),
    )
    (wheel,) = out.glob("embsweep-*.whl")
    return wheel


def test_the_wheel_runs_a_smoke_sweep_a_report_and_every_help_outside_the_checkout(tmp_path, data_dir):
    wheel = build_wheel(tmp_path / "dist", tmp_path)
    python = fresh_venv(tmp_path / "venv")
    pip(python, "install", "--no-deps", "--no-index", "-q", str(wheel))
    installed = site_packages(python)
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (installed / "embsweep-deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = outside_env()
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(args, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=timeout)

    found = run(str(python), "-c", "import sweeps, trainables, analysis; print(sweeps.__file__, trainables.__file__)")
    assert found.returncode == 0, found.stderr
    assert all(Path(f).is_relative_to(installed) for f in found.stdout.split()), found.stdout

    scripts = sorted(p.stem for p in (installed / "sweeps").glob("*.py") if "__main__" in p.read_text())
    assert {"electra_layers", "improvements", "evaluate", "mlflow_server", "cluster_config"} <= set(scripts)
    commands = [[str(python), "-m", f"sweeps.{s}"] for s in scripts]
    commands += [[str(python), "-m", "analysis"], [str(python.parent / "embsweep-assets")]]
    for command in commands:
        shown = run(*command, "--help")
        assert shown.returncode == 0 and "usage" in shown.stdout, (command, shown.stdout[-500:], shown.stderr[-2000:])

    for command in (["sweeps.local_cluster", "up"], ["analysis", "docs", "--check"]):  # need the checkout's files
        refused = run(str(python), "-m", *command)
        assert refused.returncode == 2 and " checkout" in refused.stderr, (command, refused.stderr[-2000:])
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr[-2000:]
    assert not list(elsewhere.iterdir())

    uri = f"sqlite:///{elsewhere / 'mlflow.db'}"
    smoke = run(
        str(python),
        *("-m", "sweeps.electra_layers", "--smoke-test", "--data-dir", str(data_dir)),
        *("--storage-path", str(elsewhere / "runs"), "--mlflow-uri", uri),
        timeout=900,
    )
    assert smoke.returncode == 0, smoke.stdout[-2000:] + smoke.stderr[-4000:]
    last = [line for line in smoke.stdout.splitlines() if "trials " in line][-1]
    assert re.search(r"trials (\d+)/\1 done, 0 running, 0 pending, 0 errored", last), smoke.stdout[-2000:]
    report = run(str(python), "-m", "analysis", "report", "--mlflow-uri", uri, "--out", str(elsewhere / "report"))
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-4000:]
    summary = (elsewhere / "report" / "summary.csv").read_text().splitlines()
    assert len(summary) >= 2 and (elsewhere / "report" / "README.md").is_file()


def lowest_torch() -> str:
    for line in (ROOT / ".ci" / "constraints-lowest.txt").read_text().splitlines():
        if line.startswith("torch=="):
            return line.split("==")[1]
    raise AssertionError(".ci/constraints-lowest.txt pins no torch")


def test_installing_beside_the_lowest_torch_keeps_that_torch(tmp_path):
    """A lab's environment with its own torch build (here the lowest allowed version, as the package
    index or the machine's wheel cache has it): pip's plan for installing the project keeps it."""
    python = fresh_venv(tmp_path / "venv")
    pip(python, "install", "--no-deps", "-q", f"torch=={lowest_torch()}")
    before = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('torch'))"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=outside_env(),
    ).stdout.strip()
    assert before.split("+")[0] == lowest_torch()
    report = tmp_path / "report.json"
    wheel = build_wheel(tmp_path / "dist", tmp_path)
    pip(python, "install", "--dry-run", "-q", "--report", str(report), str(wheel), timeout=900)
    planned = {
        i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]
    }
    assert "embsweep" in planned and "ray" in planned and "transformers" in planned, sorted(planned)
    assert "torch" not in planned, f"pip would replace torch {before} with {planned.get('torch')}"
