"""Sealed Ray Tune state: `--resume` unpickles nothing that a sweep of this user did not write.

Ray Tune restores a sweep from pickles in its folder: `tuner.pkl`, the trials inside
`experiment_state-*.json`, the searcher's and the callbacks' states (`*-state-*.json|pkl`), and a
trial checkpoint's `_dict_checkpoint.pkl`. So a tampered sweep folder would run its code on
`--resume`. The driver records an HMAC-SHA256 of each of these files (of its name and bytes) in
`<sweep>/tune-state.seal`, with a key kept outside the sweep folder: `EMBSWEEP_RESUME_KEY`, or the
file `~/.config/embsweep/resume.key` (`$XDG_CONFIG_HOME`), 32 random bytes created 0600 on first
use (never while checking a sealed folder: a deleted key is reported as such). `verify(sweep_dir)`
refuses (`SweepInputError`, exit 2) a file Tune would restore whose HMAC
is not recorded, and any `_dict_checkpoint.pkl` (this project's trials never write one), before
anything is unpickled: it reads a few small files.

When: `tuner.pkl` right after the Tuner is created (`record_files`); the rest inside Tune's own
`TuneController.save_to_dir` (by `SealingSaves`, a `state_saves` hook, while a sweep's Tuner runs), right after Tune
writes them into its staging folder and before it copies them into the sweep folder. So a driver
killed at any moment leaves only sealed files there. The last `KEEP` versions of each file stay
sealed, as the copy into the sweep folder may lag behind.

`sweep.json` (the flags, the MLflow store, the parent run, the method) is sealed the same way, before
it is written (`record_sweep_file`), and `read_sweep_file` returns it only when its HMAC is recorded:
nothing `--resume` trusts can be edited in the folder. The name and storage path of a resumed sweep
are never read from it: they are the folder's own, so a copied or moved folder resumes where it is.

`python -m sweeps.engine.seal SWEEP_DIR` seals the state of a folder you trust (a sweep started
before seals existed, or under another key).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sys
from pathlib import Path

from sweeps.engine import ray_internals, storage
from trainables.core import object_storage
from trainables.core.errors import SweepInputError

SEAL_FILE = "tune-state.seal"
KEY_ENV = "EMBSWEEP_RESUME_KEY"
KEEP = 32  # versions of one file that stay accepted
DICT_CHECKPOINT = "_dict_checkpoint.pkl"  # Ray unpickles it in a worker when a trial restores


def key_path() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or "~/.config").expanduser() / "embsweep" / "resume.key"


def key_source() -> str:
    return KEY_ENV if os.environ.get(KEY_ENV) else str(key_path())


def resume_key(create: bool = True) -> bytes:
    """The HMAC key: EMBSWEEP_RESUME_KEY, else the key file (created 0600 on first use when `create`)."""
    if os.environ.get(KEY_ENV):
        return os.environ[KEY_ENV].encode()
    path = key_path()
    if path.exists() and not path.is_file():
        raise SweepInputError(
            f"the resume key {path} is not a file; remove it (a new key is made) or set {KEY_ENV}, and run again"
        )
    if not path.is_file() and not create:
        raise SweepInputError(
            f"the resume key file {path} is missing (deleted?), so the sealed state of this sweep cannot be "
            f"checked; restore the file, or set {KEY_ENV} to the key it held, or, if you trust the folder, seal it "
            "anew with `python -m sweeps.engine.seal <sweep folder>`"
        )
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
            handle.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)  # whole, and the first of two processes creating it wins
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    key = path.read_bytes().strip()
    if not key:
        raise SweepInputError(f"the resume key file {path} is empty; delete it (a new key is made) or fill it")
    return key


def is_tune_file(name: str) -> bool:
    """A file at the sweep folder's top that Tune may restore from (it reads every *.json and *.pkl
    there; sweep.json is the engine's own plain JSON)."""
    return name.endswith((".json", ".pkl")) and not name.startswith(".") and name != storage.SWEEP_FILE


def _digest(key: bytes, name: str, data: bytes) -> str:
    return hmac.new(key, name.encode() + b"\0" + data, hashlib.sha256).hexdigest()


def top_files(sweep_dir: str) -> list[str]:
    import pyarrow.fs

    return [i.base_name for i in object_storage.list_dir(sweep_dir) if i.type == pyarrow.fs.FileType.File]


def _read(path: str) -> bytes:
    data = object_storage.read_bytes(path)
    if data is None:
        raise FileNotFoundError(path)
    return data


def _dict_checkpoints(sweep_dir: str) -> list[str]:
    if storage.is_uri(sweep_dir):
        infos = object_storage.list_dir(sweep_dir, recursive=True)
        return [info.path for info in infos if info.base_name == DICT_CHECKPOINT]
    return [str(p) for p in Path(sweep_dir).glob(f"*/checkpoint_*/{DICT_CHECKPOINT}")]


def _sealed(sweep_dir: str) -> dict:
    saved = storage.read_json(storage.join(sweep_dir, SEAL_FILE))
    return saved.get("hmac") if isinstance(saved, dict) and isinstance(saved.get("hmac"), dict) else {}


def record_files(sweep_dir: str, files: dict[str, bytes]) -> None:
    """Add the HMACs of `files` (name at the sweep folder's top -> bytes) to the sweep's seal."""
    key = resume_key()
    path = storage.join(sweep_dir, SEAL_FILE)
    sealed = _sealed(sweep_dir)
    for name, data in files.items():
        digest = _digest(key, name, data)
        sealed[name] = ([d for d in sealed.get(name, []) if d != digest] + [digest])[-KEEP:]
    storage.write_json(path, {"version": 1, "hmac": sealed})


