"""sweeps/engine/state_saves.py: one wrap of Tune's state saves, the previous upload awaited once, hooks in order."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sweeps.engine import state_saves


class Recorder:
    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def before(self, controller, uploaded):
        self.calls.append((self.name, "before", uploaded))

    def after(self, controller):
        self.calls.append((self.name, "after"))

    def done(self):
        self.calls.append((self.name, "done"))


def _controller(wait):
    return SimpleNamespace(_storage=SimpleNamespace(syncer=SimpleNamespace(wait=wait), experiment_fs_path="/sweep"))


@pytest.fixture
def tune_saves(monkeypatch):
    from ray.tune.execution.tune_controller import TuneController

    calls = []
    monkeypatch.setattr(TuneController, "save_to_dir", lambda controller: calls.append("save"))
    return TuneController, calls


def test_each_save_waits_once_then_calls_every_hook_around_tunes_save(tune_saves):
    TuneController, calls = tune_saves
    original = TuneController.save_to_dir
    waits = []
    with state_saves.hooked(Recorder("a", calls), Recorder("b", calls)):
        TuneController.save_to_dir(_controller(lambda: waits.append(1)))
    assert waits == [1]
    assert calls == [("a", "before", True), ("b", "before", True), "save", ("a", "after"), ("b", "after"),
                     ("a", "done"), ("b", "done")]  # fmt: skip
    assert TuneController.save_to_dir is original


def test_a_failed_upload_is_warned_and_told_to_the_hooks(tune_saves, capsys):
    TuneController, calls = tune_saves

    def failing():
        raise OSError("bucket gone")

    with state_saves.hooked(Recorder("a", calls)):
        TuneController.save_to_dir(_controller(failing))
    assert calls[:2] == [("a", "before", False), "save"]
    assert "saving Ray Tune's state into /sweep failed: bucket gone" in capsys.readouterr().err


def test_a_fit_that_raised_undoes_the_wrap_without_done(tune_saves):
    TuneController, calls = tune_saves
    original = TuneController.save_to_dir
    with pytest.raises(RuntimeError), state_saves.hooked(Recorder("a", calls)):
        raise RuntimeError("fit failed")
    assert calls == [] and TuneController.save_to_dir is original
