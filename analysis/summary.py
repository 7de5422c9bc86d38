"""Seed statistics of the trial runs, grouped and selected by the metric contract each run logged,
and the runs left out with their reasons.

The contract (trainables/core/method.py `MetricContract.params`) is logged as params on every run:
`metric_primary` (the final metric that ranks and selects), `metric_report` (the held-out score
shown at the selection), `metric_companion` (a second score beside it; may be empty),
`metric_mode` (`max` or `min`), `sweep_axes` (the config keys a sweep varies), `select_axis` (the
axis whose best value is selected by the mean primary over seeds; empty: no selection),
`seed_axis` (the axis averaged over; empty: no repeats), `metric_columns` (more final metrics
to tabulate, e.g. one per evaluation set), `reference_rows` (`axis=value`: the rows a table puts
every row beside; empty or absent: none) and `reference_by` (the axes a row shares with its
reference row; among several, the best by mean primary). Runs logged before contracts existed are read as
TMFT's: axes model, layer, seed; select layer; primary `best_dev_<p>`, report
`test_<p>_at_best_dev`, companion `test_<c>_at_best_dev`, with p = spearman or f1 from the
metrics the task's runs logged and c its companion (pearson, accuracy). `task` is "" for methods
without one.

`split_runs(runs)` separates complete runs (status FINISHED, the contract's axes as params, its
primary and report metrics, not an older duplicate of a configuration) from the rest, each
excluded run with its reason. `summarize(runs)` gives one row per (method, task, the contract's
axes but the seed axis): `n_seeds` (the runs averaged), mean, sample std (ddof=1) and maximum of
every contract metric under its own name (`best_dev_spearman_mean`, `sts12_spearman_std`, ...) and
as generic columns: `dev_*` the primary, `test_*` the report, `test2_*` the companion, `dev2_*`
the companion's dev twin when the report is a test-at-best-dev score (`dev_pearson_at_best_dev`).
`is_best` marks the selected value of the select axis in each group of the other axes: the best
mean primary (the lowest for mode `min`; ties go to the lower value, e.g. the smaller layer).
When the select axis is the layer, `is_best_layer` is the same mark and `is_last_layer` marks
the highest layer swept. Held-out scores are reported, never used to select.

`family` is "layers" for contracts whose rows are (model, layer) selecting the layer (TMFT and
its variants: curves, Pareto fronts, Tables 1 and 2) and "table" for every other (e.g. zero-shot
evaluation: model, pooling, layer, no seed). `configs` counts the distinct settings (every param
but the row's axes, the seed and provenance) averaged in a row and `varying` names the params
that differ, so mixed sweeps are flagged rather than silently merged.
"""

from __future__ import annotations

import re

import pandas as pd

from analysis.loader import COMPANION
from trainables.core.method import best_value
from trainables.core.schema import TRIAL_KEY_PARAMS

CONTRACT_KEYS = (
    "sweep_axes",
    "select_axis",
    "seed_axis",
    "metric_primary",
    "metric_report",
    "metric_companion",
    "metric_mode",
    "metric_columns",
)
# Runs of one contract are summarised together; their metric_columns (which may differ between
# sweeps of a method, e.g. other evaluation sets) are merged.
CONTRACT = [k for k in CONTRACT_KEYS if k != "metric_columns"]
CONFIG = ["method", "task", "model", "layer", "seed", "epochs", "lr", "batch_size"]
HYPER = ["epochs", "lr", "batch_size"]
# Params that record where a number came from, not what was run: never a reason to split or warn.
# Parameter counts a run logs: the paper's (embeddings + the first l layers; trainables/encoders/loading.py)
# and the whole truncated model's. Tables and the Pareto plot show the paper's where runs have it.
PARAM_COUNTS = ("params_paper", "params_truncated")
PARAM_LABELS = {
    "params_paper": "the paper's count: embeddings and the first l layers",
    "params_truncated": "the whole truncated model",
}


def params_column(frame) -> str | None:
    """The parameter count to show: the paper's where every row has it, else the whole model's."""
    if "params_paper" in frame and frame["params_paper"].notna().all():
        return "params_paper"
    return "params_truncated" if "params_truncated" in frame else None


