"""`runs:/<run id>` model references: the best-dev checkpoint of a finished trial of any method.

A trial's run carries tag `embsweep.checkpoint` (its latest checkpoint, written by the sweep
driver's MLflow callback); the checkpoint's `best/` folder holds the best-dev weights as a
sentence-transformers model folder. `resolve_run(reference, mlflow_uri)` returns that folder and
refuses, with the reason, a run that does not exist, never recorded a checkpoint, or whose folder is gone.
A tag is followed only to a trial checkpoint of a recorded sweep: `<sweep>/<trial>/checkpoint_<n>`, where
`<sweep>/sweep.json` names the run's parent run (anyone who can write to the MLflow store can set a
tag, so a tag naming any other place is refused). `runs:/<id>` takes nothing after the id. Reading a
missing SQLite store is refused before MLflow would create it (`client`). A checkpoint
on an object store is copied once into this node's cache and checked against the file list its trial
wrote (`best.files.json`, whose digest the run's tag `embsweep.best_digest` holds).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from trainables.core.errors import SweepInputError
from trainables.core.schema import BEST_FILES, TAG_BEST_DIGEST, TAG_CHECKPOINT, TAG_PARENT

PREFIX = "runs:/"
BEST_DIR = "best"
SWEEP_FILE = "sweep.json"  # the sweep's record at the top of its folder (sweeps/engine/storage.py)
CHECKPOINT_NAME = re.compile(r"checkpoint_\d+")


def is_run_reference(name: str) -> bool:
    return str(name).startswith(PREFIX)


def run_id_of(reference: str) -> str:
    run_id, _, rest = reference[len(PREFIX) :].strip("/").partition("/")
    if not run_id:
        raise SweepInputError(f"{reference!r}: a run reference is runs:/<run id> (the id of a trial's MLflow run)")
    if rest:
        raise SweepInputError(
            f"{reference!r}: a run reference names a trial's best-dev model as runs:/<run id>; the path {rest!r} "
            f"after the id cannot be followed: pass runs:/{run_id}"
        )
    return run_id


def client(mlflow_uri: str, what: str):
    """An MLflow client of a store that exists: a `sqlite:///` file that is not there is refused (MLflow
    would create it, and a refusal writes nothing)."""
    from mlflow import MlflowClient

    path = mlflow_uri[len("sqlite:///") :] if str(mlflow_uri).startswith("sqlite:///") else None
    if path is not None and not os.path.isfile(path):
        raise SweepInputError(
            f"{what}: there is no MLflow store at {path}; pass the --mlflow-uri of the sweep that trained it"
        )
    return MlflowClient(tracking_uri=mlflow_uri)


def existing_run(reference: str, mlflow_uri: str | None):
    """The MLflow run `reference` names, refused in one line when there is no store, no such run, or the run was
    deleted (MLflow keeps a deleted run until `mlflow gc`, so it still answers by its id)."""
    from mlflow.exceptions import MlflowException

    run_id = run_id_of(reference)
    if mlflow_uri is None:
        raise SweepInputError(f"{reference}: a run reference needs the MLflow store that holds the run (--mlflow-uri)")
    try:
        run = client(mlflow_uri, reference).get_run(run_id)
    except MlflowException:
        raise SweepInputError(
            f"{reference}: no run {run_id} in the MLflow store {mlflow_uri}; pass the --mlflow-uri "
            "of the sweep that ran it"
        ) from None
    if run.info.lifecycle_stage == "deleted":
        raise SweepInputError(
            f"{reference}: run {run_id} ({run.info.run_name}) was deleted from the MLflow store {mlflow_uri}; "
            f"restore it (mlflow runs restore --run-id {run_id}) or pass another run"
        )
    return run


def resolve_run(reference: str, mlflow_uri: str) -> Path:
    run = existing_run(reference, mlflow_uri)
    run_id = run.info.run_id
    checkpoint = run.data.tags.get(TAG_CHECKPOINT)
    if not checkpoint:
        raise SweepInputError(
            f"{reference}: run {run_id} ({run.info.run_name}) recorded no checkpoint (tag {TAG_CHECKPOINT}); "
            "it is not a trial of this project's sweeps, or it ended before its first epoch"
        )
    _check_in_sweep(reference, run_id, checkpoint, run.data.tags.get(TAG_PARENT))
    best = _local_best(reference, checkpoint, run_id, run.data.tags.get(TAG_BEST_DIGEST))
    found = best is not None and (best / "config.json").is_file()
    if not found and run.data.params.get("keep_checkpoints") == "none":
        raise SweepInputError(
            f"{reference}: run {run_id} ({run.info.run_name}) kept no model (its sweep ran with "
            "--keep-checkpoints none); run the trial again with --keep-checkpoints best"
        )
    if not found:
        raise SweepInputError(
            f"{reference}: the best-dev model of run {run_id} is not at {checkpoint}/{BEST_DIR} (the sweep's folder "
            "was moved or deleted); pass the model folder itself instead"
        )
    return best


def _check_in_sweep(reference: str, run_id: str, checkpoint: str, parent_run_id: str | None) -> None:
    """Refuse a checkpoint tag that is not `<sweep>/<trial>/checkpoint_<n>` of a sweep whose sweep.json names
    the run's parent run (and, on this file system, that leads out of that sweep folder by a link)."""
    from trainables.core import object_storage

    trial = object_storage.parent(checkpoint)
    sweep = object_storage.parent(trial)
    inner = object_storage.split(checkpoint)[1] if object_storage.is_uri(checkpoint) else checkpoint
    recorded = None
    if (
        CHECKPOINT_NAME.fullmatch(object_storage.basename(checkpoint))
        and not {".", ".."} & set(inner.split("/"))
        and object_storage.basename(trial) not in ("", ".", "..")
    ):
        recorded = object_storage.read_json(object_storage.join(sweep, SWEEP_FILE))
    inside = recorded is not None and parent_run_id is not None and recorded.get("parent_run_id") == parent_run_id
    if inside and not object_storage.is_uri(checkpoint):
        real = os.path.realpath(os.path.join(checkpoint, BEST_DIR))
        inside = real.startswith(os.path.realpath(sweep) + os.sep)
    if not inside:
        raise SweepInputError(
            f"{reference}: run {run_id}'s tag {TAG_CHECKPOINT} names {checkpoint}, which is not a trial checkpoint "
            f"of its sweep (a run reference follows only <sweep>/<trial>/checkpoint_<n>/{BEST_DIR} where "
            f"<sweep>/{SWEEP_FILE} names the run's parent run); if you trust that folder, pass its {BEST_DIR}/ "
            "folder itself instead"
        )


def _local_best(reference: str, checkpoint: str, run_id: str, digest: str | None) -> Path | None:
    """The checkpoint's `best/` folder on this node: the folder itself on a local or shared file
    system; from an object store, a copy in this node's cache made once and checked file by file
    against the `best.files.json` the trial wrote, whose digest the run recorded."""
    from trainables.core import object_storage, verified_copies

    if not object_storage.is_uri(checkpoint):
        return Path(checkpoint) / BEST_DIR
    listing = object_storage.read_json(object_storage.join(checkpoint, BEST_FILES))
    if listing is None or not isinstance(listing.get("files"), dict):
        return None
    if digest and verified_copies.listing_digest(listing["files"]) != digest:
        raise SweepInputError(
            f"{reference}: the file list of run {run_id}'s best-dev model ({checkpoint}/{BEST_FILES}) is not the "
            "one its trial recorded; the stored checkpoint was changed: run the trial again"
        )
    name = f"runs/{run_id}-{verified_copies.listing_digest(listing['files'])[:16]}"
    return verified_copies.cached_copy(object_storage.join(checkpoint, BEST_DIR), name, listing)
