"""`runs:/<run id>` model references: the best-dev checkpoint of a finished trial of any method.

A trial's run carries tag `embsweep.checkpoint` (its latest checkpoint, written by the sweep
driver's MLflow callback); the checkpoint's `best/` folder holds the best-dev weights as a
sentence-transformers model folder. `resolve_run(reference, mlflow_uri)` returns that folder (a
checkpoint on a remote filesystem is copied into the local cache first) and refuses, with the
reason, a run that does not exist, never recorded a checkpoint, or whose folder is gone.
"""

from __future__ import annotations

from pathlib import Path

from trainables.core.errors import SweepInputError
from trainables.core.schema import TAG_CHECKPOINT

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
    best = _local_copy(checkpoint, run_id) / BEST_DIR
    if not (best / "config.json").is_file() and run.data.params.get("keep_checkpoints") == "none":
        raise SweepInputError(
            f"{reference}: run {run_id} ({run.info.run_name}) kept no model (its sweep ran with "
            "--keep-checkpoints none); run the trial again with --keep-checkpoints best"
        )
    if not (best / "config.json").is_file():
        raise SweepInputError(
            f"{reference}: the best-dev model of run {run_id} is not at {best} (the sweep's folder was "
            "moved or deleted); pass the model folder itself instead"
        )
    return best


def _local_copy(checkpoint: str, run_id: str) -> Path:
    if "://" not in checkpoint:
        return Path(checkpoint)
    import pyarrow.fs

    target = Path("~/.cache/embsweep/runs").expanduser() / run_id
    if not target.is_dir():
        source, inner = pyarrow.fs.FileSystem.from_uri(checkpoint)
        pyarrow.fs.copy_files(
            inner, str(target), source_filesystem=source, destination_filesystem=pyarrow.fs.LocalFileSystem()
        )
    return target