REFERENCE = ("reference_rows", "reference_by")  # not grouping keys: runs logged before they existed have none
AVERAGED = "metric_averaged_over"  # a contract's scores are each a mean within a run (over its layers)
PROVENANCE = {
    "seed",
    "git_commit",
    "config_hash",
    "sweep",
    "search",
    "data_dir",
    "preset",
    "seeds_by_need",
    "initial_seeds",
    "seed_ci_width",
    "seed_spread",
    "params_truncated",
    "params_paper",
    "reused_from",
    *TRIAL_KEY_PARAMS,
    *CONTRACT_KEYS,
    *REFERENCE,
    AVERAGED,
}
PROVENANCE_PREFIXES = ("version_", "data_sha_")
FINISHED = "FINISHED"
LAYER_FAMILY, TABLE_FAMILY = "layers", "table"
_AT_BEST_DEV = re.compile(r"^test_(?P<name>\w+)_at_best_dev$")


def legacy_contract(primary: str) -> dict[str, str]:
    """TMFT's contract, read into runs logged before contracts were; primary 'spearman' or 'f1'."""
    companion = COMPANION.get(primary, "")
    return {
        "sweep_axes": "model,layer,seed",
        "select_axis": "layer",
        "seed_axis": "seed",
        "metric_primary": f"best_dev_{primary}",
        "metric_report": f"test_{primary}_at_best_dev",
        "metric_companion": f"test_{companion}_at_best_dev" if companion else "",
        "metric_mode": "max",
        "metric_columns": "",
    }


def primary_metric(runs: pd.DataFrame) -> str:
    """The primary metric of runs without a contract: the first of COMPANION's keys they logged."""
    for primary in COMPANION:
        column = f"best_dev_{primary}"
        if column in runs and runs[column].notna().any():
            return primary
    return next(iter(COMPANION))


def names(text: str) -> list[str]:
    """The names in a comma-separated contract param ('' -> [])."""
    return [name for name in str(text).split(",") if name]


def row_axes(contract) -> list[str]:
    """The axes that make one summary row of a contract: method, task, then every sweep axis but the seed axis."""
    axes = [a for a in names(contract["sweep_axes"]) if a not in ("method", "task", contract["seed_axis"])]
    return ["method", "task", *axes]


def _family(contract) -> str:
    layered = contract["select_axis"] == "layer" and set(row_axes(contract)) == {"method", "task", "model", "layer"}
    return LAYER_FAMILY if layered else TABLE_FAMILY


