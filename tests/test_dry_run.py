"""`--dry-run` prints a sweep's plan (trials, resources per trial, GPU-hours, disk, upstream stages) from
the method's estimate and exits: every setting checked as for a real sweep, no Ray, nothing written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sweeps.engine import runner

ROOT = Path(__file__).resolve().parents[1]


def _scripts():
    """Every sweep script, with its first preset (a grid that needs no more flags) where it has one."""
    from trainables.methods import all_presets

    for path in sorted((ROOT / "sweeps").glob("*.py")):
        found = re.search(r'method="([\w-]+)"', path.read_text())
        if found:
            own = [p.name for p in all_presets().values() if p.script == f"sweeps/{path.name}"]
            flags = ["--preset", own[0]] if own else []
            yield pytest.param(path.stem, found.group(1), flags, id=path.stem)


def _dry_run(method, script, flags, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = runner.main(["--dry-run", "--storage-path", str(tmp_path / "runs"), *flags], method=method, prog=script)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_papers_grid_of_electra_layers_is_planned_without_ray_and_without_writing(
    tmp_path, data_dir, capsys, monkeypatch
):
    import ray

    ray.shutdown()  # an earlier test of this process may have left its local Ray running
    code, out, err = _dry_run("tmft", "electra_layers", ["--data-dir", str(data_dir)], tmp_path, capsys, monkeypatch)
    assert code == 0, err
    # the paper's four base models: 13 layers each (0..12), five seeds
    assert "trials: 260" in out
    assert re.search(r"each trial: 1 CPU and [\d.]+( to [\d.]+)? GPU \(auto, 24 GB GPUs\)", out), out
    hours = float(re.search(r"GPU-hours: ([\d.]+)", out).group(1))
    assert 0 < hours < 100
    disk = float(re.search(r"disk: about ([\d.]+) GB", out).group(1))
    assert disk > 1  # 260 best-dev folders of base-size models in float16
    assert "upstream stages: none" in out
    assert not ray.is_initialized()
    assert list(tmp_path.iterdir()) == []  # not the storage path, not a cache, nothing


def test_a_dry_run_names_the_upstream_stages_a_grid_needs(tmp_path, data_dir, capsys, monkeypatch):
    flags = ["--data-dir", str(data_dir), "--improvement", "ws,dapt", "--layers", "0,1", "--seeds", "0"]
    code, out, err = _dry_run("improvements", "improvements", flags, tmp_path, capsys, monkeypatch)
    assert code == 0, err
    assert "trials: 16" in out  # 4 models x 2 layers x 2 variants
    assert re.search(r"^    ws: 8 \(one per model and layer\)", out, re.M), out
    assert re.search(r"^    dapt: 4 \(one per model\)", out, re.M), out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("script", "method", "flags"), list(_scripts()))
def test_every_script_has_a_dry_run_that_writes_nothing(script, method, flags, tmp_path, data_dir, capsys, monkeypatch):
    code, out, err = _dry_run(method, script, ["--data-dir", str(data_dir), *flags], tmp_path, capsys, monkeypatch)
    assert code == 0, err
    assert out.startswith(f"Dry run of {script} (") and re.search(r"trials: \d+", out), out
    assert list(tmp_path.iterdir()) == []


def test_a_dry_run_refuses_what_a_sweep_refuses(tmp_path, data_dir, capsys, monkeypatch):
    code, out, err = _dry_run("tmft", "electra_layers", ["--epochs", "-1"], tmp_path, capsys, monkeypatch)
    assert code == 2 and "--epochs must be 0 or more, got -1" in err and out == ""
