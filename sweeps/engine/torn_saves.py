"""Ray Tune's saved state never torn: `--resume` restores the searcher saved with the trial list it restores.

Tune saves a sweep's state in one `save_to_dir` into a staging folder, then copies the files into the sweep
folder one by one (threads; on S3 one object each): the trial list (`experiment_state-<session>.json`) and the
states of the searcher and the callbacks (e.g. `basic-variant-state-<session>.json`). A driver killed during that
copy can leave the searcher of the new save beside the trial list of the one before. For a grid, the searcher is
the generator of the trials not yet started: restored ahead of its trial list, it never starts the trials it
generated in between, and the resumed sweep ends without them and without an error.

`PairedSaves`, a `state_saves` hook, copies the files of each save but the trial list into
`<sweep>/.tune-saves/<time>-<sha256 of the trial list>/`, before Tune starts to copy that save (the last `KEEP`
saves stay). `repair(sweep_dir)`, before a resume restores, puts the files saved with the newest trial list in the
folder back in place. Tune starts a save only once the copy of the one before has finished (state_saves.py), so
the trial list in the folder is always one of the last two saves'. The copies are sealed files (seal.py): the
check that follows the repair refuses one that was changed.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from sweeps.engine import ray_internals, storage
from trainables.core import object_storage

SAVES = ".tune-saves"
TRIAL_LIST = "experiment_state-"  # Tune's TuneController.CKPT_FILE_TMPL, "experiment_state-{}.json"
KEEP = 4


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tune_files(folder: Path) -> dict[str, bytes]:
    from sweeps.engine.seal import is_tune_file

    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and is_tune_file(p.name)}


def record(sweep_dir: str, staged: dict[str, bytes]) -> None:
    """Keep the files of one save (`staged`: name -> bytes) but its trial list, under the trial list's digest."""
    lists = [name for name in staged if name.startswith(TRIAL_LIST)]
    if len(lists) != 1:
        return
    save = f"{time.time_ns():020d}-{_digest(staged[lists[0]])}"
    for name, data in staged.items():
        if name != lists[0]:
            object_storage.write_bytes(storage.join(sweep_dir, SAVES, save, name), data)
    kept = sorted(info.base_name for info in object_storage.list_dir(storage.join(sweep_dir, SAVES)))
    for old in kept[:-KEEP]:
        object_storage.delete_tree(storage.join(sweep_dir, SAVES, old))


def repair(sweep_dir: str) -> list[str]:
    """Put back the files saved with the newest trial list in `sweep_dir`, where the folder holds other versions;
    returns their names (a line is printed for them). A sweep without recorded saves is left as it is."""
    from sweeps.engine.seal import top_files

    top = top_files(sweep_dir)
    lists = sorted(name for name in top if name.startswith(TRIAL_LIST))
    saves = storage.join(sweep_dir, SAVES)
    if not lists or not object_storage.list_dir(saves):
        return []
    newest = object_storage.read_bytes(storage.join(sweep_dir, lists[-1])) or b""
    paired = [info.base_name for info in object_storage.list_dir(saves) if info.base_name.endswith(_digest(newest))]
    if not paired:
        return []
    save = storage.join(saves, max(paired))
    repaired = []
    for info in object_storage.list_dir(save):
        data = object_storage.read_bytes(storage.join(save, info.base_name))
        target = storage.join(sweep_dir, info.base_name)
        if data is not None and object_storage.read_bytes(target) != data:
            object_storage.write_bytes(target, data)
            repaired.append(info.base_name)
    if repaired:
        print(
            f"Ray Tune's state in {sweep_dir} was saved only in part when its driver stopped: put back "
            f"{', '.join(sorted(repaired))} as saved with the trial list {lists[-1]}",
            flush=True,
        )
    return repaired


class PairedSaves:
    """A `state_saves` hook: `record`s each save from Tune's staging folder before Tune copies it."""

    def __init__(self, sweep_dir: str):
        self.sweep_dir = sweep_dir

    def before(self, controller, uploaded: bool) -> None:
        pass

    def after(self, controller) -> None:
        record(self.sweep_dir, _tune_files(Path(ray_internals.staging_folder(controller))))

    def done(self) -> None:
        pass
