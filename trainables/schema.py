"""The MLflow run schema every trainable writes and the analysis reads.

One parent run per sweep invocation (tag `embsweep.sweep` = the sweep's name, tag
`embsweep.role` = "sweep"); one child run per trial configuration (tag `mlflow.parentRunId`,
tag `embsweep.role` = "trial", tag `embsweep.config_hash` = `config_hash(config)`), reused when
the trial is retried or resumed.

Per-epoch metrics are logged with `step = epoch` (1-based; step 0 is the untrained encoder when
`epochs = 0`). Classification tasks (MRPC, SICK) replace the `spearman`/`pearson` metrics with
`f1`/`accuracy` (e.g. `dev_f1`, `test_f1_at_best_dev`).

Chained methods (`ws+tmft`, `dapt+tmft`; sweeps/stages_plan.py): each upstream stage is a run with
tag `embsweep.role` = "stage" (method `ws` or `dapt`, param and tag `stage_key`), a child of the
sweep that computed it; every trial that starts from it has params `upstream_method`,
`upstream_run_id` (that run) and `stage_key`.
"""
from __future__ import annotations

import hashlib
import json

PARAMS = (
    "method", "model", "layer", "seed", "task", "epochs", "lr", "batch_size",
    "params_truncated", "git_commit",
)
EPOCH_METRICS = ("dev_spearman", "dev_pearson", "test_spearman", "test_pearson", "train_loss")
FINAL_METRICS = ("best_dev_spearman", "test_spearman_at_best_dev", "test_pearson_at_best_dev", "wall_time_s")

TAG_ROLE = "embsweep.role"
TAG_SWEEP = "embsweep.sweep"
TAG_CONFIG_HASH = "embsweep.config_hash"
TAG_PARENT = "mlflow.parentRunId"


def config_hash(config: dict) -> str:
    """A stable hash of a trial's configuration (keys sorted, values JSON-encoded)."""
    blob = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
