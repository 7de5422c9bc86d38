"""Figures from the summary: layer curves (ELECTRA paper, Figure 2) and the Pareto front
(Figure 4). Each function returns a matplotlib Figure; `save_figure` writes PNG and SVG.

- `plot_layer_curves(summary, method, task)`: mean test score (at the best dev epoch) against
  the layer index, a line per model with a band of +-1 sample std over seeds, and a star on
  each model's best-dev layer.
- `plot_pareto(points)`: parameters of the truncated model (millions) against the mean test
  score, a point per (model, layer) (so a one-model sweep has a point per layer): small dots,
  with each model's best-dev layer filled and its last layer hollow; the Pareto front as a grey
  line through its points; labels placed so they do not overlap.
- `plot_metric_curves(rows, columns, title)`: several final metrics against the layer, one line
  per metric (a zero-shot evaluation of one model and pooling: one line per evaluation set).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from analysis.names import display_names, method_name, metric_name, score_name, task_name
from analysis.summary import PARAM_LABELS

MARKER_BEST, MARKER_LAST = "o", "s"
LOG_X_RATIO = 20  # a Pareto plot whose parameter counts span more than this uses a log x axis


def new_figure(figsize):
    """A Figure on an Agg canvas, outside pyplot: no global state, no display needed, and it
    still shows inline when a notebook displays it."""
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def model_colors(models) -> dict[str, tuple]:
    """A stable colour per model (tab10, then tab20), ordered by display name."""
    names = display_names(models)
    ordered = sorted(names, key=lambda m: names[m].lower())
    palette = list(matplotlib.colormaps["tab10"].colors) + list(matplotlib.colormaps["tab20"].colors[1::2])
    return {m: palette[i % len(palette)] for i, m in enumerate(ordered)}


def save_figure(fig, out_dir, stem: str) -> list[Path]:
    """Write `stem`.png (150 dpi) and `stem`.svg into out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.svg"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    return paths


def _score_label(metric: str, split: str) -> str:
    return f"{split} {metric_name(metric)} ×100"


def plot_layer_curves(summary, method: str, task: str, colors=None):
    """Layer curves of one (method, task) from `summarize()` output."""
    rows = summary[(summary["method"] == method) & (summary["task"] == task)]
    if rows.empty:
        raise ValueError(f"no summary rows for method {method!r}, task {task!r}")
    names = display_names(rows["model"].unique())
    colors = colors or model_colors(rows["model"].unique())
    metric = rows["metric"].iloc[0]
    fig, ax = new_figure((7.5, 4.8))
    for model in sorted(names, key=lambda m: names[m].lower()):
        curve = rows[rows["model"] == model].sort_values("layer")
        x, mean = curve["layer"].to_numpy(), curve["test_mean"].to_numpy(dtype=float)
        std = np.nan_to_num(curve["test_std"].to_numpy(dtype=float))
        counts = sorted(curve["n_seeds"].unique())
        seeds = "/".join(str(n) for n in counts) + (" seed" if counts == [1] else " seeds")
        color = colors[model]
        ax.plot(x, mean, marker=".", color=color, label=f"{names[model]} (n={seeds})")
        ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.18, linewidth=0)
        best = curve[curve["is_best_layer"]]
        ax.plot(
            best["layer"],
            best["test_mean"],
            marker="*",
            markersize=15,
            color=color,
            markeredgecolor="black",
            markeredgewidth=0.8,
            linestyle="none",
            zorder=5,
        )
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], marker="*", markersize=13, color="grey", markeredgecolor="black", linestyle="none"))
    labels.append("best layer by mean dev")
    ax.legend(handles, labels, loc="best", fontsize=9, framealpha=0.9)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=13))
    ax.set_xlabel("Layer index l (0 = embedding output)")
    ax.set_ylabel(_score_label(metric, "Test") + " at best dev epoch")
    ax.set_title(f"{method_name(method)} on {task_name(task)}: mean ± 1 std over seeds", fontsize=11)
    ax.grid(alpha=0.3)
    return fig


