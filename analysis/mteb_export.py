"""The suite's scores of finished runs as mteb results: one `TaskResult` JSON per MTEB task, model and
layer under `<out>/results/<model>/<revision>/`, with the `model_meta.json` beside it, which mteb's
own `ResultCache(<out>).load_results(...)` reads back (and its leaderboard and comparison tools).

Which runs: every trial run with suite scores (`python sweeps/evaluate.py` zero-shot runs, the
best-dev weights of trials run with `--eval-sets`, and of trials trained on STS-B with its whole test
split, whose test scores are MTEB's STSBenchmark), optionally only the Pareto-optimal ones
(parameters against the run's report metric, per method and task: analysis/pareto.py).

Names (trainables/evaluation/mteb_encoder.py `model_name`): a zero-shot run of a hub model at its
last layer scored by the model's own pipeline (its sentence-transformers pooling and modules, mean pooling
for a model without that config: the run's `pooling_from` is `model` or `default`, or, for a run recorded
before it, its pooling is the one the model's config names) is the hub id itself, so it sits beside MTEB's
published results; any other is `embsweep/<owner>-<name>`, with `-L<layer>` for a truncated layer and
`-<pooling>` for another pooling, and names the hub id as the model it adapts; a trained trial is
`embsweep/<sweep>-<method>[-<objective>]-<model>[-L<layer>]-s<seed>` with its run id as the revision.

Scores are mteb's fractions (the suite's x100 / 100). Each subset's scores carry
`embsweep_main_score_definition`: which definition the main score uses. The suite computes MTEB 1's
(the published numbers): cosine Spearman for STS; for pair classification the cosine AP (MTEB 2's
main score `max_ap` takes the best AP over cosine, dot, Euclidean and Manhattan, which the suite does
not compute, so `max_ap` is not written); for re-ranking the MAP over the queries that have a positive and a
negative (MTEB 2's `map_at_1000` also counts a query without negatives, with AP 1); for retrieval
trec_eval's nDCG@10 (the same in both). The suite's sets that are no MTEB task (USEB's, STS-B dev,
SICK-R's test split: MTEB's SICK-R is all 9,927 pairs, the suite's `sickr_all`) are listed as skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from trainables.core.errors import SweepInputError

STS_DEFINITION = "MTEB 1 and 2: Spearman of the cosine (cosine_spearman)"
PAIR_DEFINITION = (
    "MTEB 1: AP of the cosine (cosine_ap), as the published MTEB 1 numbers; "
    "MTEB 2's main score max_ap (best AP over cosine, dot, Euclidean, Manhattan) is not computed"
)
RERANK_DEFINITION = (
    "MTEB 1: MAP over the queries with a positive and a negative candidate (map); "
    "MTEB 2's map_at_1000 also scores a query without negatives (AP 1)"
)
RETRIEVAL_DEFINITION = "MTEB 1 and 2: trec_eval's nDCG@10 of the cosine (ndcg_at_10)"


@dataclass(frozen=True)
class TaskMap:
    """How one suite set is written as an MTEB task: suite metric -> mteb keys, the main key."""

    task: str
    metrics: dict = field(default_factory=dict)
    main: str = ""
    definition: str = ""


STS_METRICS = {"spearman": ("cosine_spearman", "spearman"), "pearson": ("cosine_pearson", "pearson")}
PAIR_METRICS = {
    "ap": ("cosine_ap",),
    "accuracy": ("cosine_accuracy",),
    "f1": ("cosine_f1",),
    "precision": ("cosine_precision",),
    "recall": ("cosine_recall",),
}
RERANK_METRICS = {"map": ("map",), "mrr_at_10": ("mrr_at_10",)}
RETRIEVAL_METRICS = {
    "ndcg_at_10": ("ndcg_at_10",),
    "map_at_100": ("map_at_100",),
    "mrr_at_10": ("mrr_at_10",),
    "recall_at_100": ("recall_at_100",),
}


def _sts(task: str) -> TaskMap:
    return TaskMap(task, STS_METRICS, "cosine_spearman", STS_DEFINITION)


TASKS = {
    **{f"sts{year}": _sts(f"STS{year}") for year in range(12, 17)},
    "stsb": _sts("STSBenchmark"),
    "sickr_all": _sts("SICK-R"),
    "twitterurlcorpus": TaskMap("TwitterURLCorpus", PAIR_METRICS, "cosine_ap", PAIR_DEFINITION),
    "twittersemeval2015": TaskMap("TwitterSemEval2015", PAIR_METRICS, "cosine_ap", PAIR_DEFINITION),
    "askubuntudupquestions": TaskMap("AskUbuntuDupQuestions", RERANK_METRICS, "map", RERANK_DEFINITION),
    "scidocsrr": TaskMap("SciDocsRR", RERANK_METRICS, "map", RERANK_DEFINITION),
    "cqadupstackretrieval": TaskMap("CQADupstackRetrieval", RETRIEVAL_METRICS, "ndcg_at_10", RETRIEVAL_DEFINITION),
}


@dataclass
class Export:
    """What was written: one row per (run, task) file, and the suite sets that are no MTEB task."""

    files: list = field(default_factory=list)
    skipped: set = field(default_factory=set)
    runs: int = 0


def task_scores(metrics: dict, name: str) -> dict | None:
    """mteb's score dict (fractions, `main_score`, the definition) of suite set `name` from a run's
    metrics (`<name>_<metric>` x100), or None when the run has no main score for it."""
    mapping = TASKS[name]
    scores = {}
    for ours, keys in mapping.metrics.items():
        value = metrics.get(f"{name}_{ours}")
        if value is not None and np.isfinite(value):
            scores.update({key: float(value) / 100.0 for key in keys})
    if mapping.main not in scores:
        return None
    return {**scores, "main_score": scores[mapping.main], "embsweep_main_score_definition": mapping.definition}


def run_metrics(run: pd.Series) -> dict:
    """The run's numeric metrics; a trial trained on STS-B (`task` stsb) with its whole test split
    also gives its best-dev weights' test scores as `stsb_*` (the same numbers as `--eval-sets stsb`)."""
    metrics = {
        k: float(v)
        for k, v in run.items()
        if isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) and np.isfinite(v)
    }
    whole_test = pd.isna(run.get("max_eval_samples")) or str(run.get("max_eval_samples")) in ("", "None", "0")
    if run.get("task") == "stsb" and whole_test and "stsb_spearman" not in metrics:
        for metric in ("spearman", "pearson"):
            if f"test_{metric}_at_best_dev" in metrics:
                metrics[f"stsb_{metric}"] = metrics[f"test_{metric}_at_best_dev"]
    return metrics


