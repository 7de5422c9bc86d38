"""The ELECTRA paper's tables from the summary, as numeric DataFrames (for CSV) and Markdown.

- Table 2 (`table2`): per (method, task), one row per model at its best layer by mean dev score,
  and a "last layer" row where the last layer differs; columns layer, parameters, dev and test
  primary/companion metrics (Spearman/Pearson for STS) as mean and sample std over seeds.
- Table 1 (`table1`): per task, the best-layer row of each model under each method (TMFT,
  WS+TMFT, DAPT+TMFT, then any other), side by side in Markdown, long format in CSV. In Markdown,
  the highest mean test score of each method is bold, as in the paper.
- Scores (`scores_table`): per (method, task) of any other contract, every value of its axes
  (e.g. a zero-shot evaluation's model x pooling x layer) with each score (over seeds: mean ± std
  and the maximum, as the SED paper's stability table): its metric columns
  (one per evaluation set, headed as the papers' zero-shot tables: STS12 ... SICK-R), then the
  primary ("Avg." for the mean over the sets), report and companion. In Markdown, the selected
  value of the contract's select axis is bold. Where the contract names reference rows
  (`reference_rows` = axis=value: each source encoder alone, the untrained encoder), every score
  also gets its difference to the row's reference (`<score>_vs_reference`; Markdown: "Δ"): the
  reference row with the same values of the axes in `reference_by` (e.g. the same model and
  corpus) or, where several qualify (e.g. every source alone), the best of them by mean primary.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.names import aggregation_note, display_names, method_name, method_sort_key, metric_name, score_name
from analysis.summary import COMPANION, PARAM_LABELS, names, params_column, row_axes, selected_layers


def _metric_labels(primary: str) -> dict[str, str]:
    companion = COMPANION.get(primary, "")
    return {
        "dev": f"dev_{primary}",
        "dev2": f"dev_{companion}",
        "test": f"test_{primary}",
        "test2": f"test_{companion}",
    }


def _numeric(rows: pd.DataFrame, primary: str) -> pd.DataFrame:
    names = display_names(rows["model"].unique())
    count = params_column(rows)
    out = pd.DataFrame(
        {
            "model": rows["model"].to_numpy(),
            "name": rows["model"].map(names).to_numpy(),
            "row_kind": rows["row_kind"].to_numpy(),
            "layer": rows["layer"].to_numpy(),
            "params": rows[count].to_numpy() if count else pd.NA,
            "params_count": count or "",
            "n_seeds": rows["n_seeds"].to_numpy(),
        }
    )
    for kind, label in _metric_labels(primary).items():
        for stat in ("mean", "std"):
            column = f"{kind}_{stat}"
            out[f"{label}_{stat}"] = rows[column].to_numpy() if column in rows else float("nan")
    extra = metric_columns(rows) if "metric_columns" in rows else []
    for column in extra:  # the --eval-sets scores of the best-dev weights, one per set
        for stat in ("mean", "std"):
            out[f"{column}_{stat}"] = (
                rows[f"{column}_{stat}"].to_numpy() if f"{column}_{stat}" in rows else float("nan")
            )
    out.attrs["eval_columns"] = extra
    return out


def table2(summary: pd.DataFrame, method: str, task: str) -> pd.DataFrame:
    """Numeric Table 2 of one (method, task): best-layer rows, then "last" rows, per model."""
    rows = selected_layers(summary[(summary["method"] == method) & (summary["task"] == task)])
    if rows.empty:
        return rows
    table = _numeric(rows, rows["metric"].iloc[0])
    order = table.assign(_k=(table["row_kind"] == "last").astype(int)).sort_values(["name", "_k"], kind="stable")
    return order.drop(columns="_k").reset_index(drop=True)


def table1(summary: pd.DataFrame, task: str) -> pd.DataFrame:
    """Numeric Table 1 of one task in long format: a row per (model, method) at the best layer."""
    rows = selected_layers(summary[summary["task"] == task])
    rows = rows[rows["row_kind"] == "best"]
    if rows.empty:
        return rows
    table = _numeric(rows, rows["metric"].iloc[0])
    table.insert(0, "method", rows["method"].to_numpy())
    table = table.drop(columns="row_kind")
    table["_m"] = table["method"].map(method_sort_key)
    return table.sort_values(["name", "_m"], kind="stable").drop(columns="_m").reset_index(drop=True)


def _fmt(mean, std, digits=2) -> str:
    if mean is None or pd.isna(mean):
        return "–"
    if std is None or pd.isna(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _params(value) -> str:
    return "–" if value is None or pd.isna(value) else f"{float(value) / 1e6:.2f}M"


def to_markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of a DataFrame of strings."""

    def cell(value) -> str:
        text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
        return text.replace("|", "\\|")

    header = "| " + " | ".join(cell(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body]) + "\n"


