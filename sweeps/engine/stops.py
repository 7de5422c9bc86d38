"""How a sweep that cannot go on stops: a refusal before it started removes what its planning created
(`absent_paths`, `remove_new`); a full disk (`no_space`) or a failed object store (`storage_fault`) ends
it in one line saying what to do (`stopped_for_space`, `stopped_for_storage`), with its MLflow runs
marked FAILED, none left RUNNING (`fail_open_runs`)."""

from __future__ import annotations

import errno
import os
import shlex
import shutil
from pathlib import Path

from sweeps.engine import storage
from trainables.core import object_storage


def absent_paths(args) -> list[Path]:
    """What a sweep's planning may create under a local storage path that is not there yet: the storage
    path itself and the tiny models of --smoke-test (a refusal removes them again)."""
    from trainables.encoders.tiny import smoke_models_dir

    if storage.is_uri(args.storage_path):
        return []
    root = Path(storage.absolute(args.storage_path))
    return [p for p in (smoke_models_dir(str(root)), root) if not p.exists()]


def remove_new(paths) -> None:
    for path in paths:
        if path.name == "_smoke_models":
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def no_space(error: BaseException) -> OSError | None:
    """The ENOSPC error behind `error` (itself, or the error it was raised from), if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return error
        error = error.__cause__ or error.__context__
    return None


STORAGE_MARKS = ("AWS Error", "NO_SUCH_BUCKET", "NoSuchBucket", "NoSuchKey", "curlCode", "ACCESS_DENIED", "S3")


def storage_fault(error: BaseException) -> BaseException | None:
    """The object store's error behind `error` (itself or what it was raised from): the store did not
    answer after the retries (`object_storage.StorageUnavailable`), boto's errors, or pyarrow's S3
    errors (a bucket or objects lost, access denied); None for any other error."""
    from botocore.exceptions import BotoCoreError, ClientError

    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(
            error, (object_storage.StorageUnavailable, object_storage.StorageLost, BotoCoreError, ClientError)
        ):
            return error
        if isinstance(error, OSError) and error.errno != errno.ENOSPC and any(m in str(error) for m in STORAGE_MARKS):
            return error
        error = error.__cause__ or error.__context__
    return None


def stopped_for_storage(plan, error: BaseException) -> str:
    """Mark the sweep's runs FAILED (none left RUNNING) and say, in one line, which store failed and what to do."""
    from trainables.core.errors import redact

    cause = redact(" ".join(str(error).split())[:240]) or type(error).__name__
    retried = (
        f"retried for up to {object_storage.retry_seconds():.0f} s while it did not answer ({object_storage.RETRY_ENV})"
    )
    if plan is None:
        return (
            f"the object store failed while the sweep was planned ({cause}; {retried}); nothing started. Fix the "
            "store, then run again"
        )
    marked = fail_open_runs(plan)
    return (
        f"the object store of {redact(plan.sweep_dir)} failed ({cause}; {retried}); the sweep stopped ({marked}). "
        "When the store answers again with the sweep's objects, continue with --resume "
        f"{shlex.quote(redact(plan.sweep_dir))}; "
        "if its bucket or objects were lost, start the sweep again under another --name"
        + (f" (Ray's log: {plan.ray_log})" if plan.ray_log else "")
    )


def stopped_for_space(plan, error: OSError) -> str:
    """Mark the sweep's runs FAILED (none left RUNNING) and say, in one line, where the disk is full."""
    folder = os.path.dirname(str(error.filename)) if error.filename else plan.sweep_dir
    marked = fail_open_runs(plan)
    if storage.read_json(storage.join(plan.sweep_dir, storage.SWEEP_FILE)) is None:  # it never started
        object_storage.delete(storage.join(plan.sweep_dir, storage.CLAIM_FILE))
        then = f"start it again (--name {plan.name} is free)"
    else:
        then = f"continue it with --resume {shlex.quote(str(plan.sweep_dir))}"
    return f"no space left on the device holding {folder}; the sweep stopped ({marked}). Free space there, then {then}"


def fail_open_runs(plan) -> str:
    """Mark the parent run and every run of the sweep still RUNNING as FAILED; say what was done."""
    if plan.parent_run_id is None:
        return "no MLflow run had started"
    from mlflow import MlflowClient

    from trainables.core.schema import TAG_PARENT

    try:
        client = MlflowClient(tracking_uri=plan.mlflow_uri)
        experiment = client.get_run(plan.parent_run_id).info.experiment_id
        children = client.search_runs(
            [experiment], f"tags.`{TAG_PARENT}` = '{plan.parent_run_id}' and attributes.status = 'RUNNING'"
        )
        for run in children:
            client.set_terminated(run.info.run_id, "FAILED")
        client.set_terminated(plan.parent_run_id, "FAILED")
    except Exception as error:  # the store may sit on the full disk too
        return f"its MLflow runs could not be marked FAILED in {plan.mlflow_uri}: {str(error).splitlines()[0][:200]}"
    return f"its parent run and {len(children)} running trial run(s) are marked FAILED in MLflow"