@lru_cache(maxsize=None)
def _depth(model: str) -> int | None:
    """The model's number of layers when its config can be had here (offline: installed or a folder)."""
    from trainables.encoders.loading import load_config, model_depth, resolve_model

    try:
        return model_depth(load_config(resolve_model(model)))
    except (SweepInputError, OSError, ValueError):
        return None


@lru_cache(maxsize=None)
def _own_pooling(model: str) -> str | None:
    """The name of the model's own pipeline (trainables/encoders/st_folder.py; mean pooling for a folder
    without a sentence-transformers config) when its folder is here; else None."""
    from trainables.encoders.loading import local_model_folder
    from trainables.encoders.st_folder import own_pipeline

    folder = local_model_folder(model)
    try:
        pipeline = own_pipeline(folder) if folder is not None else None
    except SweepInputError:
        return None
    return pipeline.name if pipeline is not None else None


def run_identity(run: pd.Series) -> tuple[str, str | None, str | None]:
    """(mteb model name, revision, base model) of a run (see the module docstring)."""
    from trainables.evaluation.mteb_encoder import is_hub_id, model_name

    model, layer = str(run["model"]), int(run["layer"]) if pd.notna(run.get("layer")) else None
    pooling = str(run.get("pooling") or "mean") if pd.notna(run.get("pooling")) else "mean"
    if run.get("method") == "evaluate":
        source = run.get("pooling_from")
        recorded = isinstance(source, str) and source not in ("", "None")
        own = source in ("model", "default") if recorded else pooling == _own_pooling(model)
        name = model_name(model, layer, pooling, _depth(model), own)
        return name, None, (model if name != model and is_hub_id(model) else None)
    short = re.sub(r"[^A-Za-z0-9._-]+", "-", model.rstrip("/").split("/")[-1])
    parts = [str(run.get("sweep") or "sweep"), str(run["method"])]
    objective = run.get("objective")  # TSDAE's: one sweep trains several objectives of one model
    parts += [str(objective)] if isinstance(objective, str) and objective not in ("", "None") else []
    parts += [short] + ([f"L{layer}"] if layer is not None else [])
    if pd.notna(run.get("seed")):
        parts.append(f"s{int(run['seed'])}")
    name = "embsweep/" + re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(parts))
    return name, str(run["run_id"]), model


