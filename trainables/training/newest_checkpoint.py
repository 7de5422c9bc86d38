"""A trial restored from the checkpoint Ray Tune recorded, or from its newest one when that is gone.

Tune keeps `num_to_keep` checkpoints a trial and deletes the older ones from the driver the moment a
newer one is registered, while its experiment state (what `--resume` restores) is saved every few
seconds and uploaded in the background. A driver killed in between leaves the state pointing at a
checkpoint Tune has itself deleted, and Tune's own restore then fails the trial ("does not exist on
storage anymore") on every retry. `RestoresNewest.restore` continues such a trial from the newest
checkpoint of its trial folder instead (one that holds the class's `STATE_FILE`), or from its first
epoch when none is left. Shared by `EpochTrainable` and the simulated trial, so it imports no torch.
"""

from __future__ import annotations

import sys

from sweeps.engine import ray_internals  # Tune's step count is private: the one module naming Ray's internals


def exists(filesystem, path: str) -> bool:
    import pyarrow.fs

    return filesystem.get_file_info(path).type != pyarrow.fs.FileType.NotFound


def newest_sibling(filesystem, path: str, state_file: str) -> str | None:
    """The newest `checkpoint_<n>` beside `path` (in the same trial folder) that holds `state_file`."""
    import pyarrow.fs

    parent = path.rstrip("/").rsplit("/", 1)[0]
    found = filesystem.get_file_info(pyarrow.fs.FileSelector(parent, allow_not_found=True))
    candidates = sorted(
        (
            info.path
            for info in found
            if info.type == pyarrow.fs.FileType.Directory and info.base_name.startswith("checkpoint_")
        ),
        key=lambda p: int(p.rsplit("_", 1)[-1]) if p.rsplit("_", 1)[-1].isdigit() else -1,
    )
    for candidate in reversed(candidates):
        if exists(filesystem, f"{candidate}/{state_file}"):
            return candidate
    return None


class RestoresNewest:
    """Mixed into a `tune.Trainable` (before it) whose one step is one epoch and whose `epoch` attribute
    counts the epochs done; `STATE_FILE` names the file every whole checkpoint of it holds."""

    STATE_FILE = "state.pt"

    def restore(self, checkpoint_path):
        from ray.tune import Checkpoint

        checkpoint = getattr(checkpoint_path, "checkpoint", checkpoint_path)
        if isinstance(checkpoint, str):
            checkpoint = Checkpoint.from_directory(checkpoint)
        if isinstance(checkpoint, Checkpoint) and not exists(checkpoint.filesystem, checkpoint.path):
            newest = newest_sibling(checkpoint.filesystem, checkpoint.path, self.STATE_FILE)
            print(
                f"warning: checkpoint {checkpoint.path} is gone; this trial continues from "
                + (f"{newest}, its newest" if newest else "its first epoch (no checkpoint of it is left)"),
                file=sys.stderr,
                flush=True,
            )
            if newest is None:
                return
            super().restore(Checkpoint(newest, filesystem=checkpoint.filesystem))
            ray_internals.set_iteration(self, self.epoch)  # one step is one epoch; Tune's count of the newer checkpoint
            return
        super().restore(checkpoint_path)
