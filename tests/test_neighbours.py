"""The tests' processes share the cores: OpenMP threads sleep while they wait (tests/conftest.py).

The tests run beside each other (pytest-xdist workers, CI's two lanes). With OpenMP's default wait policy a
process's torch threads spin between parallel regions; beside one such process a one-trial sweep took ten
times as long (benchmarks/busy_neighbour.py measures it). conftest.py sets `OMP_WAIT_POLICY=PASSIVE` before
torch loads, and every process the tests start inherits it: sweep drivers, Ray's nodes and trial workers.
"""

from __future__ import annotations

import os
import subprocess
import sys


def test_the_policy_is_set_before_torch_loads_and_a_started_process_inherits_it():
    from conftest import TORCH_LOADED_BEFORE_WAIT_POLICY

    assert os.environ.get("OMP_WAIT_POLICY") == "PASSIVE" and not TORCH_LOADED_BEFORE_WAIT_POLICY
    probe = "import os; print(os.environ.get('OMP_WAIT_POLICY'))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "PASSIVE"  # a sweep script a test starts, say


def test_the_sessions_ray_workers_where_trials_run_inherit_the_policy(ray_session):
    @ray_session.remote(num_cpus=1)
    def policy():
        return os.environ.get("OMP_WAIT_POLICY")

    assert ray_session.get(policy.remote()) == "PASSIVE"
