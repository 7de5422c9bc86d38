"""The sweep's numbers beside a paper's, for runs of a preset (param `preset`; sweeps/engine/presets.py).

For every preset found in the runs: the table or figure it reproduces, and, where the paper prints
numbers (`Preset.published`), one row per published row: the paper's layer, parameter count, dev
Spearman, test Spearman and Pearson, ours beside each (the layer with the best mean dev score, or
the last layer for the paper's "last" rows; mean ± sample std over seeds; the paper's parameter
count where the runs logged it) and the difference ours - paper. A published row the runs do not
cover says so. Where the paper gives only a plot, the section says that.

Papers whose tables are not layer rows (SED's stability table, the meta-embedding paper's Tables 1
and 2) publish `PublishedRow` rows with the preset's `PublishedColumn` columns: for each row, the
complete runs whose params match, each run's value of a column (the mean of its metrics, e.g. five
STS sets), and the column's statistic over those runs (mean ± std, max or std), beside the paper's
number with the difference (`rows_comparison`). Above every table: the run params the preset names
(`Preset.shown`, e.g. the DAPT corpus that ran) and its note (what differs from the paper, and why
numbers are not comparable where they are not).
"""

from __future__ import annotations

import pandas as pd

from analysis.loader import of_preset
from analysis.summary import layer_family, selected_layers, split_runs, summarize
from analysis.tables import to_markdown

COLUMNS = [
    "method",
    "model",
    "layer (paper)",
    "layer (ours)",
    "params M (paper)",
    "params M (ours)",
    "dev Spearman (paper)",
    "dev Spearman (ours)",
    "test Spearman (paper)",
    "test Spearman (ours)",
    "Δ test Spearman",
    "test Pearson (paper)",
    "test Pearson (ours)",
    "Δ test Pearson",
    "seeds",
]


def preset_names(runs: pd.DataFrame) -> list[str]:
    """Every preset of the runs, also one whose trials were all reused from other presets' runs."""
    if "presets" in runs:
        return sorted({name for names in runs["presets"].dropna() for name in str(names).split(",") if name})
    return sorted(runs["preset"].dropna().astype(str).unique()) if "preset" in runs else []


def comparison(runs: pd.DataFrame, preset) -> pd.DataFrame:
    """The published rows of `preset` beside the runs' (COLUMNS); empty when it publishes none."""
    rows = layer_family(summarize(runs))
    ours = selected_layers(rows) if not rows.empty else rows
    out = []
    for paper in preset.published:
        match = (
            ours[(ours["method"] == paper.method) & (ours["task"] == paper.task) & (ours["model"] == paper.model)]
            if not ours.empty
            else ours
        )
        if paper.selection == "last":
            match = (
                rows[
                    (rows["method"] == paper.method)
                    & (rows["task"] == paper.task)
                    & (rows["model"] == paper.model)
                    & rows["is_last_layer"]
                ]
                if not rows.empty
                else rows
            )
        else:
            match = match[match["row_kind"] == "best"] if not match.empty else match
        row = match.iloc[0] if len(match) else None
        get = lambda key: row[key] if row is not None and key in row and pd.notna(row[key]) else None
        params = get("params_paper")
        out.append(
            {
                "method": paper.method,
                "model": paper.model + (" (last layer)" if paper.selection == "last" else ""),
                "layer (paper)": paper.layer,
                "layer (ours)": get("layer"),
                "params M (paper)": paper.params_m,
                "params M (ours)": None if params is None else params / 1e6,
                "dev Spearman (paper)": paper.dev_spearman,
                "dev Spearman (ours)": get("dev_mean"),
                "dev Spearman std": get("dev_std"),
                "test Spearman (paper)": paper.test_spearman,
                "test Spearman (ours)": get("test_mean"),
                "test Spearman std": get("test_std"),
                "Δ test Spearman": None if get("test_mean") is None else get("test_mean") - paper.test_spearman,
                "test Pearson (paper)": paper.test_pearson,
                "test Pearson (ours)": get("test2_mean"),
                "test Pearson std": get("test2_std"),
                "Δ test Pearson": None if get("test2_mean") is None else get("test2_mean") - paper.test_pearson,
                "seeds": get("n_seeds") or 0,
            }
        )
    return pd.DataFrame(out)


