"""Hooks around Ray Tune's saves of its experiment state, with one wrap of `TuneController.save_to_dir`.

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


@contextlib.contextmanager
def hooked(*hooks):
    """While a Tuner runs: call `hooks` around every experiment-state save, and `done` after a fit that returned."""
    from ray.tune.execution.tune_controller import TuneController

    inner = TuneController.save_to_dir

    def save_to_dir(controller, *args, **kwargs):
        try:  # a copy still running would take the files written below before they are sealed
            controller._storage.syncer.wait()
            uploaded = True
        except Exception as error:
            where = getattr(controller._storage, "experiment_fs_path", "the sweep folder")
            print(f"warning: saving Ray Tune's state into {where} failed: {error}", file=sys.stderr)
            uploaded = False
        for hook in hooks:
            hook.before(controller, uploaded)
        result = inner(controller, *args, **kwargs)
        for hook in hooks:
            hook.after(controller)
        return result

    TuneController.save_to_dir = save_to_dir
    try:
        yield
    finally:
        TuneController.save_to_dir = inner
    for hook in hooks:
        hook.done()
