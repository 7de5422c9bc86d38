"""`--search pareto`: non-dominated sorting, crowding and hypervolume against reference computations
(brute force from the definitions, Optuna's own implementations), the MO-ASHA scheduler's rung
decisions, its state across a resume, and its input checks. The whole sweep (run, kill, resume,
report) is in the `sweep` step."""

import itertools
from argparse import Namespace
from types import SimpleNamespace

import numpy as np
import pytest
from optuna._hypervolume import compute_hypervolume
from optuna.study._multi_objective import _calculate_nondomination_rank
from ray.tune.schedulers import TrialScheduler

from sweeps.engine.pareto_asha import ParetoASHA, ParetoRecorder, check, milestones, rung_decision, search_space
from trainables.core.errors import SweepInputError
from trainables.core.method import MetricContract
from trainables.core.pareto import crowding_distances, hypervolume_2d, nondominated_ranks, survival_order


def _point_sets(seed=0, count=30):
    """Random 2- and 3-objective point sets, many with ties (small integers)."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n, k = int(rng.integers(1, 14)), int(rng.integers(2, 4))
        yield rng.integers(0, 5, size=(n, k)).astype(float)


def _brute_force_ranks(points):
    """From the definition: peel off the points no remaining point dominates."""
    left, ranks, rank = set(range(len(points))), {}, 0
    while left:
        front = {
            i
            for i in left
            if not any(np.all(points[j] <= points[i]) and np.any(points[j] < points[i]) for j in left if j != i)
        }
        ranks.update(dict.fromkeys(front, rank))
        left -= front
        rank += 1
    return [ranks[i] for i in range(len(points))]


def test_nondominated_ranks_match_the_definition_and_optuna():
    for points in _point_sets():
        ranks = nondominated_ranks(points)
        assert list(ranks) == _brute_force_ranks(points)
        assert list(ranks) == list(_calculate_nondomination_rank(points))


def test_a_point_with_a_nan_is_ranked_last():
    ranks = nondominated_ranks([[0.0, 1.0], [float("nan"), 0.0], [1.0, 0.0]])
    assert list(ranks) == [0, 1, 0]


def test_crowding_distances_match_the_definition():
    for points in _point_sets(seed=1):
        n = len(points)
        expected = np.zeros(n)
        for m in range(points.shape[1]):
            column = points[:, m]
            if column.min() == column.max():
                continue
            order = sorted(range(n), key=lambda i: (column[i], i))
            for position, i in enumerate(order):
                below = column[order[position - 1]] if position > 0 else -np.inf
                above = column[order[position + 1]] if position < n - 1 else np.inf
                expected[i] += np.inf if np.isinf(above - below) else (above - below) / np.ptp(column)
        assert np.allclose(crowding_distances(points), expected), points


def test_hypervolume_matches_optuna_and_a_count_of_unit_cells():
    for points in _point_sets(seed=2):
        points = points[:, :2]
        reference = np.array([5.0, 5.0])
        cells = sum(
            any(p[0] <= x and p[1] <= y for p in points) for x, y in itertools.product(range(5), range(5))
        )  # each unit cell [x, x+1] x [y, y+1] is dominated iff some point is at or below its corner
        assert hypervolume_2d(points, reference) == pytest.approx(cells)
        assert hypervolume_2d(points, reference) == pytest.approx(compute_hypervolume(points, reference))


def test_survival_order_goes_by_rank_then_widest_crowding():
    points = np.array([[0.0, 4.0], [1.0, 3.0], [2.0, 2.0], [4.0, 0.0], [3.0, 3.0], [5.0, 5.0]])
    order = list(survival_order(points))
    # front {0,1,2,3}: the extremes 0 and 3 (infinite crowding) first, then 2 (gap 3+3 over 4+4) before 1 (2+2)
    assert order == [0, 3, 2, 1, 4, 5]


def test_milestones_are_powers_of_eta_below_the_budget():
    assert milestones(9, 1, 3) == [1, 3]
    assert milestones(10, 1, 3) == [1, 3, 9]
    assert milestones(1, 1, 3) == []


def _reference_keep(records: dict, trial_id: str, eta: int) -> bool:
    """Kept iff on the front (brute-force rank 0) or among the best ceil(n / eta) by (rank, then the
    definition's crowding)."""
    ids = list(records)
    points = np.array([records[i] for i in ids])
    ranks = _brute_force_ranks(points)
    crowding = np.zeros(len(ids))
    for rank in set(ranks):
        members = [i for i in range(len(ids)) if ranks[i] == rank]
        crowding[members] = crowding_distances(points[members])
    order = sorted(range(len(ids)), key=lambda i: (ranks[i], -crowding[i], i))
    index = ids.index(trial_id)
    return ranks[index] == 0 or order.index(index) < -(-len(ids) // eta)


def _trial(trial_id):
    return SimpleNamespace(trial_id=trial_id, config={"point": trial_id})


def _result(iteration, score, size):
    return {"training_iteration": iteration, "best_dev_spearman": score, "params_truncated": size}


def test_the_scheduler_stops_by_non_dominated_rank_at_rungs(tmp_path):
    rng = np.random.default_rng(3)
    scheduler = ParetoASHA("best_dev_spearman", "max", "params_truncated", max_t=3, eta=3)
    recorder = ParetoRecorder(scheduler)
    seen = {}
    for number in range(12):
        trial = _trial(f"t{number}")
        score, size = float(rng.uniform(0, 90)), float(rng.integers(1, 6) * 1000)
        assert scheduler.on_trial_result(None, trial, _result(2, score, size)) == TrialScheduler.CONTINUE  # no rung
        seen[trial.trial_id] = [-score, size]
        decision = scheduler.on_trial_result(None, trial, _result(1, score, size))
        kept = _reference_keep(seen, trial.trial_id, 3)
        assert decision == (TrialScheduler.CONTINUE if kept else TrialScheduler.STOP)
        logged = _result(1, score, size)
        recorder.on_trial_result(1, [], trial, logged)
        assert logged["pareto_rung"] == 1 and logged["pareto_kept"] == int(kept)
        assert logged["pareto_rank"] == _brute_force_ranks(np.array(list(seen.values())))[-1]
    # the last epoch is the last rung: Tune asks no scheduler about it, the recorder ranks it there and stops nothing
    final = {**_result(3, 0.0, 9e9), "done": True}
    recorder.on_trial_result(3, [], _trial("t0"), final)
    assert (final["pareto_rung"], final["pareto_kept"], final["pareto_rank"]) == (3, 1, 0)
    worse = {**_result(3, -1.0, 9e9), "done": True}
    recorder.on_trial_result(3, [], _trial("t1"), worse)
    assert (worse["pareto_kept"], worse["pareto_rank"]) == (1, 1)


def test_rung_records_survive_a_resume(tmp_path):
    state = str(tmp_path / "pareto-rungs.state")
    first = ParetoASHA("best_dev_spearman", "max", "params_truncated", max_t=3, eta=2, state_path=state)
    first.on_trial_result(None, _trial("a"), _result(1, 80.0, 1000))
    # a scheduler restored from the pickled Tuner starts empty and reads the records back
    second = ParetoASHA("best_dev_spearman", "max", "params_truncated", max_t=3, eta=2, state_path=state)
    worse = second.on_trial_result(None, _trial("b"), _result(1, 70.0, 2000))
    assert worse == TrialScheduler.STOP  # dominated by "a", which only the saved records know
    fresh = ParetoASHA("best_dev_spearman", "max", "params_truncated", max_t=3, eta=2)
    assert fresh.on_trial_result(None, _trial("b"), _result(1, 70.0, 2000)) == TrialScheduler.CONTINUE
    # a trial lost in the kill and proposed again (same config, a new trial id) replaces its own record
    again = SimpleNamespace(trial_id="a2", config={"point": "a"})
    assert second.on_trial_result(None, again, _result(1, 60.0, 1000)) == TrialScheduler.CONTINUE
    assert len(second.records["1"]) == 2


def test_rung_decision_keeps_a_non_dominated_smaller_model():
    records = {"big": [-90.0, 10.0], "small": [-50.0, 1.0], "worse": [-40.0, 5.0]}
    assert rung_decision(records, "small", 2) == (True, 0)  # the best ceil(3 / 2) = 2: the whole front
    assert rung_decision(records, "worse", 2) == (False, 1)
    assert rung_decision(records, "small", 3) == (True, 0)  # beyond the quota of 1, but on the front
    assert rung_decision(records, "worse", 3) == (False, 1)


def _args(**overrides):
    return Namespace(**{"pareto_eta": 3, "pareto_tune": "", "search": "pareto", **overrides})


CONTRACT = MetricContract(
    primary="best_dev_spearman",
    report="test_spearman_at_best_dev",
    epoch="dev_spearman",
    axes=("model", "layer", "seed"),
)


class _Method:
    name = "tmft"

    @classmethod
    def search_space(cls, args, base):
        from ray import tune

        return {**base, "lr": tune.loguniform(1e-5, 1e-4)}


def _grid(layers=(0, 1, 2), seeds=(0,)):
    return [{"model": "m", "layer": layer, "seed": seed, "lr": 2e-5} for layer in layers for seed in seeds]


def test_a_grid_without_a_size_axis_is_refused():
    with pytest.raises(SweepInputError, match="needs a size axis"):
        check(_args(), _grid(layers=(2,), seeds=(0, 1)), CONTRACT, _Method)


def test_a_tuned_key_outside_the_method_space_is_refused():
    with pytest.raises(SweepInputError, match="batch_size is not in tmft's search space; choose from lr"):
        check(_args(pareto_tune="batch_size"), _grid(), CONTRACT, _Method)
    with pytest.raises(SweepInputError, match="--pareto-eta"):
        check(_args(pareto_eta=1), _grid(), CONTRACT, _Method)


def test_the_space_chooses_among_the_grid_axes_and_tunes_the_named_keys():
    from ray.tune.search.sample import Categorical, Float

    space = search_space({"pareto_tune": "lr"}, _grid(seeds=(0, 1)), _Method)
    assert isinstance(space["layer"], Categorical) and space["layer"].categories == [0, 1, 2]
    assert space["seed"].categories == [0, 1] and space["model"] == "m"
    assert isinstance(space["lr"], Float)
    listed = search_space({"pareto_tune": "lr=2e-5:5e-5:1e-4"}, _grid(), _Method)
    assert listed["lr"].categories == [2e-5, 5e-5, 1e-4]
    check(_args(pareto_tune="lr=2e-5:1e-4"), _grid(), CONTRACT, _Method)
    with pytest.raises(SweepInputError, match="KEY=V1:V2"):
        check(_args(pareto_tune="lr="), _grid(), CONTRACT, _Method)


def test_the_searcher_proposes_each_grid_point_once_then_finishes():
    from ray import tune
    from ray.tune.search import Searcher

    from sweeps.engine.pareto_asha import DistinctOptunaSearch

    space = {"layer": tune.choice([0, 1, 2]), "seed": tune.choice([0, 1]), "model": "m"}
    searcher = DistinctOptunaSearch(
        space=space, metric=["best_dev_spearman", "params_truncated"], mode=["max", "min"], seed=0, points=6
    )
    proposed = []
    for number in range(7):
        config = searcher.suggest(f"t{number}")
        if config == Searcher.FINISHED:
            break
        proposed.append((config["layer"], config["seed"]))
        searcher.on_trial_complete(
            f"t{number}", {"best_dev_spearman": 10.0 * config["layer"], "params_truncated": config["layer"]}
        )
    assert sorted(proposed) == sorted(itertools.product([0, 1, 2], [0, 1]))
    assert config == Searcher.FINISHED


def test_a_pareto_sweep_without_a_size_axis_stops_before_anything_is_written(tmp_path, data_dir, tiny_models, capsys):
    from sweeps.electra_layers import main

    storage = tmp_path / "runs"
    flags = ["--models", tiny_models["bert"], "--layers", "2", "--seeds", "0,1", "--search", "pareto"]
    flags += ["--storage-path", str(storage), "--data-dir", str(data_dir), "--max-train-samples", "16"]
    assert main([*flags, "--max-eval-samples", "60"]) == 2
    error = capsys.readouterr().err
    assert "--search pareto needs a size axis" in error and "varies only seed" in error
    assert not storage.exists() or not any(storage.rglob("*")), "bad input writes nothing"
