"""KeepLatest (sweeps/engine/checkpoint_keeping.py): a trial's older checkpoints are deleted only once a
saved and uploaded experiment state no longer names them, never by Tune at registration."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

from ray.tune import Checkpoint

from sweeps.engine import checkpoint_keeping, state_saves
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


def test_deferring_tells_the_controllers_keepers_of_each_save_and_deletes_the_rest_when_fit_ends(tmp_path, monkeypatch):
    from ray.tune.execution.tune_controller import TuneController

    saved = []

    def stub(controller):
        saved.append(controller)

    monkeypatch.setattr(TuneController, "save_to_dir", stub)
    keep, trial = KeepLatest(), SimpleNamespace(trial_id="t1")
    waits = []
    controller = SimpleNamespace(
        _storage=SimpleNamespace(syncer=SimpleNamespace(wait=lambda: waits.append(1))),
        _callbacks=SimpleNamespace(_callbacks=[object(), keep]),
    )
    first, second = _checkpoints(tmp_path, 0, 1)
    with state_saves.hooked(checkpoint_keeping.Deferring()):
        keep.on_checkpoint(0, [], trial, first)
        TuneController.save_to_dir(controller)
        keep.on_checkpoint(0, [], trial, second)
        TuneController.save_to_dir(controller)  # Tune's last save (awaited by Tune itself)
        assert _left(tmp_path) == ["checkpoint_000000", "checkpoint_000001"]
    assert saved == [controller, controller] and len(waits) == 2
    assert _left(tmp_path) == ["checkpoint_000001"]
    assert TuneController.save_to_dir is stub  # the patch is undone
