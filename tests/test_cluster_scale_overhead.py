"""benchmarks/cluster_scale.py (the bookkeeping ratio): the engine's side reads its timers back from its driver."""

import importlib.util
import json
import subprocess
import sys

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