def comparison_markdown(table: pd.DataFrame) -> str:
    def num(value, std=None, signed=False):
        if value is None or pd.isna(value):
            return "not run"
        text = f"{value:+.2f}" if signed else f"{value:.2f}"
        return text if std is None or pd.isna(std) else f"{text} ± {std:.2f}"

    shown = pd.DataFrame(
        {
            "method": table["method"],
            "model": table["model"],
            "layer paper / ours": [
                f"{p} / {'–' if o is None or pd.isna(o) else int(o)}"
                for p, o in zip(table["layer (paper)"], table["layer (ours)"])
            ],
            "params M paper / ours": [
                f"{p:.2f} / {num(o)}" for p, o in zip(table["params M (paper)"], table["params M (ours)"])
            ],
            "dev Spearman paper / ours": [
                f"{p:.2f} / {num(o, s)}"
                for p, o, s in zip(
                    table["dev Spearman (paper)"], table["dev Spearman (ours)"], table["dev Spearman std"]
                )
            ],
            "test Spearman paper / ours": [
                f"{p:.2f} / {num(o, s)}"
                for p, o, s in zip(
                    table["test Spearman (paper)"], table["test Spearman (ours)"], table["test Spearman std"]
                )
            ],
            "Δ Spearman": [num(v, signed=True) for v in table["Δ test Spearman"]],
            "test Pearson paper / ours": [
                f"{p:.2f} / {num(o, s)}"
                for p, o, s in zip(
                    table["test Pearson (paper)"], table["test Pearson (ours)"], table["test Pearson std"]
                )
            ],
            "Δ Pearson": [num(v, signed=True) for v in table["Δ test Pearson"]],
            "seeds": table["seeds"].astype(int),
        }
    )
    return to_markdown(shown.astype(str))


def sections(out) -> list[str]:
    """The report's lines for every preset in `out.runs` (CSV of each comparison into `out.tables`)."""
    runs, tables_dir, write_csv = out.runs, out.tables, out.write_csv
    from trainables.methods import find_preset

    lines = []
    for name in preset_names(runs):
        preset = find_preset(name)
        if preset is None:
            lines += [
                "",
                f"## Preset {name}",
                "",
                f"No preset called {name!r} is known to this version of the code.",
                "",
            ]
            continue
        lines += ["", f"## {preset.reproduces} (preset `{name}`)", ""]
        ran = of_preset(runs, name)
        lines += _shown(ran, preset)
        if not preset.published:
            lines += [
                f"The paper gives only a plot of this; the sweep's curves and tables are below.{_note(preset)}",
                "",
            ]
            continue
        if preset.columns:
            table = rows_comparison(ran, preset)
            path = tables_dir / f"paper_{name}.csv"
            write_csv(table, path)
            lines += [
                f"Beside the paper's published numbers ({preset.source}); ours: "
                + "; ".join(_describe(column) for column in preset.columns)
                + f"; Δ = ours - paper ([CSV](tables/{path.name})).{_note(preset)}",
                "",
                rows_markdown(table, preset),
                "",
            ]
            continue
        table = comparison(ran, preset)
        path = tables_dir / f"paper_{name}.csv"
        write_csv(table, path)
        lines += [
            f"Beside the paper's published numbers ({preset.source}); ours: the layer with the best mean dev "
            f"Spearman (or the last layer, where the paper's row is the last layer), mean ± std over seeds; "
            f"Δ = ours - paper; parameters as the paper counts them (embeddings and the first l layers) "
            f"([CSV](tables/{path.name})).{_note(preset)}",
            "",
            comparison_markdown(table),
            "",
        ]
    return lines


def _note(preset) -> str:
    return f" {preset.note}" if preset.note else ""


