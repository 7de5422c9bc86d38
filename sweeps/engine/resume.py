"""Resuming a sweep: the folder `--resume` names (its newest sweep, or one sweep folder), whether this
script may resume it (the script and method it records), where its MLflow parent run is, whether Ray
Tune saved its state yet, and the flags it started with (a flag given now with another value is
refused: `refuse_changed_flags`). `RESUME_KEEPS`: the flags a resumed sweep takes from the command
line, not from its folder."""

from __future__ import annotations

import os
import shlex
from argparse import Namespace
from pathlib import Path

from sweeps.engine import presets, seal, storage
from sweeps.engine.scripts import scripts_running
from trainables.core import endpoints, object_storage
from trainables.core.errors import SweepInputError
from trainables.core.settings import shown

RESUME_KEEPS = ("address", "max_concurrent", "local_gpus", "resume", "force", "dry_run")


def resolve_resume(args) -> tuple[str, dict]:
    """The sweep folder to resume and its sweep.json: `--resume latest` (the newest under
    --storage-path), a sweep folder, or a storage path (a folder or URI holding sweeps: its newest)."""
    given = args.storage_path if args.resume == "latest" else args.resume
    if storage.is_uri(given):
        object_storage.check_location(given, "--resume")
    path = storage.absolute(given)
    if args.resume == "latest" or storage.read_json(storage.join(path, storage.SWEEP_FILE)) is None:
        path = storage.latest_sweep(path) or (None if args.resume == "latest" else path)
    if path is None:
        raise SweepInputError(
            f"--resume: no sweep found under {args.storage_path}; pass the sweep's directory (it holds "
            f"{storage.SWEEP_FILE})."
        )
    saved = seal.read_sweep_file(path)  # refused unless this user's driver wrote it
    if saved is None:
        raise SweepInputError(
            f"--resume {path}: this path holds no sweep ({storage.SWEEP_FILE} is missing); pass the directory a "
            "sweep printed when it started."
        )
    return path, saved


def script_of(saved: dict, method: str) -> str | None:
    """The script that resumes a sweep of `method`: the one sweep.json records when it runs that method,
    else the one script that does (None where none does: the folder contradicts itself)."""
    scripts = scripts_running(method) or sorted(
        {p.script for p in presets.all_presets().values() if p.method == method}
    )
    recorded = f"sweeps/{saved.get('script')}.py"
    if recorded in scripts:
        return recorded
    return scripts[0] if len(scripts) == 1 else None


def refuse_other_method(sweep_dir: str, saved: dict, made_by: str, prog: str) -> None:
    script = script_of(saved, made_by)
    if script is None or Path(script).stem == Path(prog).stem:  # never the command just refused
        raise SweepInputError(
            f"--resume {sweep_dir}: its {storage.SWEEP_FILE} records the script {saved.get('script')!r} and the "
            f"method {made_by!r}, which no sweep script runs together; the folder's record does not match the code "
            "that made it: resume it with the version of this project that made it, or start a new sweep"
        )
    raise SweepInputError(
        f"--resume {sweep_dir}: this sweep was made by {script} (method {made_by}), not {prog}; "
        f"resume it with: python {script} --resume {shlex.quote(sweep_dir)}"
    )


def check_parent_run(sweep_dir: str, mlflow_uri: str, parent_run_id: str, recorded_uri: str) -> None:
    """A sweep folder copied or moved to another storage path logs to the MLflow store beside it: its
    parent run must be there (the store is never created here)."""
    path = mlflow_uri[len("sqlite:///") :] if mlflow_uri.startswith("sqlite:///") else None
    found = path is None or os.path.isfile(path)
    if found:
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException

        try:
            MlflowClient(tracking_uri=mlflow_uri).get_run(parent_run_id)
        except MlflowException:
            found = False
    if not found:
        raise SweepInputError(
            f"--resume {sweep_dir}: its parent run {parent_run_id} is not in {mlflow_uri}, the MLflow store beside "
            f"the folder (the sweep was copied or moved from the store {recorded_uri}); copy that store beside it "
            "as mlflow.db, or resume the folder where it was"
        )


def tune_state_exists(sweep_dir: str) -> bool:
    """Whether Ray Tune wrote its experiment state in the sweep folder (not yet, if the sweep was
    stopped during its upstream stages, before its first trial started, or before Tune could save
    its first state: `tuner.pkl` alone is started afresh)."""
    from ray import tune

    return tune.Tuner.can_restore(sweep_dir) and any(
        seal.is_tune_file(n) and n.startswith("experiment_state-") for n in seal.top_files(sweep_dir)
    )


def _typed(setting, value):
    """A value a sweep recorded, typed by today's declaration (a sweep of before the declarations
    recorded texts); as recorded where there is no declaration or it refuses the value."""
    if setting is None:
        return value
    try:
        return setting.parse(value)
    except SweepInputError:
        return value


def refuse_changed_flags(args: Namespace, defaults: dict, saved: dict, settings, given: set | None = None) -> None:
    """--resume continues a sweep with the flags it started with: a flag given now with another
    value is refused rather than silently ignored. `given`: the flags on the command line
    (cli.given_flags): each is compared, a default typed out included, and nothing else (the values a
    preset or --smoke-test fills in are the sweep's own, checked through `--preset` and `--smoke-test`
    themselves). Without `given`, every flag whose value is not its default is compared."""

    def same(a, b) -> bool:
        try:
            return a == b or str(a) == str(b) or float(a) == float(b)
        except (TypeError, ValueError):
            return False

    declared = {s.name: s for s in settings}
    saved = {key: _typed(declared.get(key), value) for key, value in saved.items()}
    now = {**vars(args), "mlflow_uri": args.mlflow_uri and endpoints.recorded_uri(args.mlflow_uri)}
    compared = {
        key: value
        for key, value in now.items()
        if key not in (*RESUME_KEEPS, "storage_path")
        and key in defaults
        and (key in given if given is not None else not same(value, defaults[key]))
    }
    changed = [
        f"--{key.replace('_', '-')} {shown(value)} (the sweep has {shown(saved.get(key, defaults.get(key)))})"
        for key, value in compared.items()
        if not same(value, saved.get(key, defaults[key]))
    ]
    if changed:
        raise SweepInputError(
            "--resume continues a sweep with the flags it started with; these differ: "
            + "; ".join(changed)
            + ". Drop them, or start a new sweep under another --name."
        )