def plot_metric_curves(rows, columns: list[str], title: str):
    """Final metrics against the layer, one line per column (summary rows of one group of a
    table-family contract, e.g. a zero-shot evaluation of one model and pooling: one line per
    evaluation set), with a band of +-1 sample std where rows average several runs."""
    rows = rows.sort_values("layer")
    fig, ax = new_figure((7.5, 4.8))
    x = rows["layer"].to_numpy(dtype=float)
    for column in columns:
        mean = rows[f"{column}_mean"].to_numpy(dtype=float)
        (line,) = ax.plot(x, mean, marker=".", label=score_name(column))
        std = np.nan_to_num(rows[f"{column}_std"].to_numpy(dtype=float))
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.18, linewidth=0)
    ax.legend(loc="best", fontsize=9, framealpha=0.9)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=13))
    ax.set_xlabel("Layer index l (0 = embedding output)")
    ax.set_ylabel("Spearman ×100" if all(c.endswith("_spearman") for c in columns) else "score")
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3)
    return fig


def _polyline_boxes(ax, line, step_px=4.0):
    """Small boxes along a drawn line (display coordinates), so labels can avoid it."""
    from matplotlib.transforms import Bbox

    xy = ax.transData.transform(np.column_stack(line.get_data()).astype(float))
    boxes = []
    for (x0, y0), (x1, y1) in zip(xy[:-1], xy[1:]):
        for t in np.linspace(0, 1, max(2, int(np.hypot(x1 - x0, y1 - y0) / step_px))):
            boxes.append(Bbox.from_bounds(x0 + t * (x1 - x0) - 1, y0 + t * (y1 - y0) - 1, 2, 2))
    return boxes


def _overlap_area(box, boxes) -> float:
    total = 0.0
    for other in boxes:
        w = min(box.x1, other.x1) - max(box.x0, other.x0)
        h = min(box.y1, other.y1) - max(box.y0, other.y0)
        if w > 0 and h > 0:
            total += w * h
    return total


def _outside_area(box, frame) -> float:
    inside_w = max(0.0, min(box.x1, frame.x1) - max(box.x0, frame.x0))
    inside_h = max(0.0, min(box.y1, frame.y1) - max(box.y0, frame.y0))
    return box.width * box.height - inside_w * inside_h


# Offsets (unit direction) and text alignment, in order of preference.
_DIRECTIONS = [
    (0.8, 0.6, "left", "bottom"),
    (1, 0, "left", "center"),
    (0.8, -0.6, "left", "top"),
    (-0.8, 0.6, "right", "bottom"),
    (-1, 0, "right", "center"),
    (-0.8, -0.6, "right", "top"),
    (0, 1, "center", "bottom"),
    (0, -1, "center", "top"),
]
_STEPS = (1, 1.8, 2.8, 4, 5.5, 7.5, 10)


def place_labels(ax, xs, ys, texts, fontsize=8.5, avoid_lines=(), colors=None):
    """Annotate each (x, y) with its text at the nearby offset that overlaps no other label, no
    point, no legend and no line in `avoid_lines`, inside the axes (the least overlap if every
    offset collides); labels moved away from their point get a thin leader line."""
    from matplotlib.transforms import Bbox

    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    points = ax.transData.transform(np.column_stack([xs, ys]))
    px_per_pt = fig.dpi / 72
    radius = 5 * px_per_pt  # about a marker's half-size
    taken = [Bbox.from_bounds(px - radius, py - radius, 2 * radius, 2 * radius) for px, py in points]
    if ax.get_legend() is not None:
        taken.append(ax.get_legend().get_window_extent(renderer))
    for line in avoid_lines:
        taken.extend(_polyline_boxes(ax, line))
    annotations = []
    for i in np.argsort(xs, kind="stable"):
        probe = ax.text(0, 0, texts[i], fontsize=fontsize)
        extent = probe.get_window_extent(renderer)
        probe.remove()
        w, h = extent.width + 4, extent.height + 4
        best = None
        for step in _STEPS:
            for order, (dx, dy, ha, va) in enumerate(_DIRECTIONS):
                ox, oy = 7 * step * dx * px_per_pt, 7 * step * dy * px_per_pt
                x0 = points[i][0] + ox - {"left": 0, "center": w / 2, "right": w}[ha]
                y0 = points[i][1] + oy - {"bottom": 0, "center": h / 2, "top": h}[va]
                box = Bbox.from_bounds(x0, y0, w, h)
                cost = _overlap_area(box, taken) + 4 * _outside_area(box, frame)
                if best is None or cost < best[0] - 1e-9:
                    best = (cost, step, (dx, dy, ha, va), box)
            if best[0] == 0:
                break
        _, step, (dx, dy, ha, va), box = best
        arrow = {"arrowstyle": "-", "color": "0.55", "lw": 0.6, "shrinkA": 0, "shrinkB": 4} if step > 1 else None
        annotations.append(
            ax.annotate(
                texts[i],
                (xs[i], ys[i]),
                xytext=(7 * step * dx, 7 * step * dy),
                textcoords="offset points",
                ha=ha,
                va=va,
                fontsize=fontsize,
                arrowprops=arrow,
                color=(colors[i] if colors is not None else None),
            )
        )
        taken.append(box)
    return annotations


