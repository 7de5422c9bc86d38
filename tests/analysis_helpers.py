"""A small MLflow SQLite store written through MlflowClient with the sweeps' run schema, for the
analysis tests and notebooks.

Two sweeps (parent runs, tag embsweep.role=sweep):
- "electra_layers" (method tmft): 2 models x 3 layers x 3 seeds, all FINISHED, plus the runs the
  analysis must leave out: one FAILED, one RUNNING, one FINISHED without its test metric, and an
  older duplicate of a finished configuration.
- "electra_dapt" (method dapt+tmft): 2 models x 3 layers x 2 seeds, all FINISHED.

Every value is a closed-form function of (method, model, layer, seed) so tests can recompute the
expected statistics independently (`Store.complete` holds the per-seed numbers of complete runs).
These runs log no metric contract, as runs did before contracts existed. The ELECTRA-D tmft
numbers put the best *test* layer (12) away from the best *dev* layer (6), so a selection on test
would be caught.

`log_runs` writes runs of any metric contract (one sweep, one row each); `evaluation_store`
writes a zero-shot evaluation sweep with the evaluate method's own contract: one model x two
poolings x layers 0-3, no seed, no task, the metrics `trainables/evaluation/sets.py` logs at step 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from trainables.core.schema import TAG_PARENT, TAG_ROLE, TAG_SWEEP, config_hash

ELECTRA_D = "google/electra-base-discriminator"
BERT = "bert-base-cased"
MODELS = (ELECTRA_D, BERT)
LAYERS = (0, 6, 12)
EPOCHS = 3
PARAMS_TRUNCATED = {
    (ELECTRA_D, 0): 23_837_184,
    (ELECTRA_D, 6): 66_364_416,
    (ELECTRA_D, 12): 108_891_648,
    (BERT, 0): 22_268_928,
    (BERT, 6): 64_796_160,
    (BERT, 12): 107_323_392,
}
# (method, model, layer) -> (dev Spearman, dev Pearson, test Spearman, test Pearson), before seed offsets.
BASE = {
    ("tmft", ELECTRA_D, 0): (70.0, 69.0, 65.0, 64.0),
    ("tmft", ELECTRA_D, 6): (82.0, 81.5, 76.0, 75.5),
    ("tmft", ELECTRA_D, 12): (75.0, 74.0, 77.0, 76.0),
    ("tmft", BERT, 0): (72.0, 71.0, 66.0, 65.5),
    ("tmft", BERT, 6): (80.0, 79.0, 78.0, 77.0),
    ("tmft", BERT, 12): (86.0, 85.0, 83.0, 82.5),
    ("dapt+tmft", ELECTRA_D, 0): (71.0, 70.0, 66.0, 65.0),
    ("dapt+tmft", ELECTRA_D, 6): (83.0, 82.0, 78.0, 77.0),
    ("dapt+tmft", ELECTRA_D, 12): (84.0, 83.5, 79.0, 78.0),
    ("dapt+tmft", BERT, 0): (73.0, 72.0, 67.0, 66.0),
    ("dapt+tmft", BERT, 6): (81.0, 80.0, 79.0, 78.0),
    ("dapt+tmft", BERT, 12): (85.5, 85.0, 82.5, 82.0),
}
SEED_OFFSETS = (-0.6, 0.2, 0.7, 0.1, -0.3)
DEV_EPOCH_DELTA = (-2.0, 0.0, -1.0)  # the best dev epoch is epoch 2
TEST_EPOCH_DELTA = (-1.0, 0.0, 1.5)  # epoch 3 has a higher test score: must not be reported


def values(method: str, model: str, layer: int, seed: int) -> dict[str, float]:
    """The selected (best dev epoch) numbers of one trial."""
    dev, dev_p, test, test_p = BASE[(method, model, layer)]
    k = SEED_OFFSETS[seed] * (1 + layer / 12)
    return {
        "dev_spearman": dev + k,
        "dev_pearson": dev_p + 0.5 * k,
        "test_spearman": test - 0.8 * k,
        "test_pearson": test_p + 1.3 * k,
    }


@dataclass
class Store:
    uri: str
    path: Path
    experiment: str
    complete: list = field(default_factory=list)  # dicts: method, model, layer, seed + values()
    excluded: dict = field(default_factory=dict)  # run_id -> expected reason prefix
    n_trials: int = 0


def _log_trial(
    client,
    experiment_id,
    parent_id,
    method,
    model,
    layer,
    seed,
    *,
    status="FINISHED",
    epochs_logged=EPOCHS,
    final=True,
    drop=(),
    log_dev_pearson=True,
    end_time=None,
    shift=0.0,
):
    from mlflow.entities import Metric, Param

    params = {
        "method": method,
        "model": model,
        "layer": layer,
        "seed": seed,
        "task": "stsb",
        "epochs": EPOCHS,
        "lr": 2e-5,
        "batch_size": 32,
        "params_truncated": PARAMS_TRUNCATED[(model, layer)],
        "git_commit": "0123abc",
    }
    tags = {TAG_PARENT: parent_id, TAG_ROLE: "trial", "embsweep.config_hash": config_hash(params)}
    run = client.create_run(experiment_id, tags=tags, run_name=f"{method}-{layer}-{seed}")
    v = {k: x + shift for k, x in values(method, model, layer, seed).items()}
    metrics = []
    for epoch in range(1, epochs_logged + 1):
        d, t = DEV_EPOCH_DELTA[epoch - 1], TEST_EPOCH_DELTA[epoch - 1]
        epoch_values = {
            "dev_spearman": v["dev_spearman"] + d,
            "dev_pearson": v["dev_pearson"] + d / 2,
            "test_spearman": v["test_spearman"] + t,
            "test_pearson": v["test_pearson"] + t,
            "train_loss": 0.1 / epoch,
        }
        metrics += [Metric(k, x, 1_000 * epoch, epoch) for k, x in epoch_values.items()]
    if final:
        finals = {
            "best_dev_spearman": v["dev_spearman"],
            "test_spearman_at_best_dev": v["test_spearman"],
            "test_pearson_at_best_dev": v["test_pearson"],
            "wall_time_s": 10.0 + layer + seed,
            "train_time_s": 8.0 + layer + seed,
        }
        if log_dev_pearson:
            finals["dev_pearson_at_best_dev"] = v["dev_pearson"]
        metrics += [Metric(k, x, 9_000, 0) for k, x in finals.items() if k not in drop]
    client.log_batch(run.info.run_id, metrics=metrics, params=[Param(k, str(x)) for k, x in params.items()])
    if status != "RUNNING":
        client.set_terminated(run.info.run_id, status=status, end_time=end_time)
    return run.info.run_id, {"method": method, "model": model, "layer": layer, "seed": seed, **v}


def build_store(directory, experiment: str = "electra") -> Store:
    """Write the store described in the module docstring under `directory`; return its facts."""
    from mlflow import MlflowClient

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "mlflow.db"
    store = Store(uri=f"sqlite:///{path.resolve()}", path=path, experiment=experiment)
    client = MlflowClient(tracking_uri=store.uri)
    experiment_id = client.create_experiment(experiment, artifact_location=(directory / "artifacts").resolve().as_uri())
    # A second experiment with a stray run: must not leak into --experiment electra.
    other = client.create_experiment("scratch", artifact_location=(directory / "artifacts2").resolve().as_uri())
    client.set_terminated(client.create_run(other).info.run_id)

    def parent(sweep):
        run = client.create_run(experiment_id, tags={TAG_ROLE: "sweep", TAG_SWEEP: sweep}, run_name=sweep)
        return run.info.run_id

    tmft_parent = parent("electra_layers")
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    duplicate_id, _ = _log_trial(
        client, experiment_id, tmft_parent, "tmft", BERT, 6, 0, end_time=an_hour_ago, shift=-5.0
    )
    for model in MODELS:
        for layer in LAYERS:
            for seed in range(3):
                # BERT runs leave dev_pearson_at_best_dev out: the loader reads it from the history.
                _, record = _log_trial(
                    client, experiment_id, tmft_parent, "tmft", model, layer, seed, log_dev_pearson=model != BERT
                )
                store.complete.append(record)
    failed, _ = _log_trial(
        client, experiment_id, tmft_parent, "tmft", ELECTRA_D, 6, 3, status="FAILED", epochs_logged=1, final=False
    )
    running, _ = _log_trial(
        client, experiment_id, tmft_parent, "tmft", BERT, 0, 3, status="RUNNING", epochs_logged=2, final=False
    )
    no_test, _ = _log_trial(
        client, experiment_id, tmft_parent, "tmft", ELECTRA_D, 0, 4, drop=("test_spearman_at_best_dev",)
    )
    client.set_terminated(tmft_parent)
    store.excluded = {
        failed: "status FAILED",
        running: "status RUNNING",
        no_test: "missing metric test_spearman_at_best_dev",
        duplicate_id: "duplicate of newer run",
    }

    dapt_parent = parent("electra_dapt")
    for model in MODELS:
        for layer in LAYERS:
            for seed in range(2):
                _, record = _log_trial(client, experiment_id, dapt_parent, "dapt+tmft", model, layer, seed)
                store.complete.append(record)
    client.set_terminated(dapt_parent)
    store.n_trials = len(store.complete) + len(store.excluded)
    return store


def log_runs(directory, contract: dict, rows: list[dict], experiment: str = "made") -> str:
    """A store under `directory` with one sweep whose trial runs each log `contract` and one row:
    its floats as final metrics (step 0), anything else as params. Returns the store's URI."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    uri = f"sqlite:///{Path(directory).resolve() / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment_id = client.create_experiment(
        experiment, artifact_location=(Path(directory) / "artifacts").resolve().as_uri()
    )
    parent = client.create_run(experiment_id, tags={TAG_ROLE: "sweep", TAG_SWEEP: experiment}).info.run_id
    for row in rows:
        params = {**contract, **{k: v for k, v in row.items() if not isinstance(v, float)}}
        tags = {TAG_PARENT: parent, TAG_ROLE: "trial", "embsweep.config_hash": config_hash(params)}
        run = client.create_run(experiment_id, tags=tags)
        client.log_batch(
            run.info.run_id,
            params=[Param(k, str(v)) for k, v in params.items()],
            metrics=[Metric(k, v, 0, 0) for k, v in row.items() if isinstance(v, float)],
        )
        client.set_terminated(run.info.run_id)
    client.set_terminated(parent)
    return uri


