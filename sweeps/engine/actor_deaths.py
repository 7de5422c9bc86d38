"""One actor death, one trial failure: a wrap of Ray Tune's trial tasks while a sweep's Tuner runs.

A trial being given a reused actor (`reuse_actors`, the engine's default) waits as PENDING while the
actor runs its `reset` task. When that actor dies (its node lost, its process killed), Ray Tune 2.60
hears of the one death twice, in one event: first as the actor's failure, which counts a failure and
puts the trial back in line (PENDING) if `max_failures` allows, then as the `reset` task's failure,
which finds the trial PENDING and stops it as ERROR, whatever `max_failures` says. Tune also keeps
such a trial among its resetting trials, so it would never be given an actor again.

While `handled()` is active, a task's failure is dropped when it is the death of an actor whose
failure Tune has already handled (the actor no longer belongs to any trial) and the trial is back
in line; and a failed `reset` no longer leaves the trial marked as resetting. Every other failure
reaches Tune as before.
"""

from __future__ import annotations

import logging

from sweeps.engine import ray_internals

logger = logging.getLogger("ray.tune.actor_deaths")  # beside Tune's own lines: in the sweep's log file


def handled():
    """While a Tuner runs: a trial's failure is counted once per actor death (the wrap of Tune's trial
    tasks is in sweeps/engine/ray_internals.py `one_failure_per_actor_death`)."""
    return ray_internals.one_failure_per_actor_death(
        lambda trial: logger.warning(
            "%s: its actor's death was counted once already; the trial waits for a new actor", trial
        )
    )