def with_contracts(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with every contract param filled (TMFT's, per task, for runs logged before
    contracts), `task` ("" where a method has none) and `family`."""
    runs = runs.copy()
    runs["task"] = runs["task"].fillna("").astype(str) if "task" in runs else ""
    for key in CONTRACT_KEYS:
        runs[key] = runs[key].fillna("").astype(str) if key in runs else ""
    legacy = runs["metric_primary"] == ""
    for _, rows in runs[legacy].groupby("task"):
        for key, value in legacy_contract(primary_metric(rows)).items():
            runs.loc[rows.index, key] = value
    runs["metric_mode"] = runs["metric_mode"].replace("", "max")
    runs["family"] = [_family(contract) for contract in runs[CONTRACT].to_dict("records")]
    return runs


def _all_axes(runs: pd.DataFrame) -> list[str]:
    """Every axis of every contract among the runs, in order of first appearance."""
    return list(dict.fromkeys(a for axes in runs["sweep_axes"].unique() for a in names(axes)))


def _missing(runs: pd.DataFrame, name: str) -> pd.Series:
    return runs[name].isna() if name in runs else pd.Series(True, index=runs.index)


def _reasons(runs: pd.DataFrame) -> pd.Series:
    """Why each run is left out ("" for a complete run), duplicates aside."""
    reasons = pd.Series("", index=runs.index, dtype=object)

    def flag(condition, reason):
        return reasons.mask((reasons == "") & condition, reason)

    reasons = flag(_missing(runs, "method"), "missing param method")
    for axes in runs["sweep_axes"].unique():
        mine = runs["sweep_axes"] == axes
        for name in names(axes):
            reasons = flag(mine & _missing(runs, name), f"missing param {name}")
    reasons = flag(runs["status"] != FINISHED, "status " + runs["status"].astype(str))
    for index in runs.index[reasons == ""]:
        wanted = dict.fromkeys([runs.at[index, "metric_primary"], runs.at[index, "metric_report"]])
        absent = [name for name in wanted if name not in runs or pd.isna(runs.at[index, name])]
        if absent:
            reasons[index] = "missing metric " + ", ".join(absent)
    return reasons


def _flag_duplicates(runs: pd.DataFrame, reasons: pd.Series) -> pd.Series:
    """Of several complete runs of one configuration (a rerun, or a sweep run twice) the newest
    counts. A configuration is the trial config's hash when logged, else its CONFIG params and axes."""
    key = [c for c in dict.fromkeys([*CONFIG, *_all_axes(runs)]) if c in runs]
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
    return reasons


def split_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(complete runs with their contracts filled, excluded runs with a `reason` column). A run
    needs its method, its contract's axes, status FINISHED and its primary and report metrics."""
    runs = with_contracts(runs)
    reasons = _flag_duplicates(runs, _reasons(runs))
    shown = [c for c in dict.fromkeys(["run_id", "sweep", "method", "task", *_all_axes(runs), "status"]) if c in runs]
    excluded = runs.loc[reasons != "", shown].copy()
    excluded["reason"] = reasons[reasons != ""]
    return runs.loc[reasons == ""].copy(), excluded.reset_index(drop=True)


def config_columns(runs: pd.DataFrame) -> list[str]:
    """The params that define what a trial ran, provenance aside (from the loader's
    `attrs["param_columns"]`, else the schema's epochs / lr / batch_size)."""
    params = runs.attrs.get("param_columns") or [c for c in HYPER if c in runs]
    return [c for c in params if c in runs and c not in PROVENANCE and not c.startswith(PROVENANCE_PREFIXES)]


def _join_unique(values) -> str:
    return "|".join(sorted({str(v) for v in values if pd.notna(v)}))


def _scores(contract) -> dict[str, str]:
    """Generic column -> logged metric of a contract: dev (primary), test (report), test2
    (companion) and dev2 (the companion's dev twin, when the report is a test-at-best-dev score)."""
    scores = {"dev": contract["metric_primary"], "test": contract["metric_report"]}
    if contract["metric_companion"]:
        scores["test2"] = contract["metric_companion"]
        twin = _AT_BEST_DEV.match(contract["metric_companion"])
        if twin and _AT_BEST_DEV.match(contract["metric_report"]):
            scores["dev2"] = f"dev_{twin['name']}_at_best_dev"
    return scores


def metric_label(primary: str) -> str:
    """The `metric` of a summary row: p of a `best_dev_<p>` primary ('spearman', 'f1'), else the primary's name."""
    return primary.removeprefix("best_dev_")


def _settings(runs: pd.DataFrame, keys: list[str], seed: str) -> pd.DataFrame:
    """Per row: `configs` (distinct settings averaged) and `varying` (the params that differ)."""
    settings = [c for c in config_columns(runs) if c not in keys and c != seed]
    groups = runs.groupby(keys, sort=True)
    if not settings:
        return pd.DataFrame({"configs": 1, "varying": ""}, index=groups.size().index)
    as_text = runs[settings].astype(str).groupby([runs[k] for k in keys], sort=True)
    varying = as_text.agg(lambda s: s.nunique() > 1)
    return pd.DataFrame(
        {
            "configs": as_text.apply(lambda g: len(g.drop_duplicates())),
            "varying": varying.apply(lambda row: ",".join(c for c in settings if row[c]), axis=1),
        }
    )


def _mark_selection(out: pd.DataFrame, keys: list[str], select: str, mode: str) -> pd.DataFrame:
    """`is_best` per group of the other axes (and `is_best_layer`, `is_last_layer` when the layer is selected)."""
    out["is_best"] = out["is_last_layer"] = False
    if select:
        for _, group in out.groupby([k for k in keys if k != select], sort=False):
            best = best_value(dict(zip(group[select], group["dev_mean"])), mode)
            if best is not None:
                out.loc[group.index[group[select] == best][0], "is_best"] = True
            if select == "layer":
                out.loc[group["layer"].idxmax(), "is_last_layer"] = True
    out["is_best_layer"] = out["is_best"] & (select == "layer")
    return out


def _summarize_contract(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of the runs of one contract."""
    contract = runs.iloc[0]
    keys, seed = row_axes(contract), contract["seed_axis"]
    scores = {generic: name for generic, name in _scores(contract).items() if name in runs}
    columns = list(dict.fromkeys(c for text in runs["metric_columns"].unique() for c in names(text)))
    measured = [c for c in dict.fromkeys([*scores.values(), *columns, "wall_time_s", "train_time_s"]) if c in runs]
    groups = runs.groupby(keys, sort=True)
    stats = groups[measured].agg(["mean", "std", "max"])  # pandas' std is the sample std (ddof=1)
    stats.columns = [f"{metric}_{stat}" for metric, stat in stats.columns]
    out = pd.DataFrame({"metric": metric_label(contract["metric_primary"]), "n_seeds": groups.size()})
    if seed:
        out["seeds"] = groups[seed].agg(lambda s: ",".join(str(v) for v in sorted(s)))
    for count in PARAM_COUNTS:
        if count in runs:
            out[count] = groups[count].max()
    for name in [c for c in HYPER if c in runs and c not in keys]:
        out[name] = groups[name].agg(_join_unique)
    out = out.join(_settings(runs, keys, seed)).join(stats)
    for generic, name in scores.items():
        out[f"{generic}_mean"], out[f"{generic}_std"] = out[f"{name}_mean"], out[f"{name}_std"]
    reference = {key: contract[key] if isinstance(contract.get(key), str) else "" for key in REFERENCE}
    out = out.reset_index().assign(
        **{key: contract[key] for key in CONTRACT},
        metric_columns=",".join(columns),
        family=contract["family"],
        **reference,
        averaged_over=averaged_over(runs, contract),
    )
    return _mark_selection(out, keys, contract["select_axis"], contract["metric_mode"])


def averaged_over(runs: pd.DataFrame, contract: pd.Series) -> str:
    """What the contract's scores (primary, report, companion) are each a mean over within a run: the
    recorded `metric_averaged_over`, or, for runs logged before it, `layers` where they log the report
    metric of each layer too (`layer<k>_<report>`, the adaptive-layer method's); "" for a score of its own."""
    recorded = contract.get(AVERAGED)
    if isinstance(recorded, str) and recorded:
        return recorded
    pattern = re.compile(rf"layer\d+_{re.escape(str(contract['metric_report']))}")
    per_layer = [c for c in runs.columns if pattern.fullmatch(str(c)) and runs[c].notna().any()]
    return "layers" if len(per_layer) > 1 else ""


def _typed_layer(summary: pd.DataFrame) -> pd.DataFrame:
    """`layer` as int, or as nullable Int64 when some rows' contract has no layer axis."""
    if "layer" in summary:
        layer = pd.to_numeric(summary["layer"], errors="coerce").astype("Int64")
        summary["layer"] = layer if layer.isna().any() else layer.astype(int)
    return summary


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, task, the contract's axes but the seed axis) over the complete runs
    (see the module docstring)."""
    complete, _ = split_runs(runs)
    if complete.empty:
        return pd.DataFrame(
            columns=[
                "method",
                "task",
                "model",
                "layer",
                "metric",
                "n_seeds",
                "dev_mean",
                "dev_std",
                "test_mean",
                "test_std",
                "is_best",
                "is_best_layer",
                "is_last_layer",
                "family",
            ]
        )
    parts = [_summarize_contract(rows) for _, rows in complete.groupby(CONTRACT, sort=True)]
    summary = pd.concat(parts, ignore_index=True).sort_values(["family", "method", "task"], kind="stable")
    return _typed_layer(summary.reset_index(drop=True))


def layer_family(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows of contracts that select a layer of each model (TMFT and its variants), without the
    columns only other families fill (their scores' `_mean`/`_std` stay: one seed has no std)."""
    rows = summary[summary["family"] == LAYER_FAMILY].copy()
    if rows.empty:
        return rows
    rows["layer"] = rows["layer"].astype(int)
    other_families = [c for c in rows if rows[c].isna().all() and not c.endswith(("_mean", "_std"))]
    return rows.drop(columns=other_families)


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
    return (
        rows.sort_values(["method", "task", "model", "_order"], kind="stable")
        .drop(columns="_order")
        .reset_index(drop=True)
    )


def flag_mixed_configs(summary: pd.DataFrame) -> pd.DataFrame:
    """Rows whose runs ran with different settings (column `varying` names them): averaged
    together, which is rarely what is wanted; `python -m analysis report --where` separates them."""
    if "configs" not in summary:
        return summary.iloc[0:0]
    return summary[summary["configs"] > 1]
