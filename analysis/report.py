"""`python -m analysis report`: every output of the analysis in one folder, with an index.

Writes into OUT:
- runs.csv (every trial run), excluded_runs.csv (runs left out of the averages, with reasons),
  summary.csv (per method, task and the contract's axes but the seed, see analysis/summary.py),
  pareto_points.csv;
- for contracts that select a layer of each model (TMFT and its variants):
  figures/layer_curves_<method>_<task>.png|svg, figures/pareto_<method>_<task>.png|svg,
  tables/table2_<method>_<task>.md|csv and, for tasks with more than one method,
  tables/table1_<task>.md|csv;
- for every other contract (e.g. zero-shot evaluation): tables/scores_<method>_<task or
  "all">.md|csv (every value of its axes, a column per score: each evaluation set, then their
  mean) and, when the layer is an axis, figures/curves_<method>_<task>_<other axes' values>.png|svg
  (e.g. per model and pooling: one line per evaluation set against the layer);
- for a `--search pareto` sweep: figures/search_<sweep>.png|svg (every point the search evaluated,
  the front it found) and tables/search_points.csv (analysis/search_front.py);
- a `--seeds-by-need` sweep's seeds per configuration and intervals: figures/seeds_by_need_*.png and
  tables/seeds_by_need.csv (analysis/seed_rounds.py);
- for an adaptive-layer run beside a TMFT sweep of its model and task: its layer curve beside TMFT's
  with the compute each took and their CKA per layer, figures/one_run_vs_tmft_<model>_<task>.png|svg and
  tables/one_run_vs_tmft.csv (analysis/one_run.py);
- for runs of a paper's preset (param `preset`): a section naming the table or figure, and
  tables/paper_<preset>.csv with the paper's published numbers beside the sweep's (analysis/published.py);
- README.md: the index that shows all of it, including the excluded runs.

`build_report` writes a local folder; `python -m analysis report --out` also takes an object-store
URI (the folder is built in a temporary folder and uploaded whole, analysis/outputs.py).
`log_to_parent_runs` then logs the folder as MLflow artifacts under `report/` of every sweep (parent
run, the trials' `mlflow.parentRunId`) whose trials the report includes, so that the MLflow UI shows
the tables and figures beside the sweep; a store that refuses them costs a warning, not the report.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pandas as pd

from analysis import one_run, published, search_front, seed_rounds
from analysis.loader import AnalysisError, load_runs
from analysis.names import display_names, method_info, method_name, method_sort_key, task_name
from analysis.pareto import pareto_points
from analysis.plots import model_colors, plot_layer_curves, plot_metric_curves, plot_pareto, save_figure
from analysis.summary import TABLE_FAMILY, flag_mixed_configs, layer_family, split_runs, summarize
from analysis.tables import (
    metric_columns,
    score_columns,
    scores_markdown,
    scores_table,
    table1,
    table1_markdown,
    table2,
    table2_markdown,
    table_axes,
    to_markdown,
)
from trainables.core import object_storage
from trainables.core.errors import SweepInputError
from trainables.core.paths import check_folder_target

REPORT_ARTIFACT_PATH = "report"  # the report's folder among a parent run's artifacts


@dataclass
class Report:
    out_dir: Path
    index: Path
    runs: pd.DataFrame
    summary: pd.DataFrame
    excluded: pd.DataFrame
    files: list[Path] = field(default_factory=list)


def slug(*parts: str) -> str:
    return "_".join(re.sub(r"[^A-Za-z0-9]+", "-", str(p)).strip("-").lower() for p in parts)


def _safe_uri(uri: str) -> str:
    """The URI without any user:password part."""
    parts = urlsplit(uri)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return uri


def _groups(summary: pd.DataFrame) -> list[tuple[str, str]]:
    pairs = summary[["method", "task"]].drop_duplicates().itertuples(index=False)
    return sorted(((m, t) for m, t in pairs), key=lambda p: (p[1], method_sort_key(p[0])))


def _runs_overview(runs: pd.DataFrame, complete: pd.DataFrame) -> str:
    runs = runs.assign(**{c: runs[c] if c in runs else pd.NA for c in ("task", "model", "layer", "seed")})
    runs["task"] = runs["task"].fillna("")
    counts = runs.groupby(["sweep", "method", "task"], dropna=False).agg(
        trials=("run_id", "size"), models=("model", "nunique"), layers=("layer", "nunique"), seeds=("seed", "nunique")
    )
    used = complete.groupby(["sweep", "method", "task"], dropna=False).size()
    counts["complete"] = used.reindex(counts.index).fillna(0).astype(int)
    counts = counts.reset_index()
    return to_markdown(counts.astype(str))


def _excluded_markdown(excluded: pd.DataFrame) -> str:
    if excluded.empty:
        return "None: every trial run finished with its metrics.\n"
    shown = excluded.copy()
    if "model" in shown:
        names = display_names(shown["model"].dropna().unique())
        shown["model"] = shown["model"].map(lambda m: names.get(m, m))
    return to_markdown(shown.astype(str).replace({"<NA>": "", "nan": "", "None": ""}))


def _group_label(axes: list[str], key: tuple) -> str:
    """e.g. "BERT base, pooling=mean" for the axes (model, pooling)."""
    return ", ".join(display_names([v])[str(v)] if a == "model" else f"{a}={v}" for a, v in zip(axes, key))


def _layer_curves(
    rows: pd.DataFrame, others: list[str], columns: list[str], stem: str, heading: str, figures: Path, report: Report
) -> list[str]:
    """A figure per group of the `others` axes (e.g. per model and pooling) with two layers or
    more: one line per column against the layer."""
    lines = []
    for key, group in rows.groupby(others, sort=False, dropna=False) if others else [((), rows)]:
        if group["layer"].nunique() < 2:
            continue  # one layer: the table says it all
        key = key if isinstance(key, tuple) else (key,)
        label = _group_label(others, key)
        files = save_figure(
            plot_metric_curves(group, columns, f"{heading}: {label}"),
            figures,
            f"curves_{stem}" + "".join(f"_{slug(value)}" for value in key),
        )
        report.files += files
        lines += [
            f"![{label}](figures/{files[0].name})",
            "",
            f"{label}: each score against the layer ([SVG](figures/{files[1].name})).",
            "",
        ]
    return lines


@dataclass
class ReportParts:
    """What every section of the report reads (the runs, their summaries, the Pareto points, the models'
    colours) and where it writes (`figures/`, `tables/`, each file kept in `report.files`). A section is a
    function of this alone that returns its Markdown lines; `SECTIONS` lists them in the report's order."""

    report: Report
    layers: pd.DataFrame  # the layer family's rows (a model's layers; `summarize` then `layer_family`)
    others: pd.DataFrame  # every other contract's rows (e.g. zero-shot evaluation)
    points: pd.DataFrame
    colors: dict

    @property
    def runs(self) -> pd.DataFrame:
        return self.report.runs

    @property
    def figures(self) -> Path:
        return self.report.out_dir / "figures"

    @property
    def tables(self) -> Path:
        return self.report.out_dir / "tables"

    def write_csv(self, frame: pd.DataFrame, path: Path) -> None:
        frame.to_csv(path, index=False)
        self.report.files.append(path)

    def write_table(self, frame: pd.DataFrame, markdown: str, stem: Path) -> None:
        """`frame` as `<stem>.csv` and its Markdown as `<stem>.md`."""
        self.write_csv(frame, stem.with_suffix(".csv"))
        stem.with_suffix(".md").write_text(markdown)
        self.report.files.append(stem.with_suffix(".md"))


