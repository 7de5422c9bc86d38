"""sweeps/engine/state_saves.py: one wrap of Tune's state saves, the previous upload awaited once, hooks in order."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sweeps.engine import ray_internals, state_saves


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
    return SimpleNamespace(wait=wait, location="/sweep")


@pytest.fixture
def tune_saves(monkeypatch):
    """Tune's controller with a recording save, and a stand-in controller's upload and location read as
    ray_internals reads a real one's (tests/test_ray_internals.py holds those to Tune's)."""
    controller = ray_internals.tune_controller()
    calls = []
    monkeypatch.setattr(controller, ray_internals.SAVE_TO_DIR, lambda controller: calls.append("save"))
    monkeypatch.setattr(ray_internals, "wait_for_state_upload", lambda controller: controller.wait())
    monkeypatch.setattr(ray_internals, "experiment_location", lambda controller: controller.location)
    return controller, calls


def _save(tune_controller, controller):
    """What Tune's loop calls to save its state."""
    getattr(tune_controller, ray_internals.SAVE_TO_DIR)(controller)


def test_each_save_waits_once_then_calls_every_hook_around_tunes_save(tune_saves):
    tune_controller, calls = tune_saves
    original = getattr(tune_controller, ray_internals.SAVE_TO_DIR)
    waits = []
    with state_saves.hooked(Recorder("a", calls), Recorder("b", calls)):
        _save(tune_controller, _controller(lambda: waits.append(1)))
    assert waits == [1]
    assert calls == [("a", "before", True), ("b", "before", True), "save", ("a", "after"), ("b", "after"),
                     ("a", "done"), ("b", "done")]  # fmt: skip
    assert getattr(tune_controller, ray_internals.SAVE_TO_DIR) is original


def test_a_failed_upload_is_warned_and_told_to_the_hooks(tune_saves, capsys):
    tune_controller, calls = tune_saves

    def failing():
        raise OSError("bucket gone")

    with state_saves.hooked(Recorder("a", calls)):
        _save(tune_controller, _controller(failing))
    assert calls[:2] == [("a", "before", False), "save"]
    assert "saving Ray Tune's state into /sweep failed: bucket gone" in capsys.readouterr().err


def test_a_fit_that_raised_undoes_the_wrap_without_done(tune_saves):
    tune_controller, calls = tune_saves
    original = getattr(tune_controller, ray_internals.SAVE_TO_DIR)
    with pytest.raises(RuntimeError), state_saves.hooked(Recorder("a", calls)):
        raise RuntimeError("fit failed")
    assert calls == [] and getattr(tune_controller, ray_internals.SAVE_TO_DIR) is original
