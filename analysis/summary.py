"""Seed statistics per (method, task, model, layer), the best layer, and the runs left out;
for methods of any other shape, seed statistics per (method, task, the contract's axes).

Every run since the method contract records it (`sweep_axes`, `select_axis`, `seed_axis`,
`metric_primary`, `metric_report`, `metric_columns`, `metric_mode`; trainables/method.py); runs
logged before that are read as TMFT's (axes model, layer, seed; select the layer). Runs whose
contract selects a layer over seeds (TMFT and its variants) form the *layer* family summarised as
below; every other run (e.g. zero-shot evaluation: axes model, pooling, layer, no seed) is
summarised by its own axes (`family` = "table"), with `dev_mean`/`test_mean` holding its primary
and reported scores and `<column>_mean` each of its `metric_columns`. `task` is "" for methods
without one.

`split_runs(runs)` separates complete runs (status FINISHED, both selection metrics present, not
a duplicate of a newer run with the same configuration) from the rest, each excluded run with its
reason. `summarize(runs)` averages the complete runs over seeds (mean and sample std, ddof=1) and
marks, per (method, task, model), the best layer: the highest mean *dev* score (ties go to the
lower layer, i.e. fewer parameters). Test scores are reported, never used to select.

Each task has a primary metric: Spearman for STS tasks (`best_dev_spearman`,
`test_spearman_at_best_dev`), F1 for classification (`best_dev_f1`, `test_f1_at_best_dev`). The
summary keeps each aggregated metric under its own name (`best_dev_spearman_mean`, ...) and also
as generic columns `dev_mean`, `dev_std`, `test_mean`, `test_std` (the primary metric), plus
`dev2_*` / `test2_*` for the companion (Pearson, or accuracy) when logged. `configs` counts
the distinct settings (every param but the group, the seed and provenance) averaged in a row and
`varying` names the params that differ, so mixed sweeps are flagged rather than silently merged.
"""
from __future__ import annotations

import pandas as pd

from analysis.loader import COMPANION

GROUP = ["method", "task", "model", "layer"]
OLD_CONTRACT_KEYS = ("sweep_axes", "select_axis", "seed_axis", "metric_primary", "metric_report", "metric_columns",
                     "metric_mode", "metric_companion")
CONFIG = ["method", "task", "model", "layer", "seed", "epochs", "lr", "batch_size"]
HYPER = ["epochs", "lr", "batch_size"]
# Params that record where a number came from, not what was run: never a reason to split or warn.
PROVENANCE = {"seed", "git_commit", "config_hash", "sweep", "search", "data_dir", "params_truncated", *OLD_CONTRACT_KEYS}
PROVENANCE_PREFIXES = ("version_", "data_sha_")
FINISHED = "FINISHED"
LAYER_FAMILY, TABLE_FAMILY = "layers", "table"
# The contract of runs logged before contracts were (TMFT's), and the params that carry it.
OLD_CONTRACT = {"sweep_axes": "model,layer,seed", "select_axis": "layer", "seed_axis": "seed",
                "metric_primary": "", "metric_report": "", "metric_columns": "", "metric_mode": "max"}
EXCLUDED_COLUMNS = ["run_id", "sweep", "method", "task", "model", "layer", "seed", "status", "reason"]


def metric_names(primary: str) -> dict[str, str]:
    """Generic name -> logged column for a primary metric ('spearman' or 'f1')."""
    companion = COMPANION.get(primary, "")
    return {
        "dev": f"best_dev_{primary}", "test": f"test_{primary}_at_best_dev",
        "dev2": f"dev_{companion}_at_best_dev", "test2": f"test_{companion}_at_best_dev",
    }


def primary_metric(runs: pd.DataFrame) -> str:
    """The primary metric of these runs: the first of COMPANION's keys they logged."""
    for primary in COMPANION:
        column = f"best_dev_{primary}"
        if column in runs and runs[column].notna().any():
            return primary
    return next(iter(COMPANION))


def _primary_by_task(runs: pd.DataFrame) -> dict:
    return {task: primary_metric(group) for task, group in runs.groupby("task", dropna=False)}


