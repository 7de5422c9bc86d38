"""The engine's short lists of setting names name settings that exist: a renamed or deleted setting
fails here instead of silently leaving a list (the lists themselves are the rules they state)."""

from __future__ import annotations

from sweeps.engine import presets
from sweeps.engine.cli import ENGINE, TRIAL_SETTINGS
from sweeps.engine.resume import RESUME_KEEPS
from trainables.core.method import METHODS
from trainables.methods import load


def test_the_flags_a_resumed_sweep_keeps_from_its_command_line_are_engine_settings():
    assert set(RESUME_KEEPS) <= {s.name for s in ENGINE}, set(RESUME_KEEPS) - {s.name for s in ENGINE}


def test_the_flags_a_preset_leaves_free_are_settings_some_method_declares():
    load()
    declared = {s.name for name in METHODS.names() for s in METHODS.get(name).settings}
    assert set(presets.FREE_FLAGS) <= declared, set(presets.FREE_FLAGS) - declared


def test_the_engine_settings_every_trial_carries_are_the_ones_declared_so():
    assert [s.name for s in TRIAL_SETTINGS] == ["precision", "keep_checkpoints", "best_dtype"]
    assert all(s.trial and not s.config for s in TRIAL_SETTINGS)  # not a method's trial-config setting