def record(sweep_dir: str, names: list[str] | None = None) -> None:
    """Seal the Tune files now at the top of the sweep folder (`names`: only these)."""
    names = [n for n in top_files(sweep_dir) if is_tune_file(n)] if names is None else names
    record_files(sweep_dir, {n: _read(storage.join(sweep_dir, n)) for n in names})


def sweep_file_bytes(saved: dict) -> bytes:
    """The bytes of sweep.json as the driver writes them."""
    return json.dumps(saved, indent=2, default=str).encode()


def record_sweep_file(sweep_dir: str, saved: dict) -> None:
    """Seal, then write, the sweep's sweep.json (a driver killed in between leaves no unsealed one)."""
    data = sweep_file_bytes(saved)
    record_files(sweep_dir, {storage.SWEEP_FILE: data})
    object_storage.write_bytes(storage.join(sweep_dir, storage.SWEEP_FILE), data)


def read_sweep_file(sweep_dir: str) -> dict | None:
    """The sweep's sweep.json (None where there is none), refused unless this user's driver wrote it."""
    data = object_storage.read_bytes(storage.join(sweep_dir, storage.SWEEP_FILE))
    if data is None:
        return None
    key = resume_key(create=False)
    if _digest(key, storage.SWEEP_FILE, data) not in _sealed(sweep_dir).get(storage.SWEEP_FILE, ()):
        raise SweepInputError(
            f"--resume {sweep_dir}: {storage.SWEEP_FILE} is not the one this sweep's driver wrote (its HMAC-SHA256 "
            f"with the key in {key_source()} is not in {SEAL_FILE}); it names the MLflow store, the flags and the "
            "models the sweep would use, so the sweep is not resumed. Resume as the user (and with the "
            f"EMBSWEEP_RESUME_KEY) that ran it; or, if you trust this folder (e.g. a sweep started before "
            f"{storage.SWEEP_FILE} was sealed), seal it with `python -m sweeps.engine.seal {sweep_dir}` and resume "
            "again; or start the sweep again under another --name."
        )
    try:
        saved = json.loads(data.decode())
    except ValueError:
        saved = None
    if not isinstance(saved, dict) or not isinstance(saved.get("args"), dict):
        raise SweepInputError(f"--resume {sweep_dir}: {storage.SWEEP_FILE} is not a sweep's record; start again")
    return saved


def verify(sweep_dir: str) -> None:
    """Refuse to resume a sweep whose Tune state this user's sweeps did not write."""
    names = sorted(n for n in top_files(sweep_dir) if is_tune_file(n))
    trust = f"python -m sweeps.engine.seal {sweep_dir}"
    found = _dict_checkpoints(sweep_dir)
    if found:
        raise SweepInputError(
            f"--resume {sweep_dir}: {found[0]} is a pickle that Ray would run when the trial restores, and this "
            "project's trials never write one; the sweep folder was changed by someone else. Delete the file if "
            "you trust the rest, or start the sweep again under another --name."
        )
    if not names:
        return
    sealed = _sealed(sweep_dir)
    key = resume_key(create=False)
    for name in names:
        if _digest(key, name, _read(storage.join(sweep_dir, name))) not in sealed.get(name, ()):
            raise SweepInputError(
                f"--resume {sweep_dir}: {name} is not a file this sweep's driver wrote (its HMAC-SHA256 with the "
                f"key in {key_source()} is not in {SEAL_FILE}); Ray Tune would unpickle it, which runs any code in "
                "it, so the sweep is not resumed. Resume as the user (and with the EMBSWEEP_RESUME_KEY) that ran "
                f"the sweep; or, if you trust this folder (e.g. a sweep started before resume seals), seal it with "
                f"`{trust}` and resume again; or start the sweep again under another --name."
            )


class SealingSaves:
    """A `state_saves` hook: seals each state Tune saves, before Tune copies it into the sweep folder
    (Tune calls `TuneController.save_to_dir`, then starts the copy from its staging folder)."""

    def __init__(self, sweep_dir: str):
        self.sweep_dir = sweep_dir

    def before(self, controller, uploaded: bool) -> None:
        pass

    def after(self, controller) -> None:
        staging = Path(ray_internals.staging_folder(controller))
        record_files(
            self.sweep_dir, {p.name: p.read_bytes() for p in staging.iterdir() if p.is_file() and is_tune_file(p.name)}
        )

    def done(self) -> None:
        pass


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m sweeps.engine.seal",
        description="Seal the Ray Tune state and sweep.json of a sweep folder you trust, so that --resume accepts "
        "them: Tune unpickles that state, which runs any code in it, and sweep.json names what the sweep uses.",
    )
    parser.add_argument("sweep_dir", help="the sweep's folder (it holds sweep.json and tuner.pkl)")
    args = parser.parse_args(argv)
    sweep_dir = storage.absolute(args.sweep_dir)
    if storage.read_json(storage.join(sweep_dir, storage.SWEEP_FILE)) is None:
        print(f"error: {sweep_dir} holds no sweep ({storage.SWEEP_FILE} is missing)", file=sys.stderr)
        return 2
    try:
        record(sweep_dir)
        record(sweep_dir, [storage.SWEEP_FILE])
    except SweepInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"Sealed the Tune state and {storage.SWEEP_FILE} of {sweep_dir} with the key in {key_source()}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