def _table_family_sections(out: ReportParts) -> list[str]:
    """Methods of every other contract (e.g. zero-shot evaluation): per (method, task), a table of
    every value of the contract's axes with each score (e.g. one column per evaluation set, then
    their mean), and, when the layer is an axis, layer curves per group of the other axes with
    one line per metric column (the primary where there is none)."""
    figures, tables, write_csv, report = out.figures, out.tables, out.write_csv, out.report
    lines = []
    for (method, task), rows in out.others.groupby(["method", "task"], sort=True):
        axes, scores = table_axes(rows), score_columns(rows)
        stem = slug(method, task or "all")
        heading = method_name(method) + (f" on {task_name(task)}" if task else "")
        table = scores_table(rows)
        markdown = scores_markdown(table, axes, scores, rows["select_axis"].iloc[0])
        write_csv(table, tables / f"scores_{stem}.csv")
        (tables / f"scores_{stem}.md").write_text(markdown)
        report.files.append(tables / f"scores_{stem}.md")
        lines += [
            "",
            f"## {heading}",
            "",
            f"Every {', '.join(axes)} (scores ×100; [Markdown](tables/scores_{stem}.md), "
            f"[CSV](tables/scores_{stem}.csv)):",
            "",
            markdown,
        ]
        if "layer" in axes:
            columns = metric_columns(rows) or scores[:1]
            lines += _layer_curves(rows, [a for a in axes if a != "layer"], columns, stem, heading, figures, report)
    return lines