def table2_markdown(table: pd.DataFrame, primary: str = "spearman") -> str:
    labels = _metric_labels(primary)
    companion = COMPANION.get(primary, "")
    shown = pd.DataFrame(
        {
            "Model": [n + (" (last layer)" if k == "last" else "") for n, k in zip(table["name"], table["row_kind"])],
            "Layer": table["layer"].astype(str),
            "Params": table["params"].map(_params),
            "Seeds": table["n_seeds"].astype(str),
        }
    )
    for kind, split, metric in (
        ("dev", "Dev", primary),
        ("dev2", "Dev", companion),
        ("test", "Test", primary),
        ("test2", "Test", companion),
    ):
        label = labels[kind]
        if table[f"{label}_mean"].notna().any():
            shown[f"{split} {metric_name(metric)}"] = [
                _fmt(m, s) for m, s in zip(table[f"{label}_mean"], table[f"{label}_std"])
            ]
    extra = [c for c in table.attrs.get("eval_columns", []) if table[f"{c}_mean"].notna().any()]
    for column in extra:
        shown[score_name(column)] = [_fmt(m, s) for m, s in zip(table[f"{column}_mean"], table[f"{column}_std"])]
    aggregation = aggregation_note(extra)
    return to_markdown(shown) + params_note(table) + (f"\n{aggregation}\n" if aggregation else "")


def _pair(table_row, first: str, second: str, bold_first: bool = False) -> str:
    a = _fmt(table_row[f"{first}_mean"], table_row[f"{first}_std"])
    if bold_first and a != "–":
        a = f"**{a}**"
    if second + "_mean" not in table_row or pd.isna(table_row[f"{second}_mean"]):
        return a
    return f"{a} / {_fmt(table_row[f'{second}_mean'], table_row[f'{second}_std'])}"


def table1_markdown(table: pd.DataFrame, primary: str = "spearman") -> str:
    labels = _metric_labels(primary)
    methods = sorted(table["method"].unique(), key=method_sort_key)
    companion = metric_name(COMPANION.get(primary, ""))
    pair = f"{metric_name(primary)} / {companion}" if companion else metric_name(primary)
    rows = []
    for name, group in table.groupby("name", sort=True):
        row = {"Model": name}
        for method in methods:
            hit = group[group["method"] == method]
            tag = method_name(method)
            if hit.empty:
                row.update(
                    {f"{tag} layer": "–", f"{tag} params": "–", f"{tag} dev {pair}": "–", f"{tag} test {pair}": "–"}
                )
                continue
            r = hit.iloc[0]
            best = table.loc[table["method"] == method, f"{labels['test']}_mean"].max()
            row[f"{tag} layer"] = str(r["layer"])
            row[f"{tag} params"] = _params(r["params"])
            row[f"{tag} dev {pair}"] = _pair(r, labels["dev"], labels["dev2"])
            row[f"{tag} test {pair}"] = _pair(
                r, labels["test"], labels["test2"], bold_first=r[f"{labels['test']}_mean"] == best
            )
        rows.append(row)
    return to_markdown(pd.DataFrame(rows)) + params_note(table)


def params_note(table: pd.DataFrame) -> str:
    """The line under a table that says which parameter count it shows."""
    counts = [c for c in table["params_count"].unique() if c] if "params_count" in table else []
    return f"\nParams: {'; '.join(PARAM_LABELS[c] for c in counts)}.\n" if counts else ""


def metric_columns(rows: pd.DataFrame) -> list[str]:
    """The metric columns of the contracts of summary rows (e.g. one per evaluation set) that have a mean."""
    return [
        c
        for c in dict.fromkeys(c for text in rows["metric_columns"].unique() for c in names(text))
        if f"{c}_mean" in rows
    ]


def score_columns(rows: pd.DataFrame) -> list[str]:
    """The scores of summary rows of one (method, task), in table order: the metric columns,
    then primary, report and companion."""
    contract = [rows[key].iloc[0] for key in ("metric_primary", "metric_report", "metric_companion")]
    return list(dict.fromkeys([*metric_columns(rows), *(c for c in contract if c and f"{c}_mean" in rows)]))


def table_axes(rows: pd.DataFrame) -> list[str]:
    """The axes of summary rows of one (method, task): their contracts' axes but method, task and seed."""
    contracts = rows[["sweep_axes", "seed_axis"]].drop_duplicates().to_dict("records")
    return [a for a in dict.fromkeys(a for c in contracts for a in row_axes(c)) if a not in ("method", "task")]


