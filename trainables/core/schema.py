"""The MLflow run schema every trainable writes and the analysis reads.

One parent run per sweep invocation (tag `embsweep.sweep` = the sweep's name, tag
`embsweep.role` = "sweep"); one child run per trial configuration (tag `mlflow.parentRunId`,
tag `embsweep.role` = "trial", tag `embsweep.config_hash` = `config_hash(config)`), reused when
the trial is retried or resumed.

Per-epoch metrics are logged with `step = epoch` (1-based; step 0 is the untrained encoder when
`epochs = 0`): dev scores, the loss and the best dev score so far every epoch; the test scores of
the best-dev weights once, at the last epoch (every epoch, with per-epoch test scores beside them,
when the trial runs with `test_every_epoch`). Classification tasks (MRPC, SICK) replace the `spearman`/`pearson`
metrics with
`f1`/`accuracy` (e.g. `dev_f1`, `test_f1_at_best_dev`).

Chained methods (`ws+tmft`, `dapt+tmft`; sweeps/engine/stages_plan.py): each upstream stage is a run with
tag `embsweep.role` = "stage" (method `ws` or `dapt`, param and tag `stage_key`), a child of the
sweep that computed it; every trial that starts from it has params `upstream_method`,
`upstream_run_id` (that run) and `stage_key`.

Every run also records the method's metric contract (trainables/core/method.py `MetricContract.params`:
`metric_primary`, `metric_report`, `metric_companion`, `metric_mode`, `sweep_axes`,
`select_axis`, `seed_axis`, `metric_columns`), which the analysis groups and selects by, and each trial run carries
tag `embsweep.checkpoint`: its latest checkpoint, whose `best/` folder holds the best-dev weights
as a sentence-transformers model (what `runs:/<run id>` model references load).

Where a trial ran: tags `node_id`, `gpu_ids` and `device` name its latest placement, and one tag
`embsweep.placement.from_epoch_<NNNN>` per placement (JSON of those three) from the first epoch it
reported there, so a trial that moved (its node died, it was retried or resumed elsewhere) names every
node it ran on (`placement_history`, `placement_of_epoch`).
"""

from __future__ import annotations

import hashlib
import json

PARAMS = ("method", "model", "layer", "seed", "task", "epochs", "lr", "batch_size", "params_truncated", "git_commit")
EPOCH_METRICS = ("dev_spearman", "dev_pearson", "train_loss")
RUNNING_METRICS = (
    "best_dev_spearman",
    "wall_time_s",
    "train_time_s",
)  # every epoch: the best so far, seconds so far (all; training only)
REPORT_METRICS = (
    "test_spearman_at_best_dev",
    "test_pearson_at_best_dev",
)  # the best-dev weights' test scores, at the end
FINAL_METRICS = RUNNING_METRICS + REPORT_METRICS

# Result keys logged once as params of the trial's run, not as metrics.
RESULT_PARAMS = ("params_truncated", "params_paper", "precision_used", "forward_chunk_used")
# Result keys that are bookkeeping (Tune's own, the trial's placement, its progress), never metrics.
NOT_METRICS = frozenset(
    {
        "done",
        "progress",
        "training_iteration",
        "iterations_since_restore",
        "time_this_iter_s",
        "time_total_s",
        "time_since_restore",
        "timestamp",
        "pid",
        "timesteps_total",
        "episodes_total",
        "timesteps_since_restore",
        "node_ip",
        "hostname",
        "date",
        "trial_id",
        "experiment_id",
        "experiment_tag",
        "should_checkpoint",
    }
)

TAG_ROLE = "embsweep.role"
TAG_SWEEP = "embsweep.sweep"
TAG_CONFIG_HASH = "embsweep.config_hash"
TAG_PARENT = "mlflow.parentRunId"
TAG_FAILURE = "embsweep.failure"  # why a trial failed for good (not retried)
TAG_CHECKPOINT = "embsweep.checkpoint"  # the trial's latest checkpoint; its best-dev model is <checkpoint>/best
TAG_SIMULATED = "embsweep.simulated"  # "true" on a --simulate sweep's runs: synthetic scores, never a measurement
TAG_BEST_DIGEST = "embsweep.best_digest"  # digest of <checkpoint>/best.files.json: what a copy is checked against
TAG_TRIAL_KEY = "embsweep.trial_key"  # the trial's key: what decides its result (sweeps/engine/trial_keys.py)
TAG_REUSED_FROM = "embsweep.reused_from"  # on a trial run linked, not computed: the run that computed it
TAG_REUSED_SWEEP = "embsweep.reused_from_sweep"  # ... and that run's sweep
# the params a trial run records of what its key was made of (its config's own params and data_sha_* besides)
TRIAL_KEY_PARAMS = ("trial_key_fields", "model_identity", "code_hash", "device_kind")
TAG_PLACEMENT_FROM_EPOCH = "embsweep.placement.from_epoch_"  # + epoch (4 digits): where the trial ran from then on
PLACEMENT_KEYS = ("node_id", "gpu_ids", "device")  # a trial's result keys that say where it ran
# on every experiment the tool creates: MLflow 3's UI then opens it on its training runs, not in GenAI mode
EXPERIMENT_KIND_TAGS = {"mlflow.experimentKind": "custom_model_development"}
BEST_FILES = "best.files.json"  # beside best/ in a checkpoint: each file of best/ with its size and sha256


def config_hash(config: dict) -> str:
    """A stable hash of a trial's configuration (keys sorted, values JSON-encoded)."""
    blob = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def placement_tag(epoch: int) -> str:
    return f"{TAG_PLACEMENT_FROM_EPOCH}{int(epoch):04d}"


def placement_history(tags: dict) -> list[tuple[int, dict]]:
    """A run's placements, (first epoch there, {node_id, gpu_ids, device}), in epoch order: each epoch's entry
    (sweeps/engine/tracking.py writes one an epoch), runs of the same placement read as one."""
    found = sorted(
        (int(key[len(TAG_PLACEMENT_FROM_EPOCH) :]), json.loads(value))
        for key, value in tags.items()
        if key.startswith(TAG_PLACEMENT_FROM_EPOCH)
    )
    return [(epoch, where) for i, (epoch, where) in enumerate(found) if i == 0 or found[i - 1][1] != where]


def placement_of_epoch(tags: dict, epoch: int) -> dict | None:
    """Where `epoch` ran: the last placement recorded from an epoch at or before it (None before the first)."""
    before = [placement for first, placement in placement_history(tags) if first <= epoch]
    return before[-1] if before else None
