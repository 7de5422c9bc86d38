"""The report of a `--search pareto` sweep: every point the search evaluated and the front it found.

One row per trial of a sweep whose runs logged `search` = pareto: its size (`params_truncated`, or
`encode_ms_per_sentence` where the sweep minimised the encode time, param `pareto_size`), its
primary (dev) score, its held-out score, the last rung it reached (`pareto_rung`) and whether it
ran its whole budget (`completed`: that rung is its last epoch). The front is taken among the
completed trials, by the search's own objectives (the dev score, the size; dominance as in
trainables/core/pareto.py): a trial stopped at a rung is a point the search evaluated, not a
model it trained to the end.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.names import display_names, metric_name
from analysis.plots import new_figure, save_figure
from analysis.tables import to_markdown
from trainables.core.pareto import nondominated_ranks

SIZES = {"params": ("params_truncated", "parameters (M)", 1e-6), "encode-time": ("encode_ms_per_sentence", "ms", 1.0)}


def search_points(runs: pd.DataFrame) -> pd.DataFrame:
    """Every trial of the pareto sweeps in `runs` (see the module docstring), with `on_front`."""
    if "search" not in runs or not (runs["search"] == "pareto").any():
        return pd.DataFrame()
    frames = []
    for sweep, group in runs[runs["search"] == "pareto"].groupby("sweep", sort=True):
        size_kind = str(group["pareto_size"].dropna().iloc[0]) if "pareto_size" in group else "params"
        size_column, size_label, scale = SIZES.get(size_kind, SIZES["params"])
        primary, report = group["metric_primary"].iloc[0], group["metric_report"].iloc[0]
        mode = group["metric_mode"].iloc[0] if "metric_mode" in group else "max"
        points = pd.DataFrame(
            {
                "sweep": sweep,
                "run_name": group["run_name"],
                "model": group["model"],
                "layer": group.get("layer"),
                "seed": group.get("seed"),
                "lr": group.get("lr"),
                "size": pd.to_numeric(group.get(size_column), errors="coerce") * scale,
                "size_label": size_label,
                "score": pd.to_numeric(group.get(primary), errors="coerce"),
                "report": pd.to_numeric(group.get(report), errors="coerce") if report in group else np.nan,
                "metric": primary,
                "rung": pd.to_numeric(group.get("pareto_rung"), errors="coerce"),
                "rank": pd.to_numeric(group.get("pareto_rank"), errors="coerce"),
            }
        )
        points["completed"] = points["rung"] >= pd.to_numeric(group["epochs"], errors="coerce").clip(lower=1)
        sign = 1.0 if mode == "min" else -1.0
        points["on_front"] = False
        done = points[points["completed"] & points["score"].notna() & points["size"].notna()]
        if not done.empty:
            ranks = nondominated_ranks(np.column_stack([done["size"], sign * done["score"]]))
            points.loc[done.index[ranks == 0], "on_front"] = True
        frames.append(points)
    return pd.concat(frames, ignore_index=True)


def plot_search(points: pd.DataFrame, title: str):
    """The evaluated points (hollow: stopped at a rung; filled: completed) and the front through them."""
    fig, ax = new_figure((8.0, 5.0))
    stopped, done = points[~points["completed"]], points[points["completed"]]
    ax.scatter(stopped["size"], stopped["score"], s=30, facecolors="none", edgecolors="0.45", label="stopped at a rung")
    ax.scatter(done["size"], done["score"], s=30, color="tab:blue", label="trained to the end")
    front = done[done["on_front"]].sort_values("size")
    ax.plot(front["size"], front["score"], color="tab:red", marker="o", markersize=9, markerfacecolor="none", lw=1.4)
    ax.plot([], [], color="tab:red", marker="o", markerfacecolor="none", label="front found")
    ax.set_xlabel(points["size_label"].iloc[0])
    ax.set_ylabel(f"best dev {metric_name(points['metric'].iloc[0].removeprefix('best_dev_'))}")
    ax.set_title(title)
    ax.legend(loc="lower right")
    return fig


def sections(out) -> list[str]:
    """The report's markdown for each pareto sweep (figure, the front's table); files go into report.files."""
    runs, figures, tables, write_csv, report = out.runs, out.figures, out.tables, out.write_csv, out.report
    points = search_points(runs)
    if points.empty:
        return []
    write_csv(points, tables / "search_points.csv")
    lines = []
    for sweep, group in points.groupby("sweep", sort=True):
        stem = f"search_{sweep}".replace("/", "_")
        files = save_figure(plot_search(group, f"--search pareto: {sweep}"), figures, stem)
        report.files += files
        names = display_names(group["model"].unique())
        front = group[group["on_front"]].sort_values("size")
        shown = front.assign(model=[names[m] for m in front["model"]])[
            ["model", "layer", "seed", "lr", "size", "score", "report", "rank"]
        ]
        lines += [
            "",
            f"## Pareto search {sweep}",
            "",
            f"{len(group)} points evaluated, {int(group['completed'].sum())} trained to the end, "
            f"{len(front)} on the front found ([CSV](tables/search_points.csv), every point with `on_front`).",
            "",
            f"![search front](figures/{files[0].name})",
            "",
            "The front (by dev score and size, among the trials trained to the end; `report` is the held-out "
            "score at the best dev epoch):",
            "",
            to_markdown(
                shown.assign(
                    lr=shown["lr"].map("{:g}".format),
                    size=shown["size"].map("{:.4g}".format),
                    score=shown["score"].map("{:.2f}".format),
                    report=shown["report"].map("{:.2f}".format),
                    rank=shown["rank"].map("{:.0f}".format),
                ).astype(str)
            ),
        ]
    return lines