def plot_pareto(points, colors=None, title: str | None = None):
    """Pareto plot of one (method, task) from `pareto.pareto_points()` output (rows of one group):
    every (model, layer) mean, the best and last layers marked and labelled, the front through them."""
    points = points[points["params_m"].notna() & points["test_mean"].notna()]
    if points.empty:
        raise ValueError("no points with both a parameter count and a test score")
    names = display_names(points["model"].unique())
    colors = colors or model_colors(points["model"].unique())
    metric = points["metric"].iloc[0]
    fig, ax = new_figure((9.0, 5.4))
    front = points[points["on_front"]].sort_values(["params_m", "test_mean"])
    front_style = dict(
        color="0.55",
        linewidth=1.6,
        marker="o",
        markersize=14,
        markerfacecolor="none",
        markeredgecolor="0.55",
        markeredgewidth=1.2,
    )
    (front_line,) = ax.plot(front["params_m"], front["test_mean"], zorder=1, **front_style)
    for _, row in points.iterrows():
        kind = row["row_kind"]
        if kind == "layer":
            ax.scatter(
                row["params_m"], row["test_mean"], s=14, zorder=2, marker="o", color=colors[row["model"]], alpha=0.6
            )
            continue
        last = kind == "last"
        ax.scatter(
            row["params_m"],
            row["test_mean"],
            s=55,
            zorder=3,
            marker=MARKER_LAST if last else MARKER_BEST,
            facecolors="white" if last else colors[row["model"]],
            edgecolors=colors[row["model"]],
            linewidths=1.6,
        )
    handles = [
        Line2D([], [], label="Pareto front", **front_style),
        Line2D([], [], marker=MARKER_BEST, color="0.3", linestyle="none", label="best layer by mean dev"),
    ]
    if (points["row_kind"] == "last").any():
        handles.append(
            Line2D(
                [],
                [],
                marker=MARKER_LAST,
                color="0.3",
                markerfacecolor="white",
                linestyle="none",
                label="last layer (where not the best)",
            )
        )
    if (points["row_kind"] == "layer").any():
        handles.append(Line2D([], [], marker="o", markersize=4, color="0.3", linestyle="none", label="other layers"))
    handles += [
        Line2D([], [], marker=MARKER_BEST, color=colors[m], linestyle="none", label=names[m])
        for m in sorted(names, key=lambda m: names[m].lower())
    ]
    ax.legend(handles=handles, fontsize=8.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    x, y = points["params_m"].to_numpy(float), points["test_mean"].to_numpy(float)
    ypad = max(np.ptp(y), 1.0)
    ax.set_ylim(y.min() - 0.2 * ypad, y.max() + 0.2 * ypad)
    log_x = x.min() > 0 and x.max() / x.min() > LOG_X_RATIO
    if log_x:
        ax.set_xscale("log")
        ax.set_xlim(x.min() / 1.5, x.max() * 1.6)
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        xpad = max(np.ptp(x), x.max() * 0.05, 1e-3)
        ax.set_xlim(max(0.0, x.min() - 0.25 * xpad), x.max() + 0.4 * xpad)
    count = points["params_count"].iloc[0] if "params_count" in points and len(points) else "params_truncated"
    ax.set_xlabel(
        f"Parameters, {PARAM_LABELS.get(count, PARAM_LABELS['params_truncated'])} (millions"
        + (", log scale)" if log_x else ")")
    )
    ax.set_ylabel(_score_label(metric, "Test") + " (mean over seeds)")
    if title is None:
        row = points.iloc[0]
        title = f"{method_name(row['method'])} on {task_name(row['task'])}: size against score"
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3)
    labelled = points[(points["row_kind"] != "layer") | points["on_front"]]
    labels = [
        f"{names[r['model']]}, l={int(r['layer'])}" + (" (last)" if r["row_kind"] == "last" else "")
        for _, r in labelled.iterrows()
    ]
    place_labels(
        ax,
        labelled["params_m"].to_numpy(float),
        labelled["test_mean"].to_numpy(float),
        labels,
        avoid_lines=[front_line],
    )
    return fig