def _shown(runs: pd.DataFrame, preset) -> list[str]:
    """One line per param the preset names (`Preset.shown`): the values the runs recorded."""
    lines = []
    for param, label in preset.shown:
        values = sorted(runs[param].dropna().astype(str).unique()) if param in runs else []
        lines += [f"{label}: {', '.join(f'`{v}`' for v in values) if values else 'not recorded by these runs'}.", ""]
    return lines


STATS = {"mean": "mean over runs", "max": "max over runs", "std": "sample std over runs"}


def _describe(column) -> str:
    if column.of:
        return f"{column.name} = the mean of the row's {', '.join(column.of)}"
    metrics = ", ".join(f"`{m}`" for m in column.metrics)
    what = metrics if len(column.metrics) == 1 else f"the mean of {metrics} per run"
    return f"{column.name} = {STATS[column.stat]} of {what}"


def _matching(runs: pd.DataFrame, match) -> pd.DataFrame:
    keep = pd.Series(True, index=runs.index)
    for param, value in match:
        accepted = {str(v) for v in (value if isinstance(value, tuple) else (value,))}
        keep &= runs[param].astype(str).isin(accepted) if param in runs else False
    return runs[keep]


def rows_comparison(runs: pd.DataFrame, preset) -> pd.DataFrame:
    """The preset's `PublishedRow` rows beside the complete runs matching each: per column the paper's
    number, ours (the column's statistic over the matching runs; with the std for a mean), Δ = ours -
    paper, and the number of runs."""
    complete = split_runs(runs)[0] if len(runs) else runs
    out = []
    for paper in preset.published:
        matched = _matching(complete, paper.match) if len(complete) else complete
        published = dict(paper.values)
        row = {"part": paper.group, "row": paper.label, "runs": len(matched)}
        for column in preset.columns:
            if column.of:
                parts = [row.get(f"{name} (ours)") for name in column.of]
                ours = None if any(p is None for p in parts) else float(sum(parts) / len(parts))
                theirs = published.get(column.name)
                row[f"{column.name} (paper)"], row[f"{column.name} (ours)"] = theirs, ours
                row[f"{column.name} std"] = None
                row[f"Δ {column.name}"] = None if ours is None or theirs is None else ours - theirs
                continue
            present = all(m in matched for m in column.metrics)
            values = (
                matched[list(column.metrics)].astype(float).mean(axis=1, skipna=False).dropna()
                if present and len(matched)
                else pd.Series(dtype=float)
            )
            ours = None
            if len(values):
                ours = {"mean": values.mean(), "max": values.max(), "std": values.std(ddof=1)}[column.stat]
                ours = None if pd.isna(ours) else float(ours)
            spread = float(values.std(ddof=1)) if column.stat == "mean" and len(values) > 1 else None
            theirs = published.get(column.name)
            row[f"{column.name} (paper)"] = theirs
            row[f"{column.name} (ours)"] = ours
            row[f"{column.name} std"] = spread
            row[f"Δ {column.name}"] = None if ours is None or theirs is None else ours - theirs
        out.append(row)
    return pd.DataFrame(out)


def rows_markdown(table: pd.DataFrame, preset) -> str:
    def num(value, signed=False):
        if value is None or pd.isna(value):
            return None
        return f"{value:+.2f}" if signed else f"{value:.2f}"

    shown = {"part": table["part"], "row": table["row"]}
    for column in preset.columns:
        name = column.name
        cells = []
        for paper, ours, std, delta, runs in zip(
            table[f"{name} (paper)"], table[f"{name} (ours)"], table[f"{name} std"], table[f"Δ {name}"], table["runs"]
        ):
            theirs = num(paper) or "–"
            mine = num(ours)
            if mine is None:
                mine = "not run" if not runs else "–"
            elif std is not None and pd.notna(std):
                mine = f"{mine} ± {std:.2f}"
            cells.append(f"{theirs} / {mine}" + (f" ({num(delta, signed=True)})" if num(delta) else ""))
        shown[f"{name} paper / ours (Δ)"] = cells
    shown["runs"] = table["runs"].astype(int)
    return to_markdown(pd.DataFrame(shown).astype(str))