def with_contracts(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with every contract param filled (TMFT's for runs logged before contracts), a
    `task` ("" where a method has none) and `family`: "layers" or "table"."""
    runs = runs.copy()
    for name, default in OLD_CONTRACT.items():
        runs[name] = runs[name].fillna(default).astype(str) if name in runs else default
    runs["task"] = runs["task"].fillna("").astype(str) if "task" in runs else ""
    layered = (runs["select_axis"] == "layer") & (runs["seed_axis"] == "seed") & runs["sweep_axes"].map(
        lambda axes: set(axes.split(",")) - {"method"} == {"model", "layer", "seed"})
    runs["family"] = layered.map({True: LAYER_FAMILY, False: TABLE_FAMILY})
    return runs


def _selection_metrics(row, primaries: dict) -> list[str]:
    if row["family"] == LAYER_FAMILY:
        names = metric_names(primaries.get(row["task"], "spearman"))
        return [names["dev"], names["test"]]
    return list(dict.fromkeys([row["metric_primary"], row["metric_report"]]))


def split_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(complete runs, excluded runs with a `reason` column), both as DataFrames. A run needs its
    method, its contract's axes, status FINISHED and its selection metrics."""
    runs = with_contracts(runs)
    reasons = pd.Series("", index=runs.index, dtype=object)
    primaries = _primary_by_task(runs[runs["family"] == LAYER_FAMILY])

    def flag(condition, reason):
        return reasons.mask((reasons == "") & condition, reason)

    reasons = flag(runs["method"].isna() if "method" in runs else True, "missing param method")
    for axes in runs["sweep_axes"].unique():
        mine = runs["sweep_axes"] == axes
        for name in axes.split(","):
            reasons = flag(mine & (runs[name].isna() if name in runs else True), f"missing param {name}")
    reasons = flag(runs["status"] != FINISHED, "status " + runs["status"].astype(str))
    for index in runs.index[reasons == ""]:
        wanted = _selection_metrics(runs.loc[index], primaries)
        absent = [name for name in wanted if name not in runs or pd.isna(runs.at[index, name])]
        if absent:
            reasons[index] = "missing metric " + ", ".join(absent)
    # Of several complete runs of one configuration, the newest counts (a rerun, or a sweep run twice).
    # A configuration is the trial config's hash when logged, else the CONFIG params.
    key = [c for c in CONFIG if c in runs]
    signature = runs[key].map(str).agg("\x1f".join, axis=1)
    if "config_hash" in runs:
        signature = runs["config_hash"].where(runs["config_hash"].notna(), signature).astype(str)
    candidates = runs.loc[reasons == ""]
    if "end_time" in runs:
        candidates = candidates.sort_values("end_time", ascending=False, kind="stable")
    newest: dict[str, int] = {}
    for index in candidates.index:
        first = newest.setdefault(signature[index], index)
        if first != index:
            reasons[index] = f"duplicate of newer run {runs.at[first, 'run_id']}"
    excluded = runs.loc[reasons != "", [c for c in EXCLUDED_COLUMNS if c in runs and c != "reason"]].copy()
    excluded["reason"] = reasons[reasons != ""]
    return runs.loc[reasons == ""].copy(), excluded.reset_index(drop=True)


def config_columns(runs: pd.DataFrame) -> list[str]:
    """The params that define what a trial ran, besides GROUP and the seed (from the loader's
    `attrs["param_columns"]`, else the schema's epochs / lr / batch_size)."""
    params = runs.attrs.get("param_columns") or [c for c in HYPER if c in runs]
    return [c for c in params if c in runs and c not in GROUP and c not in PROVENANCE
            and not c.startswith(PROVENANCE_PREFIXES)]


def _join_unique(values) -> str:
    return "|".join(sorted({str(v) for v in values if pd.notna(v)}))


def _summarize_task(complete: pd.DataFrame, primary: str) -> pd.DataFrame:
    names = {k: v for k, v in metric_names(primary).items() if v in complete}
    measured = list(dict.fromkeys([*names.values(), *(["wall_time_s"] if "wall_time_s" in complete else [])]))
    groups = complete.groupby(GROUP, sort=True)
    stats = groups[measured].agg(["mean", "std"])  # pandas' std is the sample std (ddof=1)
    stats.columns = [f"{metric}_{stat}" for metric, stat in stats.columns]
    out = pd.DataFrame({
        "metric": primary,
        "n_seeds": groups.size(),
        "seeds": groups["seed"].agg(lambda s: ",".join(str(v) for v in sorted(s))),
    })
    if "params_truncated" in complete:
        out["params_truncated"] = groups["params_truncated"].max()
    for name in [c for c in HYPER if c in complete]:
        out[name] = groups[name].agg(_join_unique)
    settings = config_columns(complete)
    if settings:
        as_text = complete[settings].astype(str)
        by_group = as_text.groupby([complete[c] for c in GROUP], sort=True)
        out["configs"] = by_group.apply(lambda g: len(g.drop_duplicates()))
        out["varying"] = by_group.agg(lambda s: s.nunique() > 1).apply(
            lambda row: ",".join(c for c in settings if row[c]), axis=1)
    else:
        out["configs"], out["varying"] = 1, ""
    out = out.join(stats)
    for generic, logged in names.items():
        out[f"{generic}_mean"], out[f"{generic}_std"] = out[f"{logged}_mean"], out[f"{logged}_std"]
    return out.reset_index()


def _mark_layers(summary: pd.DataFrame) -> pd.DataFrame:
    summary["is_best_layer"] = False
    summary["is_last_layer"] = False
    for _, group in summary.groupby(["method", "task", "model"], sort=False):
        ranked = group.sort_values(["dev_mean", "layer"], ascending=[False, True], kind="stable")
        ranked = ranked[ranked["dev_mean"].notna()]
        if not ranked.empty:
            summary.loc[ranked.index[0], "is_best_layer"] = True
        summary.loc[group["layer"].idxmax(), "is_last_layer"] = True
    return summary


def _summarize_table_family(complete: pd.DataFrame) -> pd.DataFrame:
    """Rows of the contract's axes (seed averaged) for one contract of the table family."""
    first = complete.iloc[0]
    axes = [a for a in first["sweep_axes"].split(",") if a != first["seed_axis"]]
    keys = ["method", "task", *[a for a in axes if a not in ("method", "task")]]
    columns = [c for c in first["metric_columns"].split(",") if c and c in complete]
    measured = list(dict.fromkeys([first["metric_primary"], first["metric_report"], *columns]))
    for name in measured:
        complete[name] = pd.to_numeric(complete[name], errors="coerce")
    groups = complete.groupby(keys, sort=True, dropna=False)
    stats = groups[measured].agg(["mean", "std"])
    stats.columns = [f"{metric}_{stat}" for metric, stat in stats.columns]
    out = pd.DataFrame({"metric": first["metric_primary"], "n_seeds": groups.size()}).join(stats)
    if "params_truncated" in complete:
        out["params_truncated"] = groups["params_truncated"].max()
    out["dev_mean"], out["dev_std"] = out[f"{first['metric_primary']}_mean"], out[f"{first['metric_primary']}_std"]
    out["test_mean"], out["test_std"] = out[f"{first['metric_report']}_mean"], out[f"{first['metric_report']}_std"]
    out = out.reset_index()
    for name in ("sweep_axes", "select_axis", "seed_axis", "metric_columns", "metric_mode"):
        out[name] = first[name]
    out["family"] = TABLE_FAMILY
    out["is_best"] = False
    select = first["select_axis"]
    if select:
        rest = [k for k in keys if k != select]
        for _, group in out.groupby(rest, sort=False, dropna=False):
            ranked = group["dev_mean"].dropna()
            if not ranked.empty:
                out.loc[ranked.idxmax() if first["metric_mode"] == "max" else ranked.idxmin(), "is_best"] = True
    return out


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, task, model, layer) of the layer family, and one per (method, task,
    axes) of every other contract, over the complete runs: n_seeds, means, stds."""
    complete, _ = split_runs(runs)
    if complete.empty:
        return pd.DataFrame(columns=[*GROUP, "metric", "n_seeds", "dev_mean", "dev_std", "test_mean", "test_std",
                                     "is_best_layer", "is_last_layer", "family"])
    complete = with_contracts(complete)
    layered = complete[complete["family"] == LAYER_FAMILY]
    parts = [_summarize_task(group, primary_metric(group)) for _, group in layered.groupby("task", sort=True)]
    summary = _mark_layers(pd.concat(parts, ignore_index=True)).assign(family=LAYER_FAMILY) if parts else pd.DataFrame()
    if not summary.empty:
        summary["layer"] = summary["layer"].astype(int)
        summary["is_best"] = summary["is_best_layer"]
    others = complete[complete["family"] == TABLE_FAMILY]
    contract = ["sweep_axes", "select_axis", "seed_axis", "metric_primary", "metric_report", "metric_columns"]
    tables = [_summarize_table_family(group.copy()) for _, group in others.groupby(contract, sort=True)]
    summary = pd.concat([summary, *tables], ignore_index=True) if tables else summary
    if tables:
        summary["layer"] = pd.to_numeric(summary["layer"], errors="coerce").astype("Int64") if "layer" in summary else pd.NA
        for flag in ("is_best_layer", "is_last_layer", "is_best"):
            summary[flag] = summary[flag].fillna(False).astype(bool) if flag in summary else False
    return summary.sort_values([c for c in ("family", *GROUP) if c in summary], kind="stable").reset_index(drop=True)


def layer_family(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows of methods that select a layer over seeds (TMFT and its variants)."""
    if "family" not in summary:
        return summary
    rows = summary[summary["family"] == LAYER_FAMILY].copy()
    if rows.empty:
        return rows
    rows["layer"] = rows["layer"].astype(int)
    return rows.dropna(axis=1, how="all")


def best_layers(summary: pd.DataFrame) -> pd.DataFrame:
    """The best-dev layer row of each (method, task, model)."""
    return summary[summary["is_best_layer"]].reset_index(drop=True)


def selected_layers(summary: pd.DataFrame) -> pd.DataFrame:
    """Per (method, task, model): the best-dev layer row, then the last-layer row when different.

    Adds `row_kind` = "best" or "last".
    """
    best = summary[summary["is_best_layer"]].assign(row_kind="best")
    last = summary[summary["is_last_layer"] & ~summary["is_best_layer"]].assign(row_kind="last")
    rows = pd.concat([best, last]).assign(_order=lambda f: (f["row_kind"] == "last").astype(int))
    return rows.sort_values(["method", "task", "model", "_order"], kind="stable").drop(columns="_order").reset_index(drop=True)


def flag_mixed_configs(summary: pd.DataFrame) -> pd.DataFrame:
    """Groups whose seeds ran with different settings (column `varying` names them): averaged
    together, which is rarely what is wanted; `python -m analysis report --where` separates them."""
    if "configs" not in summary:
        return summary.iloc[0:0]
    return summary[summary["configs"] > 1]


