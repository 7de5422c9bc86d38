"""Hooks around Ray Tune's saves of its experiment state, through one wrap of
Tune's `save_to_dir` (sweeps/engine/ray_internals.py `around_state_saves`).

Two parts of the engine act on those saves: `seal` records the HMACs of the files a save writes into
Tune's staging folder before Tune copies them into the sweep folder, and `checkpoint_keeping` deletes
checkpoints that an uploaded state no longer names. Both need the previous upload finished first, so
the wrap waits for it once and tells each hook whether it finished (`before`), then lets Tune save and
calls `after`. When `Tuner.fit` has returned (its last save was awaited by Tune), `done` is called.

A hook is any object with `before(controller, uploaded: bool)`, `after(controller)` and `done()`.
"""

from __future__ import annotations

import contextlib
import sys

from sweeps.engine import ray_internals


@contextlib.contextmanager
def hooked(*hooks):
    """While a Tuner runs: call `hooks` around every experiment-state save, and `done` after a fit that returned."""

    def before(controller):
        try:  # a copy still running would take the files written below before they are sealed
            ray_internals.wait_for_state_upload(controller)
            uploaded = True
        except Exception as error:
            where = ray_internals.experiment_location(controller)
            print(f"warning: saving Ray Tune's state into {where} failed: {error}", file=sys.stderr)
            uploaded = False
        for hook in hooks:
            hook.before(controller, uploaded)

    def after(controller):
        for hook in hooks:
            hook.after(controller)

    with ray_internals.around_state_saves(before, after):
        yield
    for hook in hooks:
        hook.done()