EVAL_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
EVAL_SETS = ("sts12", "stsb", "sickr")
EVAL_LAYERS = (0, 1, 2, 3)
POOLINGS = ("mean", "cls")


def evaluation_scores(pooling: str, layer: int) -> dict[str, float]:
    """The final metrics of one zero-shot trial: each set's Spearman peaks at layer 2, [CLS] is
    below mean pooling, and every set has its own level (so lines and columns cannot be swapped)."""
    out = {}
    for level, name in zip((50.0, 60.0, 55.0), EVAL_SETS):
        spearman = level + 5.0 * min(layer, 2) - 3.0 * max(layer - 2, 0) - (8.0 if pooling == "cls" else 0.0)
        out.update(
            {f"{name}_spearman": spearman, f"{name}_pearson": spearman - 1.0, f"{name}_spearman_mean": spearman - 0.5}
        )
    out["sts12_MSRpar_spearman"] = out["sts12_spearman"] - 2.0
    out["mean_spearman"] = sum(out[f"{name}_spearman"] for name in EVAL_SETS) / len(EVAL_SETS)
    return out


def evaluation_store(directory) -> str:
    """The zero-shot evaluation sweep described in the module docstring; returns its URI."""
    from argparse import Namespace

    from trainables.methods.evaluate.method import Evaluate

    contract = Evaluate.metrics(Namespace(sets=list(EVAL_SETS))).params()
    rows = [
        {
            "method": "evaluate",
            "model": EVAL_MODEL,
            "pooling": pooling,
            "layer": layer,
            "sets": ",".join(EVAL_SETS),
            "params_truncated": 1_000_000 * (layer + 1),
            **evaluation_scores(pooling, layer),
        }
        for pooling in POOLINGS
        for layer in EVAL_LAYERS
    ]
    return log_runs(directory, contract, rows, experiment="zero-shot")


