"""Pareto front of (parameters, score): the models worth their size (ELECTRA paper, Figure 4).

A point is on the front iff no other point has strictly fewer parameters *and* a strictly
higher score. So ties keep both points: two points with the same parameter count are both on
the front (neither has fewer parameters), and so are two with the same score. Points with a
missing parameter count or score are never on the front and dominate nothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.summary import params_column, selected_layers


def pareto_mask(params, scores) -> np.ndarray:
    """Boolean array: True where the point is on the front (see the module docstring)."""
    p = np.asarray(params, dtype=float)
    s = np.asarray(scores, dtype=float)
    valid = ~(np.isnan(p) | np.isnan(s))
    # dominated[i] iff some valid j has p[j] < p[i] and s[j] > s[i]; NaN comparisons are False.
    beats = (p[None, :] < p[:, None]) & (s[None, :] > s[:, None]) & valid[None, :]
    return valid & ~beats.any(axis=1)


def pareto_points(summary: pd.DataFrame) -> pd.DataFrame:
    """Per (method, task): every (model, layer) mean over seeds, with `on_front`.

    Columns as the summary's plus `row_kind` ("best": the model's best-dev layer, "last": its
    last layer where that is not the best, "layer": any other), `params_m` (millions) and
    `on_front`, computed within each (method, task) on the mean test score (the lower the
    better where the contract's `metric_mode` is "min").
    """
    selected = selected_layers(summary)
    kinds = {(r.method, r.task, r.model, r.layer): r.row_kind for r in selected.itertuples()}
    points = summary.copy()
    points["row_kind"] = [kinds.get((r.method, r.task, r.model, r.layer), "layer") for r in points.itertuples()]
    if points.empty:
        return points.assign(params_m=pd.Series(dtype=float), on_front=pd.Series(dtype=bool))
    count = params_column(points)
    points["params_m"] = pd.to_numeric(points[count], errors="coerce").astype(float) / 1e6 if count else np.nan
    points["params_count"] = count or ""
    points["on_front"] = False
    for _, group in points.groupby(["method", "task"], sort=False):
        sign = -1.0 if "metric_mode" in group and (group["metric_mode"] == "min").any() else 1.0
        points.loc[group.index, "on_front"] = pareto_mask(group["params_m"], sign * group["test_mean"].astype(float))
    return points
