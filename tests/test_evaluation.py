"""Evaluator against hand-computed correlations; best-dev selection never looks at test."""

import math

import pytest

from trainables.evaluation.metrics import BestTracker, correlations


def _ranks(values):
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1  # ties share the mean rank
        i = j + 1
    return ranks


def _pearson(x, y):
    mx, my = sum(x) / len(x), sum(y) / len(y)
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y))
    return cov / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))


def test_correlations_match_hand_computation_with_ties():
    predicted = [0.9, 0.1, 0.5, 0.5, 0.7, 0.2]
    gold = [4.8, 0.0, 2.5, 3.1, 3.1, 1.0]
    got = correlations(predicted, gold)
    assert got["spearman"] == pytest.approx(100 * _pearson(_ranks(predicted), _ranks(gold)), abs=1e-9)
    assert got["pearson"] == pytest.approx(100 * _pearson(predicted, gold), abs=1e-9)


def test_simple_known_spearman():
    # one adjacent swap among 5 distinct items: rho = 1 - 6 * 2 / (5 * 24) = 0.9
    assert correlations([1, 2, 3, 5, 4], [1, 2, 3, 4, 5])["spearman"] == pytest.approx(90.0)


def test_best_tracker_selects_on_dev_and_reports_test_at_that_epoch():
    tracker = BestTracker("spearman")
    tracker.update(1, {"dev_spearman": 70.0, "test_spearman": 90.0})
    tracker.update(2, {"dev_spearman": 80.0, "test_spearman": 60.0})
    tracker.update(3, {"dev_spearman": 75.0, "test_spearman": 99.0})
    summary = tracker.summary()
    assert summary["best_epoch"] == 2
    assert summary["best_dev_spearman"] == 80.0
    assert summary["test_spearman_at_best_dev"] == 60.0
    restored = BestTracker()
    restored.load_state_dict(tracker.state_dict())
    assert restored.summary() == summary


def test_best_tracker_ranks_a_nan_dev_score_below_every_number():
    # a collapsed model (all cosines equal) has a NaN correlation; if it came first, `x > nan` is
    # False for every later x and the collapsed epoch would stay "best" for ever
    tracker = BestTracker("pearson")
    assert tracker.update(1, {"dev_pearson": float("nan")})
    assert tracker.update(2, {"dev_pearson": 10.0})
    assert not tracker.update(3, {"dev_pearson": float("nan")})
    assert tracker.summary()["best_epoch"] == 2
