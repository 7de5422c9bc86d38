"""A torn copy of Ray Tune's saved state (the searcher of one save beside the trial list of the save before)
is put right before a resume restores it (sweeps/engine/torn_saves.py)."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from sweeps.engine import ray_internals, torn_saves

TRIALS = "experiment_state-2026-11-28_10-00-00.json"
SEARCHER = "basic-variant-state-2026-11-28_10-00-00.json"
CALLBACKS = "callback-states-2026-11-28_10-00-00.pkl"


@pytest.fixture
def tune(tmp_path, monkeypatch):
    """A staging folder Tune saves into, the sweep folder it copies to, and one save at a time."""
    staging, sweep = tmp_path / "staging", tmp_path / "sweep"
    staging.mkdir()
    sweep.mkdir()
    monkeypatch.setattr(ray_internals, "staging_folder", lambda controller: str(staging))
    hook = torn_saves.PairedSaves(str(sweep))

    def save(version: int, copied=(TRIALS, SEARCHER, CALLBACKS)):
        for name in (TRIALS, SEARCHER, CALLBACKS):
            (staging / name).write_text(f"{name} of save {version}")
        hook.after(SimpleNamespace())
        for name in copied:  # Tune's copy into the sweep folder, whole or cut short
            shutil.copy(staging / name, sweep / name)

    return SimpleNamespace(sweep=sweep, save=save)


def test_a_searcher_copied_ahead_of_its_trial_list_is_put_back(tune, capsys):
    tune.save(1)
    tune.save(2, copied=(SEARCHER,))  # the driver killed after the searcher's copy, before the trial list's
    assert torn_saves.repair(str(tune.sweep)) == [SEARCHER]
    assert (tune.sweep / SEARCHER).read_text() == f"{SEARCHER} of save 1"
    assert (tune.sweep / CALLBACKS).read_text() == f"{CALLBACKS} of save 1"
    assert f"put back {SEARCHER} as saved with the trial list {TRIALS}" in capsys.readouterr().out


def test_a_whole_copy_is_left_as_it_is(tune, capsys):
    tune.save(1)
    tune.save(2)
    assert torn_saves.repair(str(tune.sweep)) == []
    assert (tune.sweep / SEARCHER).read_text() == f"{SEARCHER} of save 2"
    assert capsys.readouterr().out == ""


def test_the_trial_list_copied_ahead_of_its_searcher_gets_its_own(tune):
    tune.save(1)
    tune.save(2, copied=(TRIALS,))
    assert torn_saves.repair(str(tune.sweep)) == [SEARCHER, CALLBACKS]
    assert (tune.sweep / SEARCHER).read_text() == f"{SEARCHER} of save 2"


def test_only_the_last_saves_are_kept_and_a_sweep_without_them_is_not_touched(tune, tmp_path):
    for version in range(1, 8):
        tune.save(version)
    assert len(list((tune.sweep / torn_saves.SAVES).iterdir())) == torn_saves.KEEP
    old = tmp_path / "old"
    old.mkdir()
    (old / TRIALS).write_text("a sweep from before the saves were kept")
    (old / SEARCHER).write_text("its searcher")
    assert torn_saves.repair(str(old)) == []
    assert (old / SEARCHER).read_text() == "its searcher"


def test_the_saves_are_kept_on_an_object_store(s3, tmp_path, monkeypatch):
    sweep = s3.uri("runs/torn")
    staging = tmp_path / "staging"
    staging.mkdir()
    monkeypatch.setattr(ray_internals, "staging_folder", lambda controller: str(staging))
    hook = torn_saves.PairedSaves(sweep)
    for version in (1, 2):
        for name in (TRIALS, SEARCHER):
            (staging / name).write_text(f"{name} of save {version}")
        hook.after(SimpleNamespace())
    put = lambda name, version: s3.client.put_object(  # noqa: E731
        Bucket=s3.bucket, Key=f"runs/torn/{name}", Body=f"{name} of save {version}".encode()
    )
    put(TRIALS, 1)
    put(SEARCHER, 2)
    assert torn_saves.repair(sweep) == [SEARCHER]
    assert s3.read(f"runs/torn/{SEARCHER}") == f"{SEARCHER} of save 1".encode()
    assert len({key.split("/")[3] for key in s3.keys(f"runs/torn/{torn_saves.SAVES}/")}) == 2
