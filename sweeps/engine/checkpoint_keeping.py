"""A trial's latest checkpoint kept (`--keep-checkpoints` other than `all`), its older ones deleted only
once Ray Tune's saved experiment state no longer names them.

Tune's own `CheckpointConfig(num_to_keep=1)` deletes a trial's previous checkpoint the moment the
next is registered, while the experiment state `--resume` restores from is saved and uploaded later:
a driver killed in between leaves that state naming a checkpoint that is gone. To narrow that window
Tune then forces a save and upload of the whole experiment state (every trial's record) after every
trial checkpoint, which at hundreds of trials costs the driver's loop time in proportion to trials x
checkpoints, and still does not close it. So the engine gives Tune no `num_to_keep` and
`KeepLatest`, a Tune callback, deletes instead: a checkpoint superseded before one of Tune's saves
goes when the next save starts, after the upload of that one has finished (`Deferring`, a
`state_saves` hook around `Tuner.fit`, knows when). A trial resumed by a new driver
has its older checkpoints (the ones its folder holds below the first it writes now) deleted the
same way. What is left when the sweep ends is deleted after Tune's last, awaited save.
"""

from __future__ import annotations

import sys
from typing import ClassVar

from ray import tune


def _index(path: str) -> int:
    tail = path.rstrip("/").rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _delete(checkpoint, earlier) -> None:
    """Delete `earlier` (a checkpoint), or with None every `checkpoint_<n>` below `checkpoint`'s beside it."""
    import pyarrow.fs

    filesystem = checkpoint.filesystem
    if earlier is not None:
        paths = [earlier.path] if earlier.path != checkpoint.path else []
    elif _index(checkpoint.path) <= 0:  # a trial's first checkpoint: nothing below it
        paths = []
    else:
        folder = checkpoint.path.rstrip("/").rsplit("/", 1)[0]
        found = filesystem.get_file_info(pyarrow.fs.FileSelector(folder, allow_not_found=True))
        paths = [
            info.path
            for info in found
            if info.type == pyarrow.fs.FileType.Directory
            and info.base_name.startswith("checkpoint_")
            and 0 <= _index(info.path) < _index(checkpoint.path)
        ]
    for path in paths:
        try:
            filesystem.delete_dir(path)
        except FileNotFoundError:
            pass
        except OSError as error:  # a checkpoint left behind costs disk, not the sweep
            print(f"warning: could not delete the superseded checkpoint {path}: {error}", file=sys.stderr)


class KeepLatest(tune.Callback):
    """Each trial's latest checkpoint only, the older ones deleted once no saved state names them."""

    running: ClassVar[list] = []  # the keepers of the fit running in this driver (Tune set them up), for `Deferring`

    def __init__(self):
        self._reset()

    def _reset(self):
        self._latest: dict = {}  # trial id -> its latest checkpoint this driver saw
        self._queued: list = []  # (checkpoint, the one it supersedes or None) since Tune's last save
        self._ready: list = []  # superseded before Tune's last save: deleted once that save is uploaded

    def __getstate__(self):  # Tune pickles its callbacks with the Tuner: a restored one starts empty
        return {"restored": True}  # not empty: pickle calls __setstate__ only for a true state

    def __setstate__(self, state):
        self._reset()

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info):
        KeepLatest.running.append(self)  # Tune's controller sets up the callbacks it runs, restored ones too

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        earlier = self._latest.get(trial.trial_id)
        self._latest[trial.trial_id] = checkpoint
        self._queued.append((checkpoint, earlier))

    def state_saving(self, uploaded: bool) -> None:
        """Tune starts saving its experiment state; `uploaded`: its previous save reached the storage."""
        if uploaded:
            ready, self._ready = self._ready, []
            for checkpoint, earlier in ready:
                _delete(checkpoint, earlier)

    def state_saved(self) -> None:
        self._ready += self._queued
        self._queued = []


class Deferring:
    """A `state_saves` hook: tells the running fit's `KeepLatest` callbacks when Tune saves its experiment
    state, and has them delete what they hold back once `Tuner.fit` has returned (its last save awaited).
    Made just before the fit: the keepers of an earlier fit in this process are forgotten."""

    def __init__(self):
        KeepLatest.running.clear()
        self._seen: list[KeepLatest] = []

    def before(self, controller, uploaded: bool) -> None:
        self._seen = list(KeepLatest.running)
        for keeper in self._seen:
            keeper.state_saving(uploaded)

    def after(self, controller) -> None:
        for keeper in self._seen:
            keeper.state_saved()

    def done(self) -> None:  # nothing held back is named by the state any more
        for keeper in self._seen:
            keeper.state_saving(True)
        KeepLatest.running.clear()