def _methods_section(out: ReportParts) -> list[str]:
    """Each method in the report: its display name, what it is, its main metric and the paper to cite
    (the method's `MethodInfo`)."""
    runs, infos = out.runs, {}
    for label in sorted(runs["method"].dropna().unique(), key=method_sort_key) if "method" in runs else []:
        info = method_info(label)
        if info is not None:
            infos.setdefault(info.display_name, info)
    if not infos:
        return []
    lines = ["", "## Methods", ""]
    for name, info in infos.items():
        lines += [
            f"**{name}**: {info.description}; main metric: {info.main_metric}.",
            "",
            "```bibtex",
            info.citation.strip(),
            "```",
            "",
        ]
    return lines


def select_runs(runs: pd.DataFrame, where: dict[str, str] | None) -> pd.DataFrame:
    """The runs whose params equal every `where` value (compared as text, e.g. {"lr": "2e-05"})."""
    for key, value in (where or {}).items():
        if key not in runs:
            raise AnalysisError(
                f"--where {key}=...: no such param; the runs have: "
                f"{', '.join(runs.attrs.get('param_columns', runs.columns))}."
            )
        runs = runs[runs[key].astype(str) == str(value)]
    if runs.empty:
        raise AnalysisError(f"No trial run matches --where {' '.join(f'{k}={v}' for k, v in where.items())}.")
    return runs


def _header(out: ReportParts, source: str) -> list[str]:
    runs, complete = out.runs, split_runs(out.runs)[0]
    return [
        "# Sweep report" + (" (SIMULATED: synthetic scores, not measurements)" if runs.attrs.get("simulated") else ""),
        "",
        f"Source: {source}; generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}.",
        "",
        f"{len(runs)} trial runs: {len(complete)} complete and used, {len(out.report.excluded)} left out "
        "([see below](#runs-left-out)). Scores are ×100, mean ± sample std (ddof=1) over seeds; where a method "
        "selects (e.g. the best layer of each model), it selects by the highest mean **dev** (primary) score "
        "(the lowest for `metric_mode` min), and its test score is reported.",
        "",
        "| file | content |",
        "|---|---|",
        "| [runs.csv](runs.csv) | one row per trial run: params, final metrics, status |",
        "| [summary.csv](summary.csv) | one row per (method, task, model, layer), or per (method, task, axes of its "
        "contract): n_seeds, means, stds, best/last layer, `is_best` |",
        "| [excluded_runs.csv](excluded_runs.csv) | runs left out of the averages, with the reason |",
        "| [pareto_points.csv](pareto_points.csv) | every (model, layer) mean with `row_kind` (best, last, layer) "
        "and `on_front` |",
        "",
        "## Runs by sweep",
        "",
        _runs_overview(runs, complete),
    ]


