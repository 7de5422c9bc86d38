"""Run a sweep script with every trial held `seconds` in each epoch (tests that must act while trials
run, with the driver in a process of its own):

    python tests/held_sweep.py SECONDS sweeps/electra_layers.py [flags...]
"""

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))

from sweep_helpers import hold_all  # noqa: E402

import sweeps.engine.runner as runner  # noqa: E402

original = runner.plan_sweep
HOLD = float(sys.argv[1])


def planned(args, **kwargs):
    plan = original(args, **kwargs)
    hold_all(HOLD)(plan)
    return plan


runner.plan_sweep = planned
script = sys.argv[2]
sys.argv = [script, *sys.argv[3:]]
runpy.run_path(script, run_name="__main__")
