"""Multi-objective arithmetic shared by the Pareto search (sweeps/engine/pareto_asha.py), its
benchmark and the report: non-dominated sorting, crowding distance and hypervolume.

Every function takes objective vectors to be minimised (an n x k array; negate a score to be
maximised). Point a dominates b iff a <= b in every objective and a < b in at least one. A
vector holding a NaN is treated as the worst possible (+inf in every objective).

- `nondominated_ranks`: 0 for the points no other point dominates, 1 for those dominated only by
  rank-0 points, and so on (NSGA-II's fronts; Deb et al. 2002).
- `crowding_distances`: NSGA-II's crowding distance within one set of points: per objective, the
  gap between a point's two neighbours in that objective's order, over the objective's finite
  range; summed over objectives; the extreme points of an objective get +inf, an objective with a
  single value adds nothing (Optuna's NSGA-II sampler computes it the same way).
- `survival_order`: indices sorted by rank, then by crowding within the rank (wider first), then by
  index: the order in which MO-ASHA lets trials through a rung.
- `hypervolume_2d`: the area dominated by the points and bounded by a reference point.
"""

from __future__ import annotations

import numpy as np


def _as_losses(points) -> np.ndarray:
    values = np.asarray(points, dtype=float)
    if values.ndim != 2:
        raise ValueError(f"expected an n x k array of objective vectors, got shape {values.shape}")
    values = values.copy()
    values[np.isnan(values).any(axis=1)] = np.inf
    return values


def dominance(points) -> np.ndarray:
    """n x n booleans: [i, j] is True iff point i dominates point j."""
    values = _as_losses(points)
    no_worse = (values[:, None, :] <= values[None, :, :]).all(axis=2)
    better = (values[:, None, :] < values[None, :, :]).any(axis=2)
    return no_worse & better


def nondominated_ranks(points) -> np.ndarray:
    """The non-dominated rank of each point (0 = the Pareto front)."""
    beats = dominance(points)
    ranks = np.full(len(beats), -1, dtype=int)
    remaining = np.ones(len(beats), dtype=bool)
    rank = 0
    while remaining.any():
        dominated = beats[np.ix_(remaining, remaining)].any(axis=0)
        front = np.flatnonzero(remaining)[~dominated]
        ranks[front] = rank
        remaining[front] = False
        rank += 1
    return ranks


def crowding_distances(points) -> np.ndarray:
    """NSGA-II's crowding distance of each point among `points` (see the module docstring)."""
    values = _as_losses(points)
    n, k = values.shape
    distance = np.zeros(n)
    for objective in range(k):
        column = values[:, objective]
        if n == 0 or column.min() == column.max():
            continue
        order = np.argsort(column, kind="stable")
        padded = np.concatenate(([-np.inf], column[order], [np.inf]))
        finite = column[np.isfinite(column)]
        width = finite.max() - finite.min() if finite.size else 0.0
        with np.errstate(invalid="ignore"):
            gaps = np.where(padded[2:] == padded[:-2], 0.0, padded[2:] - padded[:-2])
        distance[order] += gaps / (width if width > 0 else 1.0)
    return distance


def survival_order(points) -> np.ndarray:
    """Indices of `points`, best first: by non-dominated rank, then widest crowding distance within
    the rank, then by index (the earlier point first)."""
    ranks = nondominated_ranks(points)
    crowding = np.zeros(len(ranks))
    for rank in np.unique(ranks):
        members = np.flatnonzero(ranks == rank)
        crowding[members] = crowding_distances(np.asarray(points, dtype=float)[members])
    return np.array(sorted(range(len(ranks)), key=lambda i: (ranks[i], -crowding[i], i)), dtype=int)


def hypervolume_2d(points, reference) -> float:
    """The area that the 2-objective `points` dominate within the box up to `reference` (both
    objectives minimised); points not strictly better than the reference in both add nothing."""
    values = _as_losses(points)
    if values.shape[1] != 2:
        raise ValueError(f"hypervolume_2d takes 2 objectives, got {values.shape[1]}")
    ref = np.asarray(reference, dtype=float)
    inside = values[(values < ref).all(axis=1)]
    area, ceiling = 0.0, ref[1]
    for x, y in inside[np.lexsort((inside[:, 1], inside[:, 0]))]:
        if y < ceiling:
            area += (ref[0] - x) * (ceiling - y)
            ceiling = y
    return float(area)
