"""`runs:/<run id>` model references: the best-dev checkpoint of a finished trial of any method.

A trial's run carries tag `embsweep.checkpoint` (its latest checkpoint, written by the sweep
driver's MLflow callback); the checkpoint's `best/` folder holds the best-dev weights as a
sentence-transformers model folder. `resolve_run(reference, mlflow_uri)` returns that folder and
refuses, with the reason, a run that does not exist, never recorded a checkpoint, or whose folder is gone. A checkpoint
on an object store is copied once into this node's cache and checked against the file list its trial
wrote (`best.files.json`, whose digest the run's tag `embsweep.best_digest` holds).
"""

from __future__ import annotations

from pathlib import Path

from trainables.core.errors import SweepInputError
from trainables.core.schema import BEST_FILES, TAG_BEST_DIGEST, TAG_CHECKPOINT

PREFIX = "runs:/"
BEST_DIR = "best"


def is_run_reference(name: str) -> bool:
    return str(name).startswith(PREFIX)


def run_id_of(reference: str) -> str:
    run_id = reference[len(PREFIX) :].strip("/").split("/")[0]
    if not run_id:
        raise SweepInputError(f"{reference!r}: a run reference is runs:/<run id> (the id of a trial's MLflow run)")
    return run_id


def resolve_run(reference: str, mlflow_uri: str) -> Path:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    run_id = run_id_of(reference)
    try:
        run = MlflowClient(tracking_uri=mlflow_uri).get_run(run_id)
    except MlflowException:
        raise SweepInputError(
            f"{reference}: no run {run_id} in the MLflow store {mlflow_uri}; pass the --mlflow-uri "
            "of the sweep that ran it"
        ) from None
    checkpoint = run.data.tags.get(TAG_CHECKPOINT)
    if not checkpoint:
        raise SweepInputError(
            f"{reference}: run {run_id} ({run.info.run_name}) recorded no checkpoint (tag {TAG_CHECKPOINT}); "
            "it is not a trial of this project's sweeps, or it ended before its first epoch"
        )
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


def _local_best(reference: str, checkpoint: str, run_id: str, digest: str | None) -> Path | None:
    """The checkpoint's `best/` folder on this node: the folder itself on a local or shared file
    system; from an object store, a copy in this node's cache made once and checked file by file
    against the `best.files.json` the trial wrote, whose digest the run recorded."""
    from trainables.core import object_storage

    if not object_storage.is_uri(checkpoint):
        return Path(checkpoint) / BEST_DIR
    listing = object_storage.read_json(object_storage.join(checkpoint, BEST_FILES))
    if listing is None or not isinstance(listing.get("files"), dict):
        return None
    if digest and object_storage.listing_digest(listing["files"]) != digest:
        raise SweepInputError(
            f"{reference}: the file list of run {run_id}'s best-dev model ({checkpoint}/{BEST_FILES}) is not the "
            "one its trial recorded; the stored checkpoint was changed: run the trial again"
        )
    name = f"runs/{run_id}-{object_storage.listing_digest(listing['files'])[:16]}"
    return object_storage.cached_copy(object_storage.join(checkpoint, BEST_DIR), name, listing)
