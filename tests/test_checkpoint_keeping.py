"""KeepLatest (sweeps/engine/checkpoint_keeping.py): a trial's older checkpoints are deleted only once a
saved and uploaded experiment state no longer names them, never by Tune at registration."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

from ray.tune import Checkpoint

from sweeps.engine import checkpoint_keeping, ray_internals, state_saves
from sweeps.engine.checkpoint_keeping import KeepLatest


def _checkpoints(folder, *indices):
    made = []
    for n in indices:
        path = folder / f"checkpoint_{n:06d}"
        path.mkdir(parents=True)
        (path / "state.json").write_text("{}")
        made.append(Checkpoint.from_directory(str(path)))
    return made


def _left(folder):
    return sorted(p.name for p in folder.iterdir())


def test_a_superseded_checkpoint_goes_only_after_the_save_naming_its_successor_was_uploaded(tmp_path):
    keep, trial = KeepLatest(), SimpleNamespace(trial_id="t1")
    first, second = _checkpoints(tmp_path, 0, 1)
    keep.on_checkpoint(0, [], trial, first)
    keep.state_saving(True), keep.state_saved()
    keep.on_checkpoint(0, [], trial, second)  # the saved state still names the first
    keep.state_saving(True), keep.state_saved()  # this save names the second; its upload is not done
    assert _left(tmp_path) == ["checkpoint_000000", "checkpoint_000001"]
    keep.state_saving(False)  # that upload failed: nothing may go
    assert _left(tmp_path) == ["checkpoint_000000", "checkpoint_000001"]
    keep.state_saving(True)
    assert _left(tmp_path) == ["checkpoint_000001"]


def test_a_resumed_trials_older_checkpoints_go_after_its_first_new_one_is_saved(tmp_path):
    """A new driver has not seen the trial's earlier checkpoints: those below its first new one go."""
    keep = KeepLatest()
    *_, newest = _checkpoints(tmp_path, 0, 1, 2)
    (tmp_path / "result.json").write_text("")
    keep.on_checkpoint(0, [], SimpleNamespace(trial_id="t1"), newest)
    keep.state_saved()
    keep.state_saving(True)
    assert _left(tmp_path) == ["checkpoint_000002", "result.json"]


def test_a_restored_keeper_starts_empty():
    keep, trial = KeepLatest(), SimpleNamespace(trial_id="t1")
    keep.on_checkpoint(0, [], trial, SimpleNamespace(path="/x/checkpoint_000000"))
    again = pickle.loads(pickle.dumps(keep))
    assert again._latest == {} and again._queued == [] and again._ready == []


def test_deferring_tells_the_running_keepers_of_each_save_and_deletes_the_rest_when_fit_ends(tmp_path, monkeypatch):
    tune_controller = ray_internals.tune_controller()
    saved = []

    def stub(controller):
        saved.append(controller)

    monkeypatch.setattr(tune_controller, ray_internals.SAVE_TO_DIR, stub)
    waits = []
    monkeypatch.setattr(ray_internals, "wait_for_state_upload", lambda controller: waits.append(1))
    deferring = checkpoint_keeping.Deferring()  # made before the fit, as the runner makes it
    keep, trial = KeepLatest(), SimpleNamespace(trial_id="t1")
    keep.setup(stop=None, num_samples=1, total_num_samples=1)  # as Tune's controller sets up its callbacks
    controller = object()
    first, second = _checkpoints(tmp_path, 0, 1)
    with state_saves.hooked(deferring):
        keep.on_checkpoint(0, [], trial, first)
        getattr(tune_controller, ray_internals.SAVE_TO_DIR)(controller)
        keep.on_checkpoint(0, [], trial, second)
        getattr(tune_controller, ray_internals.SAVE_TO_DIR)(controller)  # Tune's last save (awaited by Tune itself)
        assert _left(tmp_path) == ["checkpoint_000000", "checkpoint_000001"]
    assert saved == [controller, controller] and len(waits) == 2
    assert _left(tmp_path) == ["checkpoint_000001"]
    assert getattr(tune_controller, ray_internals.SAVE_TO_DIR) is stub  # the patch is undone
    assert KeepLatest.running == []  # forgotten once the fit ended
