"""A sweep whose store lost it stops at once, with one line (runner.main), instead of failing every
trial in turn: after a trial fails or is retried (a trial that could not write its checkpoint), the
driver checks that the sweep's `sweep.json` is still in its storage. A store that does not answer is
tried again for up to $EMBSWEEP_STORAGE_RETRY_S (trainables/core/object_storage.py `retrying`); a
store that answers without the sweep (a bucket emptied, a prefix deleted, a folder removed) raises
`StorageLost`, which ends Ray Tune's run."""

from __future__ import annotations

from ray import tune

from sweeps.engine import storage
from trainables.core import object_storage


class StoreGuard(tune.Callback):
    def __init__(self, sweep_dir: str):
        self.sweep_dir = sweep_dir

    def check(self) -> None:
        if object_storage.read_bytes(storage.join(self.sweep_dir, storage.SWEEP_FILE)) is None:
            raise object_storage.StorageLost(
                f"the store answers, but the sweep's {storage.SWEEP_FILE} is gone from it: its bucket or prefix was "
                "emptied"
            )

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.check()

    def on_trial_error(self, iteration, trials, trial, **info):
        self.check()
