"""`--resume` unpickles only Tune state that a sweep of this user wrote (sweeps/engine/seal.py): a
tampered `tuner.pkl`, experiment state or an added pickle is refused with exit 2 before any of it
is read, and its code does not run; the key lives outside the sweep folder."""

import os
import pickle
import stat

import pytest
from sweep_helpers import sweep_args

from sweeps.electra_layers import main
from sweeps.engine import seal


class Planted:
    """A pickle that creates `marker` (a folder) when it is unpickled."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


@pytest.mark.sweep
def test_a_tampered_sweep_folder_is_refused_before_anything_is_unpickled(sweep_env, tiny_models, capsys):
    assert (
        main(sweep_args(tiny_models["bert"], "--layers 1 --seeds 0 --epochs 1 --name sealed", *sweep_env["flags"])) == 0
    )
    sweep_dir = sweep_env["storage"] / "sealed"
    state = sorted(p.name for p in sweep_dir.glob("experiment_state-*.json"))
    assert (sweep_dir / "tuner.pkl").is_file() and state and (sweep_dir / seal.SEAL_FILE).is_file()
    seal.verify(str(sweep_dir))  # what the sweep wrote is sealed
    marker = sweep_env["tmp"] / "pickle-ran"
    planted = pickle.dumps(Planted(marker))
    capsys.readouterr()

    def refused(name: str) -> str:
        assert main(["--resume", str(sweep_dir)]) == 2
        err = capsys.readouterr().err
        assert name in err and "Traceback" not in err
        assert not marker.exists(), "the planted pickle ran"
        return err

    original = (sweep_dir / "tuner.pkl").read_bytes()
    (sweep_dir / "tuner.pkl").write_bytes(planted)
    err = refused("tuner.pkl")
    assert "HMAC-SHA256" in err and "python -m sweeps.engine.seal" in err and "another --name" in err
    (sweep_dir / "tuner.pkl").write_bytes(original)

    experiment_state = sweep_dir / state[-1]
    text = experiment_state.read_text()
    experiment_state.write_text(text.replace('"stats"', '"stats" ', 1))
    refused(state[-1])
    experiment_state.write_text(text)

    (sweep_dir / "searcher-state-2099-01-01_00-00-00.pkl").write_bytes(planted)
    refused("searcher-state-2099-01-01_00-00-00.pkl")
    (sweep_dir / "searcher-state-2099-01-01_00-00-00.pkl").unlink()

    checkpoint = next(sweep_dir.glob("*/checkpoint_*"))
    (checkpoint / seal.DICT_CHECKPOINT).write_bytes(planted)
    refused(seal.DICT_CHECKPOINT)
    (checkpoint / seal.DICT_CHECKPOINT).unlink()

    seal.verify(str(sweep_dir))  # restored: accepted again


def test_another_key_is_refused_and_a_trusted_folder_can_be_sealed(tmp_path, monkeypatch, capsys):
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    (sweep_dir / "sweep.json").write_text("{}")
    (sweep_dir / "tuner.pkl").write_bytes(b"state")
    seal.record(str(sweep_dir))
    seal.verify(str(sweep_dir))
    monkeypatch.setenv(seal.KEY_ENV, "another key")
    try:
        seal.verify(str(sweep_dir))
        raise AssertionError("a seal made with another key was accepted")
    except seal.SweepInputError as error:
        assert "tuner.pkl" in str(error) and seal.KEY_ENV in str(error)
    assert seal.main([str(sweep_dir)]) == 0 and "Sealed" in capsys.readouterr().out
    seal.verify(str(sweep_dir))


def test_the_key_file_is_made_once_outside_the_sweep_readable_by_its_owner_only(tmp_path, monkeypatch):
    monkeypatch.delenv(seal.KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    key = seal.resume_key()
    path = tmp_path / "config" / "embsweep" / "resume.key"
    assert path.is_file() and stat.S_IMODE(path.stat().st_mode) == 0o600 and len(key) == 64
    assert seal.resume_key() == key and seal.key_source() == str(path)