def _mixed_settings(out: ReportParts) -> list[str]:
    """A warning where a row averages runs of different settings; a line where nothing is complete yet."""
    lines = []
    mixed = flag_mixed_configs(out.report.summary)
    if not mixed.empty:
        shown = ["method", "task", *table_axes(mixed), "n_seeds", "configs", "varying"]
        lines += [
            "",
            "**Warning:** these rows average runs with different settings (`varying`); separate them "
            "with `--where PARAM=VALUE`:",
            "",
            to_markdown(mixed[shown].astype(str).replace({"<NA>": ""})),
            "",
        ]
    if out.layers.empty and out.others.empty:
        lines += ["", "No complete runs yet: nothing to plot or tabulate.", ""]
    return lines


def _methods_compared(out: ReportParts) -> list[str]:
    """Per task with more than one method: the best layer of each model and method (Table 1 layout)."""
    summary, lines = out.layers, []
    for task in sorted(summary["task"].unique()) if not summary.empty else []:
        if summary.loc[summary["task"] == task, "method"].nunique() > 1:
            t1 = table1(summary, task)
            stem = out.tables / f"table1_{slug(task)}"
            markdown = table1_markdown(t1, summary.loc[summary["task"] == task, "metric"].iloc[0])
            out.write_table(t1, markdown, stem)
            lines += [
                "",
                f"## {task_name(task)}: methods compared (Table 1 layout)",
                "",
                "Best layer by mean dev per model and method; test maximum per method in bold "
                f"([CSV](tables/{stem.name}.csv)).",
                "",
                markdown,
            ]
    return lines


def _layer_groups(out: ReportParts) -> list[str]:
    """Per (method, task) of the layer family: layer curves, the Pareto front, best and last layer."""
    summary, points, figures, lines = out.layers, out.points, out.figures, []
    for method, task in _groups(summary):
        name = slug(method, task)
        rows = summary[(summary["method"] == method) & (summary["task"] == task)]
        lines += ["", f"## {method_name(method)} on {task_name(task)}", ""]
        layer_files = save_figure(
            plot_layer_curves(summary, method, task, colors=out.colors), figures, f"layer_curves_{name}"
        )
        lines += [
            f"![layer curves](figures/{layer_files[0].name})",
            "",
            f"Layer curves ([SVG](figures/{layer_files[1].name})).",
            "",
        ]
        out.report.files += layer_files
        group_points = points[(points["method"] == method) & (points["task"] == task)]
        if group_points["params_m"].notna().any():
            pareto_files = save_figure(plot_pareto(group_points, colors=out.colors), figures, f"pareto_{name}")
            front = display_names(rows["model"].unique())
            on_front = ", ".join(
                f"{front[r.model]} (l={r.layer})" for r in group_points[group_points["on_front"]].itertuples()
            )
            lines += [
                f"![Pareto front](figures/{pareto_files[0].name})",
                "",
                f"Pareto front ([SVG](figures/{pareto_files[1].name})): {on_front}.",
                "",
            ]
            out.report.files += pareto_files
        t2 = table2(summary, method, task)
        markdown = table2_markdown(t2, rows["metric"].iloc[0])
        stem = out.tables / f"table2_{name}"
        out.write_table(t2, markdown, stem)
        lines += [
            f"Best layer by mean dev, and the last layer where different (Table 2 layout; "
            f"[CSV](tables/{stem.name}.csv)):",
            "",
            markdown,
        ]
    return lines


def _left_out(out: ReportParts) -> list[str]:
    return [
        "",
        "## Runs left out",
        "",
        "Not finished, failed, missing a selection metric, or an older duplicate of a configuration; "
        "none of them is in any mean above.",
        "",
        _excluded_markdown(out.report.excluded),
    ]


# The report's sections after its header, in order: each takes the ReportParts and returns its lines.
SECTIONS = (
    _mixed_settings,
    published.sections,
    _methods_compared,
    _layer_groups,
    _table_family_sections,
    search_front.sections,
    seed_rounds.sections,
    one_run.sections,
    _methods_section,
    _left_out,
)