_SHARED: dict = {}


def shared_store(tmp_path_factory) -> Store:
    """The store above, built once per test session (several test modules read it, none writes)."""
    if "store" not in _SHARED:
        _SHARED["store"] = build_store(tmp_path_factory.mktemp("analysis-store"))
    return _SHARED["store"]


PAPER_TABLE2 = [  # (model, layer, params in millions, test Spearman, last layer, best by dev): the paper's Table 2
    ("google/bert_uncased_L-2_H-128_A-2", 2, 4.37, 69.80, 2, True),
    ("google/bert_uncased_L-4_H-256_A-4", 4, 11.10, 75.55, 4, True),
    ("google/bert_uncased_L-4_H-512_A-8", 4, 28.50, 79.13, 4, True),
    ("google/bert_uncased_L-8_H-512_A-8", 8, 41.11, 80.74, 8, True),
    ("bert-base-cased", 12, 107.72, 82.74, 12, True),
    ("bert-large-cased", 24, 332.53, 85.47, 24, True),
    ("google/electra-small-discriminator", 1, 4.76, 68.88, 12, True),
    ("google/electra-small-discriminator", 12, 13.45, 66.72, 12, False),
    ("google/electra-base-discriminator", 3, 45.10, 75.29, 12, True),
    ("google/electra-base-discriminator", 12, 108.89, 66.82, 12, False),
    ("google/electra-large-discriminator", 12, 182.94, 80.90, 24, True),
    ("google/electra-small-generator", 12, 13.45, 81.55, 12, True),
    ("google/electra-base-generator", 12, 33.31, 82.57, 12, True),
    ("google/electra-large-generator", 24, 50.74, 84.63, 24, True),
]


def paper_summary():
    """A summary-shaped DataFrame of the paper's Table 2 (one seed's worth of numbers)."""
    import pandas as pd

    rows = [
        dict(
            method="tmft",
            task="stsb",
            model=m,
            layer=l,
            metric="spearman",
            n_seeds=5,
            params_truncated=p * 1e6,
            dev_mean=t + (5 if best else -5),
            dev_std=0.4,
            test_mean=t,
            test_std=0.5,
            is_best_layer=best,
            is_last_layer=l == last,
        )
        for m, l, p, t, last, best in PAPER_TABLE2
    ]
    return pd.DataFrame(rows)
