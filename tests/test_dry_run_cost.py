"""`--dry-run --instance-type`: the plan's GPU-hours priced on an AWS GPU instance type, on demand and on spot, from
the dated price table of sweeps/engine/instances.py, whose source the line names."""

from __future__ import annotations

import re

import pytest

from sweeps.engine import instances, runner


def _dry_run(flags, tmp_path, data_dir, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["--dry-run", "--storage-path", str(tmp_path / "runs"), "--data-dir", str(data_dir), *flags]
    code = runner.main(argv, method="tmft", prog="electra_layers")
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("name", ["g5.12xlarge", "g4dn.xlarge", "p5.48xlarge"])
def test_the_cost_is_the_gpu_hours_at_the_instance_types_price_per_gpu(name, tmp_path, data_dir, capsys, monkeypatch):
    code, out, err = _dry_run(["--instance-type", name], tmp_path, data_dir, capsys, monkeypatch)
    assert code == 0, err
    hours = float(re.search(r"GPU-hours: ([\d.]+)", out).group(1))
    cost = re.search(rf"cost on {re.escape(name)} .*: \$([\d,.]+) on demand .*, about \$([\d,.]+) on spot", out)
    assert cost, out
    on_demand, spot = (float(x.replace(",", "")) for x in cost.groups())
    # reference: the table's hourly price shared by the type's GPUs, for the printed (rounded) GPU-hours
    t = instances.TYPES[name]
    assert on_demand == pytest.approx(hours * t.on_demand / t.gpus, abs=0.01 + 0.005 * t.on_demand / t.gpus)
    assert spot == pytest.approx(hours * t.spot / t.gpus, abs=0.01 + 0.005 * t.spot / t.gpus)
    assert spot < on_demand
    assert f"prices: {instances.PRICE_SOURCE}" in out and instances.PRICES_AS_OF in out
    assert list(tmp_path.iterdir()) == []


def test_without_an_instance_type_no_cost_is_printed(tmp_path, data_dir, capsys, monkeypatch):
    code, out, err = _dry_run([], tmp_path, data_dir, capsys, monkeypatch)
    assert code == 0, err
    assert "cost on" not in out and "GPU-hours:" in out


def test_an_unknown_instance_type_is_refused_with_the_known_ones(tmp_path, data_dir, capsys, monkeypatch):
    code, out, err = _dry_run(["--instance-type", "g5.13xlarge"], tmp_path, data_dir, capsys, monkeypatch)
    assert code == 2 and out == ""
    assert "--instance-type must be one of" in err and "g5.12xlarge" in err and "g5.13xlarge" in err


def test_the_price_table_is_dated_sourced_and_consistent():
    assert re.fullmatch(r"20\d\d-\d\d", instances.PRICES_AS_OF)
    assert "aws.amazon.com/ec2/pricing" in instances.PRICE_SOURCE
    for name in instances.GPU_TYPES:
        t = instances.TYPES[name]
        assert t.gpus >= 1 and t.vcpus >= 4 and t.on_demand > 0 and 0 < t.spot < t.on_demand, name
        assert t.quota_group in ("G", "P"), name
    assert instances.TYPES["g5.12xlarge"].quota(spot=True) == ("All G and VT Spot Instance Requests", "L-3819A6DF")