def scores_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Numeric table of one (method, task)'s summary rows: their axes, each score's mean (and
    `<score>_std` and `n_seeds` where a row averages several runs), `is_best` where the contract
    selects."""
    table = rows[table_axes(rows)].reset_index(drop=True)
    seeded = rows["n_seeds"].max() > 1
    for score in score_columns(rows):
        table[score] = rows[f"{score}_mean"].to_numpy()
        if seeded:
            table[f"{score}_std"] = rows[f"{score}_std"].to_numpy()
            table[f"{score}_max"] = rows[f"{score}_max"].to_numpy() if f"{score}_max" in rows else float("nan")
    if seeded:
        table["n_seeds"] = rows["n_seeds"].to_numpy()
    if (rows["select_axis"] != "").any():
        table["is_best"] = rows["is_best"].to_numpy()
    over = str(rows["averaged_over"].iloc[0]) if "averaged_over" in rows and rows["averaged_over"].iloc[0] else ""
    if over and over != "nan":  # e.g. the adaptive-layer method's scores: each the mean over its layers
        contract = rows[["metric_primary", "metric_report", "metric_companion"]].iloc[0]
        table.attrs["averaged"] = (over, {str(c) for c in contract if isinstance(c, str) and c})
    return _beside_reference(table, rows)


def _beside_reference(table: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """`<score>_vs_reference` for every score: the difference to the row's reference, the row of the
    contract's reference rows (`reference_rows` = axis=value) that has the row's values of the axes
    in `reference_by` and, among several, the best mean primary; `is_reference` marks the rows that
    serve as one. No matching reference: NaN."""
    spec = rows["reference_rows"].iloc[0] if "reference_rows" in rows else ""
    axis, _, value = str(spec or "").partition("=")
    if axis not in table or not value:
        return table
    by = [a for a in str(rows["reference_by"].iloc[0] if "reference_by" in rows else "").split(",") if a]
    keys = [tuple(r) for r in rows[by].astype(str).itertuples(index=False)] if by else [()] * len(rows)
    primary = rows["dev_mean"].to_numpy()
    better = (lambda a, b: a < b) if rows["metric_mode"].iloc[0] == "min" else (lambda a, b: a > b)
    best: dict[tuple, int] = {}
    for position in range(len(rows)):
        if str(rows[axis].iloc[position]) != value or pd.isna(primary[position]):
            continue
        current = best.get(keys[position])
        if current is None or better(primary[position], primary[current]):
            best[keys[position]] = position
    if not best:
        return table
    references = [best.get(key) for key in keys]
    for score in score_columns(rows):
        values = table[score].to_numpy(dtype=float)
        table[f"{score}_vs_reference"] = [
            values[i] - values[r] if r is not None else float("nan") for i, r in enumerate(references)
        ]
    table["is_reference"] = False
    table.loc[table.index[sorted(best.values())], "is_reference"] = True
    table.attrs["reference"] = {"rows": spec, "by": by}
    return table


def scores_markdown(table: pd.DataFrame, axes: list[str], scores: list[str], select: str = "") -> str:
    """`scores_table` in Markdown: display names, mean ± std, the selected value of `select` bold; a score
    that is a mean within each run (`averaged`, e.g. over the layers) is headed as that mean."""
    over, means = table.attrs.get("averaged", ("", set()))
    shown = pd.DataFrame(index=table.index)
    for axis in axes:
        values = table[axis].map(lambda v: "" if pd.isna(v) else str(v))
        if axis == "model":
            values = values.map(display_names(values.unique()))
        if axis == select:
            values = values.where(~table["is_best"], "**" + values + "**")
        shown[axis] = values
    for score in scores:
        stds = table[f"{score}_std"] if f"{score}_std" in table else [None] * len(table)
        maxima = table[f"{score}_max"] if f"{score}_max" in table else [None] * len(table)
        deltas = table[f"{score}_vs_reference"] if f"{score}_vs_reference" in table else [None] * len(table)
        header = score_name(score) + (f" (mean over {over})" if score in means else "")
        shown[header] = [
            _fmt(mean, std)
            + ("" if pd.isna(std) or top is None or pd.isna(top) else f" (max {top:.2f})")
            + ("" if delta is None or pd.isna(delta) else f" (Δ {delta:+.2f})")
            for mean, std, top, delta in zip(table[score], stds, maxima, deltas)
        ]
    if "n_seeds" in table:
        shown["Seeds"] = table["n_seeds"].astype(str)
    note = ""
    if "is_reference" in table:
        reference = table.attrs.get("reference", {})
        axis = str(reference.get("rows", "")).partition("=")[0]
        if axis in shown:
            shown[axis] = shown[axis].where(~table["is_reference"], shown[axis] + " (reference)")
        same = f" with the same {', '.join(reference['by'])}" if reference.get("by") else ""
        note = (
            f"\nΔ: each score minus its reference row's (rows {reference.get('rows', '')}{same}; "
            "the best by mean dev score where several qualify).\n"
        )
    aggregation = aggregation_note(scores)
    return to_markdown(shown) + note + (f"\n{aggregation}\n" if aggregation else "")
