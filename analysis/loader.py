"""The one reader of MLflow: `load_runs(uri)` -> a tidy DataFrame, one row per trial run.

Rows are the child runs of the sweeps (tag `embsweep.role` = "trial", see `trainables.core.schema`),
whatever their status: the summary decides what counts as complete. Columns:

- identity: `run_id`, `parent_run_id`, `sweep` (the sweep's name: the trial's or its parent's
  `embsweep.sweep` tag, else the parent run's name), `experiment`, `run_name`, `status`,
  `start_time`, `end_time` (UTC timestamps), `config_hash`, `reused_from` (the run that computed a
  trial linked instead of run: sweeps/engine/reuse.py; such a link is left out where that run is read
  too, so a reused trial counts once), `presets` (where runs have a `preset`: the run's and those of the links
  left out; `of_preset` selects by it);
- every param of the run (the schema's `PARAMS` first; `layer`, `seed`, `epochs`, `batch_size`,
  `params_truncated` and `params_paper` as integers, `lr` as a float; any other param kept as text); their names
  are in `frame.attrs["param_columns"]`;
- every final metric of the run (`best_dev_spearman`, `test_spearman_at_best_dev`, ...). Per-epoch
  metrics (`dev_spearman`, `test_f1`, `train_loss`: `<split>_<name>`) are left out, because a
  run's "latest value" of those is the last epoch, not the selected one, unless the run's metric
  contract names them (`metric_primary`, `metric_report`, `metric_companion`, `metric_columns`).

When a run lacks `dev_pearson_at_best_dev` (or `dev_accuracy_at_best_dev` for F1 tasks), it is
filled from the per-epoch history: the companion metric at the epoch with the best dev primary
metric (the first such epoch; for an epoch logged twice, the last value logged).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.names import RANDOM_INIT_SUFFIX
from trainables.core.errors import SweepInputError
from trainables.core.schema import (
    PARAMS,
    TAG_CONFIG_HASH,
    TAG_PARENT,
    TAG_REUSED_FROM,
    TAG_ROLE,
    TAG_SIMULATED,
    TAG_SWEEP,
)

ROLE_TRIAL = "trial"
ROLE_SWEEP = "sweep"
INT_PARAMS = ("layer", "seed", "epochs", "batch_size", "params_truncated", "params_paper")
FLOAT_PARAMS = ("lr",)
ID_COLUMNS = (
    "run_id",
    "parent_run_id",
    "sweep",
    "experiment",
    "run_name",
    "status",
    "start_time",
    "end_time",
    "config_hash",
    "reused_from",
    "presets",
)
# Primary metric of a task -> its companion reported beside it (Table 2: Spearman / Pearson).
COMPANION = {"spearman": "pearson", "f1": "accuracy"}
_PER_EPOCH = re.compile(r"^(dev|test|train)_[a-z0-9]+$")
_PAGE = 1000


class AnalysisError(SweepInputError):
    """The analysis cannot run on what it was given (no store, no experiment, no runs)."""


def _client(tracking_uri: str):
    from mlflow import MlflowClient

    if tracking_uri.startswith("sqlite:///"):
        path = Path(tracking_uri[len("sqlite:///") :])
        if not path.is_file():
            raise AnalysisError(
                f"No MLflow database at {path} (from --mlflow-uri {tracking_uri}). An absolute path needs four "
                "slashes: sqlite:////abs/path/mlflow.db."
            )
    return MlflowClient(tracking_uri=tracking_uri)


def _paged(search, **kwargs) -> list:
    """Every item of an MLflow search, following `page_token` until the last page."""
    items, token = [], None
    while True:
        page = search(max_results=_PAGE, page_token=token, **kwargs)
        items.extend(page)
        token = page.token
        if not token:
            return items


def _experiments(client, experiment: str | None) -> dict[str, str]:
    """{experiment id: name} for the named experiment, or for every active one."""
    if experiment is not None:
        found = client.get_experiment_by_name(experiment)
        if found is None or found.lifecycle_stage != "active":
            names = sorted(e.name for e in _paged(client.search_experiments))
            raise AnalysisError(
                f"No experiment named {experiment!r} in this MLflow store; it has: {', '.join(names) or 'none'}."
            )
        return {found.experiment_id: found.name}
    return {e.experiment_id: e.name for e in _paged(client.search_experiments)}


def _search(client, experiment_ids: list[str], role: str) -> list:
    return _paged(client.search_runs, experiment_ids=experiment_ids, filter_string=f"tags.`{TAG_ROLE}` = '{role}'")


def _is_final_metric(name: str) -> bool:
    return not _PER_EPOCH.match(name)


def _timestamp(ms):
    return pd.NaT if ms is None else pd.Timestamp(ms, unit="ms", tz="UTC")


def _row(run, experiments: dict[str, str], parents: dict) -> dict:
    info, data = run.info, run.data
    parent_id = data.tags.get(TAG_PARENT)
    parent = parents.get(parent_id)
    sweep = data.tags.get(TAG_SWEEP)
    if sweep is None and parent is not None:
        sweep = parent.data.tags.get(TAG_SWEEP) or parent.info.run_name
    row = dict(data.params)
    named = {data.params.get(k) for k in ("metric_primary", "metric_report", "metric_companion")}
    named.update(data.params.get("metric_columns", "").split(","))  # what the run's contract names is final
    row.update({k: v for k, v in data.metrics.items() if _is_final_metric(k) or k in named})
    row.update(
        {  # identity last: a param of the same name never hides it
            "run_id": info.run_id,
            "parent_run_id": parent_id,
            "sweep": sweep,
            "experiment": experiments.get(info.experiment_id, info.experiment_id),
            "run_name": info.run_name,
            "status": info.status,
            "start_time": _timestamp(info.start_time),
            "end_time": _timestamp(info.end_time),
            "config_hash": data.tags.get(TAG_CONFIG_HASH) or data.params.get("config_hash"),
            "reused_from": data.tags.get(TAG_REUSED_FROM),
        }
    )
    return row


def _at_best_epoch(client, run_id: str, primary: str, companion: str) -> float:
    """`dev_<companion>` at the epoch of the best `dev_<primary>` (first best epoch), or NaN."""

    def by_step(key):
        history = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
        return pd.Series({m.step: m.value for m in history}, dtype=float)  # last value per step wins

    scores, other = by_step(f"dev_{primary}"), by_step(f"dev_{companion}")
    if scores.empty or other.empty:
        return np.nan
    return float(other.get(scores.sort_index().idxmax(), np.nan))


def _fill_from_history(client, frame: pd.DataFrame) -> pd.DataFrame:
    for primary, companion in COMPANION.items():
        best, target = f"best_dev_{primary}", f"dev_{companion}_at_best_dev"
        if best not in frame:
            continue
        if target not in frame:
            frame[target] = np.nan
        missing = frame[best].notna() & frame[target].isna()
        for index in frame.index[missing]:
            frame.loc[index, target] = _at_best_epoch(client, frame.at[index, "run_id"], primary, companion)
        if frame[target].isna().all():
            frame = frame.drop(columns=target)
    return frame


def _mark_random_init(frame: pd.DataFrame) -> pd.DataFrame:
    """Randomly initialised runs (`--random-init`, the paper's Appendix E control) are a model of
    their own in every summary, curve and table: "<model> (random init)"."""
    if "random_init" in frame and "model" in frame:
        random = frame["random_init"].astype(str).str.lower() == "true"
        frame.loc[random, "model"] = frame.loc[random, "model"].astype(str) + RANDOM_INIT_SUFFIX
    return frame


def _count_once(frame: pd.DataFrame) -> pd.DataFrame:
    """A reused trial counted once: a run linked from another (`reused_from`, sweeps/engine/reuse.py) is
    dropped where the run that computed it is read too. The computing run's `presets` then names the presets of
    its links beside its own, so that each preset's table still finds the trial it reused."""
    linked = frame["reused_from"].notna() & frame["reused_from"].isin(frame["run_id"])
    if "preset" in frame:
        own = frame["preset"].where(frame["preset"].notna(), None)
        presets = {run: {p} if p else set() for run, p in zip(frame["run_id"], own)}
        for origin, preset in zip(frame.loc[linked, "reused_from"], own[linked]):
            if preset:
                presets[origin].add(preset)
        frame = frame.assign(presets=[",".join(sorted(presets[run])) for run in frame["run_id"]])
    return frame[~linked].reset_index(drop=True)


def of_preset(runs: pd.DataFrame, name: str) -> pd.DataFrame:
    """The runs of preset `name`: its own and the trials it reused from runs of other presets."""
    if "presets" not in runs:
        return runs[runs["preset"].astype(str) == name] if "preset" in runs else runs.iloc[0:0]
    return runs[runs["presets"].fillna("").str.split(",").apply(lambda names: name in names)]


def _order_and_type(frame: pd.DataFrame) -> pd.DataFrame:
    for name in INT_PARAMS:
        if name in frame:
            frame[name] = pd.to_numeric(frame[name], errors="coerce").astype("Int64")
    for name in FLOAT_PARAMS:
        if name in frame:
            frame[name] = pd.to_numeric(frame[name], errors="coerce")
    first = [c for c in (*ID_COLUMNS, *PARAMS) if c in frame]
    rest_params = sorted(c for c in frame if c not in first and not pd.api.types.is_numeric_dtype(frame[c]))
    metrics = sorted(c for c in frame if c not in first and c not in rest_params)
    sort = [c for c in ("sweep", "method", "task", "model", "layer", "seed", "start_time") if c in frame]
    return frame[first + rest_params + metrics].sort_values(sort, kind="stable").reset_index(drop=True)


def _simulated(frame: pd.DataFrame, tracking_uri: str) -> bool:
    """Whether the runs are a --simulate sweep's (synthetic scores: sweeps/engine/simulate.py); runs of
    simulated and real sweeps together are refused, never summarised as one."""
    simulated = frame["simulated"].astype(str).eq("true") if "simulated" in frame else pd.Series(False, frame.index)
    if simulated.any() and not simulated.all():
        sweeps = sorted(frame.loc[simulated, "sweep"].dropna().astype(str).unique())
        raise AnalysisError(
            f"{tracking_uri} holds runs of simulated sweeps ({', '.join(sweeps)}: synthetic scores, tag "
            f"{TAG_SIMULATED}) beside real runs; report them apart: pass the --experiment of one kind, or log "
            "simulated sweeps to their own store"
        )
    return bool(simulated.any())


def load_runs(
    tracking_uri: str, experiment: str | None = None, *, fill_from_history: bool = True, allow_empty: bool = False
) -> pd.DataFrame:
    """All trial runs under `tracking_uri` (one experiment, or all of them) as one DataFrame.

    Raises `AnalysisError` when the store or the experiment does not exist, or (unless
    `allow_empty`) when it holds no trial runs.
    """
    from mlflow.exceptions import MlflowException

    client = _client(tracking_uri)
    try:
        experiments = _experiments(client, experiment)
        ids = list(experiments)
        trials = _search(client, ids, ROLE_TRIAL) if ids else []
        parents = {r.info.run_id: r for r in _search(client, ids, ROLE_SWEEP)} if ids else {}
        frame = pd.DataFrame([_row(run, experiments, parents) for run in trials])
        param_names = sorted({k for run in trials for k in run.data.params} - set(ID_COLUMNS))
        if not frame.empty and fill_from_history:
            frame = _fill_from_history(client, frame)
    except MlflowException as error:
        raise AnalysisError(f"Cannot read MLflow at {tracking_uri}: {error.message}") from None
    if frame.empty:
        if allow_empty:
            return pd.DataFrame(columns=[*ID_COLUMNS, *PARAMS])
        where = f"experiment {experiment!r}" if experiment else f"{len(experiments)} experiment(s)"
        raise AnalysisError(
            f"No trial runs (tag {TAG_ROLE} = '{ROLE_TRIAL}') in {where} at {tracking_uri}; run a sweep first, "
            "or pass the --experiment the sweep logged to."
        )
    frame = _order_and_type(_mark_random_init(_count_once(frame)))
    frame.attrs["simulated"] = _simulated(frame, tracking_uri)
    frame.attrs["param_columns"] = [c for c in frame.columns if c in param_names]
    return frame