def pareto_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs on the Pareto front of (parameters, report metric) within each (method, task)."""
    from analysis.pareto import pareto_mask
    from analysis.summary import params_column

    count = params_column(runs)
    if count is None or "metric_report" not in runs:
        raise SweepInputError("--pareto needs runs with a parameter count and a report metric; these have none")
    keep = pd.Series(False, index=runs.index)
    for _, group in runs.groupby([c for c in ("method", "task") if c in runs], dropna=False, sort=False):
        metric = group["metric_report"].dropna().iloc[0] if group["metric_report"].notna().any() else None
        if metric is None or metric not in group:
            continue
        sign = -1.0 if "metric_mode" in group and (group["metric_mode"] == "min").any() else 1.0
        keep[group.index] = pareto_mask(group[count].astype(float), sign * group[metric].astype(float))
    return runs[keep]


def scored_tasks(run: pd.Series) -> list[str]:
    """The suite sets of `run` that are MTEB tasks with a main score."""
    metrics = run_metrics(run)
    return [name for name in TASKS if task_scores(metrics, name) is not None]


def why_nothing(runs: pd.DataFrame) -> str:
    """Why no run of `runs` gives an MTEB result (for the refusal of an export that would write nothing)."""
    if runs.empty:
        return "no trial runs match (check --mlflow-uri, --experiment and --where)"
    subset = 0
    for _, run in runs.iterrows():
        sample = run.get("max_eval_samples")
        subset += run.get("task") == "stsb" and pd.notna(sample) and str(sample) not in ("", "None", "0")
    parts = []
    if subset:
        parts.append(
            f"{subset} scored the test split on a subset (--max-eval-samples), which is not MTEB's STSBenchmark"
        )
    if len(runs) - subset:
        parts.append(f"{len(runs) - subset} have no suite scores on an MTEB task")
    return (
        f"none of the {len(runs)} runs has a score on a whole MTEB task ({'; '.join(parts)}); evaluate their "
        "best-dev models on the suite (python sweeps/evaluate.py --models runs:/<run id> --sets stsb,...) or train "
        "with --eval-sets"
    )


def identities(runs: pd.DataFrame) -> dict:
    """Each run's (mteb model name, revision, base model), the revision made the run id wherever two runs
    would share a name and revision (two evaluations of one model): no two results share a file."""
    found = {index: run_identity(run) for index, run in runs.iterrows()}
    counts: dict = {}
    for name, revision, _ in found.values():
        counts[(name, revision)] = counts.get((name, revision), 0) + 1
    return {
        index: (name, str(runs.loc[index, "run_id"]) if counts[(name, revision)] > 1 else revision, base)
        for index, (name, revision, base) in found.items()
    }


def export_runs(runs: pd.DataFrame, out) -> Export:
    """Write every run's MTEB-task scores under `out` (mteb's cache layout); see the module docstring.
    SweepInputError (`why_nothing`) where no run gives a result: nothing is written then."""
    if not any(scored_tasks(run) for _, run in runs.iterrows()):
        raise SweepInputError(f"python -m analysis mteb: nothing to export: {why_nothing(runs)}")
    import mteb
    from mteb.cache import ResultCache
    from mteb.results import TaskResult

    from trainables.evaluation.mteb_encoder import model_meta

    cache, export = ResultCache(Path(out)), Export()
    named = [runs[c].dropna() for c in ("sets", "eval_sets") if c in runs]
    export.skipped = {s for column in named for text in column for s in str(text).split(",") if s and s not in TASKS}
    export.skipped.discard("none")
    names = identities(runs)
    for index, run in runs.iterrows():
        metrics = run_metrics(run)
        name, revision, base = names[index]
        written = 0
        for set_name in TASKS:
            scores = task_scores(metrics, set_name)
            if scores is None:
                continue
            task = mteb.get_task(TASKS[set_name].task)
            split = task.metadata.eval_splits[0]
            result = TaskResult.from_task_results(task, {split: {"default": scores}}, evaluation_time=None)
            params = run.get("params_truncated")
            meta = model_meta(
                name, revision, None, n_parameters=int(params) if pd.notna(params) else None, adapted_from=base
            )
            cache.save_to_cache(result, meta)
            export.files.append(cache.get_task_result_path(task.metadata.name, meta))
            written += 1
        export.runs += bool(written)
    return export
