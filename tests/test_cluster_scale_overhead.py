"""benchmarks/cluster_scale.py (the bookkeeping ratio): the engine's side reads its timers back from its driver."""

import importlib.util
import json
import subprocess
import sys

import pytest

from trainables.core.paths import PROJECT_ROOT


def _module():
    spec = importlib.util.spec_from_file_location("cluster_scale", PROJECT_ROOT / "benchmarks" / "cluster_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_engine_timers_are_written_when_the_sweep_script_ends_in_quick_exit(tmp_path):
    # a sweep script ends in quick_exit.exit_now: exit handlers, then os._exit, so no `finally` of the wrapper runs
    script = tmp_path / "sweep.py"
    script.write_text("from sweeps.engine import quick_exit\nquick_exit.exit_now(3)\n")
    report = tmp_path / "timers.json"
    done = subprocess.run(
        [sys.executable, "-c", _module().ENGINE_WRAPPER, str(script), str(report), ""],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env=_module()._env(),
    )
    assert done.returncode == 3, done.stderr[-2000:]
    assert json.loads(report.read_text()) == {"fit_s": 0.0, "close_wait_s": 0.0, "writer_cpu_s": 0.0, "writes": 0}


@pytest.mark.sweep  # the engine's own --dry-run: a process that imports the sweep (over 3 s)
def test_missing_data_ends_the_benchmark_in_one_line_before_either_arm(tmp_path):
    """Without the data the engine's sweep reads, the benchmark stops before bare Tune runs (it used to fail
    after the whole bare arm: 333 s lost)."""
    done = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "benchmarks" / "cluster_scale.py"), "--data-dir", str(tmp_path)]
        + ["--trials", "3", "--seconds", "0.1", "--concurrent", "2"],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env=_module()._env(),
        timeout=120,
    )
    assert done.returncode == 2, (done.stdout, done.stderr[-2000:])
    assert done.stdout == ""  # not even the trials' line: nothing ran
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("the engine's sweep cannot run, nothing was run: ")
    assert f"{tmp_path}/sts-train.csv: file not found; pass --data-dir" in done.stderr


def test_trials_in_flight_are_the_running_trials_mean_over_the_run(tmp_path):
    path = tmp_path / "in-flight.json"
    # 0-10 s: 2 running, 10-20 s: 4, 20-30 s: 1 (the last event ends the run)
    path.write_text(json.dumps({"events": [[100, 2], [110, 4], [120, 1], [130, 0]], "processes": 3}))
    flight = _module().in_flight(str(path))
    assert flight == {"most": 4, "mean": pytest.approx((2 * 10 + 4 * 10 + 1 * 10) / 30), "processes": 3}


def test_arms_at_unequal_concurrency_are_named():
    module = _module()
    bare, engine = {"mean": 3.0}, {"mean": 5.5}
    assert "NOT at equal concurrency: bare Tune had 3.0 trials in flight on average, the engine 5.5" in (
        module.equal_concurrency_note(bare, engine)
    )
    assert module.equal_concurrency_note({"mean": 15.0}, {"mean": 16.0}) is None