def build_report(tracking_uri: str, out_dir, experiment: str | None = None, where: dict | None = None) -> Report:
    """Read MLflow, write every output into out_dir, return what was written. `where` keeps only
    the runs whose params have the given values (to separate sweeps run with different settings)."""
    if object_storage.is_uri(out_dir):  # never a local folder named "s3:"
        raise SweepInputError(
            f"build_report writes a local folder, not {out_dir}; write into analysis.outputs.local_folder(URI) "
            "or run python -m analysis report --out URI"
        )
    out_dir = Path(out_dir)
    check_folder_target(out_dir, "--out")  # a file there: refused before reading the store
    runs = select_runs(load_runs(tracking_uri, experiment), where)
    for folder in (out_dir, out_dir / "figures", out_dir / "tables"):
        folder.mkdir(parents=True, exist_ok=True)
    summary = summarize(runs)
    report = Report(out_dir, out_dir / "README.md", runs, summary, split_runs(runs)[1])
    others = summary[summary["family"] == TABLE_FAMILY] if "family" in summary else summary.iloc[0:0]
    layers = layer_family(summary)
    points = pareto_points(layers) if not layers.empty else pd.DataFrame()
    colors = model_colors(layers["model"].unique()) if not layers.empty else {}
    out = ReportParts(report, layers, others, points, colors)
    out.write_csv(runs, out_dir / "runs.csv")
    out.write_csv(report.excluded, out_dir / "excluded_runs.csv")
    out.write_csv(pd.concat([layers, others], ignore_index=True), out_dir / "summary.csv")
    out.write_csv(points, out_dir / "pareto_points.csv")

    source = f"`{_safe_uri(tracking_uri)}`" + (f", experiment `{experiment}`" if experiment else ", all experiments")
    if where:
        source += ", runs with " + ", ".join(f"`{k}={v}`" for k, v in where.items())
    lines = _header(out, source)
    for section in SECTIONS:
        lines += section(out)
    report.index.write_text("\n".join(lines) + "\n")
    report.files.append(report.index)
    return report


# ---- the report as artifacts of the sweeps' parent runs -------------------------------------
def parent_run_ids(runs: pd.DataFrame) -> list[str]:
    """The parent runs (sweeps) of the report's trial runs, in order of first appearance."""
    if "parent_run_id" not in runs:
        return []
    return list(dict.fromkeys(str(p) for p in runs["parent_run_id"].dropna() if str(p)))


def log_to_parent_runs(tracking_uri: str, report: Report) -> tuple[list[str], str | None]:
    """Log the report's folder as artifacts under `report/` of each parent run of its trials.

    Returns (the runs it was logged to, None) or, when the MLflow store or its artifact store
    refuses (a run deleted, a bucket gone, no write permission), (the runs done, one warning line):
    the report's files are written already, so this never fails the report."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    logged = []
    with _few_http_retries():
        for run_id in parent_run_ids(report.runs):
            try:
                client.log_artifacts(run_id, str(report.out_dir), artifact_path=REPORT_ARTIFACT_PATH)
            except Exception as error:  # any store's error: MlflowException, OSError, boto's, HTTP's
                return logged, _not_logged(run_id, logged, error)
            logged.append(run_id)
    return logged, None


def _not_logged(run_id: str, logged: list[str], error: BaseException, limit: int = 300) -> str:
    """The warning line: which run, the error's first line (at most `limit` characters), what to do."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    others = f" (logged to {len(logged)} other(s))" if logged else ""
    return (
        f"the report was not logged to MLflow as artifacts {REPORT_ARTIFACT_PATH}/ of parent run {run_id}{others}: "
        f"{text}; its files are complete where the report is (pass --no-log-artifacts to skip this step)"
    )


@contextmanager
def _few_http_retries():
    """MLflow's HTTP client retries a failing upload for minutes (7 retries, backoff 2 s doubling);
    a report that logs its files after writing them gives up after 2, unless the user set them."""
    import os

    names = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
    added = [name for name in names if name not in os.environ]
    os.environ.update({name: names[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)
