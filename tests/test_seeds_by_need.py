"""--seeds-by-need: the intervals against scipy's reference, the rule, the searcher's rounds without
Ray, bad input (one line, exit 2, nothing written), and a whole sweep killed and resumed."""

import json
import math

import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow_helpers import runs_by_role
from scipy import stats
from sweep_helpers import kill_driver_when, sweep_args

from sweeps.electra_layers import main
from sweeps.engine.seed_search import SeedsByNeed
from trainables.core.method import MetricContract
from trainables.core.seed_need import decide, intervals, miss_rate

CONTRACT = MetricContract(
    primary="best_dev_spearman", report="test_spearman_at_best_dev", axes=("model", "layer", "seed"), select="layer"
)


def test_own_intervals_equal_scipys_t_interval_of_the_mean():
    values = {"a": [1.0, 2.0, 4.0], "b": [3.0, 3.5]}
    found = intervals(values, pooled=False)
    for key, vals in values.items():
        low, high = stats.t.interval(0.95, len(vals) - 1, loc=np.mean(vals), scale=stats.sem(vals))
        assert (found[key].low, found[key].high) == pytest.approx((low, high))


def test_pooled_intervals_use_the_pooled_std_and_its_degrees_of_freedom():
    values = {"a": [1.0, 2.0, 4.0], "b": [3.0, 3.5], "c": [7.0]}
    found = intervals(values)
    ss = sum(((np.array(v) - np.mean(v)) ** 2).sum() for v in values.values())
    sd, df = math.sqrt(ss / 3), 3  # (3-1) + (2-1) + 0
    for key, vals in values.items():
        half = stats.t.ppf(0.975, df) * sd / math.sqrt(len(vals))
        assert (found[key].low, found[key].high) == pytest.approx((np.mean(vals) - half, np.mean(vals) + half))


def test_the_rule_stops_separated_configurations_and_continues_open_ones():
    values = {0: [60.0, 60.2], 5: [75.0, 75.3], 6: [75.2, 75.4]}
    decisions = {d.key: d for d in decide(values, {k: 5 for k in values}, width=100.0)}
    assert not decisions[0].more and "separated" in decisions[0].reason
    assert decisions[5].more and "overlaps the best" in decisions[5].reason
    assert decisions[6].more and "the best" in decisions[6].reason
    narrow = {d.key: d for d in decide(values, {k: 5 for k in values}, width=0.01)}
    assert narrow[0].more and "width" in narrow[0].reason
    full = {d.key: d for d in decide(values, {k: 2 for k in values}, width=0.01)}
    assert not any(d.more for d in full.values())


def test_miss_rate_matches_a_simulation():
    """Two configurations of equal true mean: how often their pooled 95% intervals do not overlap."""
    rng = np.random.default_rng(0)
    draws, n, groups = 4000, 2, 4
    misses = 0
    for _ in range(draws):
        values = {k: list(rng.normal(0, 1, n)) for k in range(groups)}
        found = intervals(values)
        misses += not found[0].overlaps(found[1])
    assert misses / draws == pytest.approx(miss_rate(groups * (n - 1)), abs=0.01)


def test_the_searcher_runs_rounds_until_no_configuration_is_open():
    configs = [{"model": "m", "layer": layer, "seed": seed} for layer in (0, 1) for seed in (0, 1, 2, 3)]
    score = {0: [50.0, 50.1, 50.2, 50.3], 1: [70.0, 70.2, 70.1, 70.3]}
    searcher = SeedsByNeed(configs, CONTRACT, initial=2, width=0.5, pooled=False)
    ran, round_trials = [], []
    while True:
        suggested = []
        while isinstance(config := searcher.suggest(f"t{len(ran) + len(suggested)}"), dict):
            suggested.append(config)
        if not suggested:
            break
        round_trials.append(len(suggested))
        for i, config in enumerate(suggested):
            trial_id = f"t{len(ran) + i}"
            searcher.on_trial_complete(trial_id, {"best_dev_spearman": score[config["layer"]][config["seed"]]})
        ran += suggested
    # round 0: 2 seeds each; own intervals with 1 df (t = 12.7) are wider than 0.5: a third seed each;
    # then widths 0.50 (t = 4.3, sd 0.1) and separated: both stop before their fourth seed
    assert round_trials == [4, 2]
    assert sorted((c["layer"], c["seed"]) for c in ran) == [(x, s) for x in (0, 1) for s in range(3)]
    assert searcher.suggest("last") == "FINISHED"
    assert [h["round"] for h in searcher.history] == [0, 1]


@pytest.mark.parametrize(
    "flags, expected",
    [
        ("--seeds 0", "--seeds allows 1 seed"),
        ("--seeds 0-4 --seed-ci-width 0", "--seed-ci-width"),
        ("--seeds 0-4 --seed-ci-width -1", "--seed-ci-width"),
        ("--seeds 0-4 --initial-seeds 1", "--initial-seeds"),
        ("--seeds 0-4 --layers 1 --search optuna", "cannot be combined"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(flags, expected, tiny_models, data_dir, tmp_path, capsys):
    storage = tmp_path / "runs"
    argv = sweep_args(tiny_models["bert"], f"--seeds-by-need {flags}", "--storage-path", str(storage))
    assert main([*argv, "--data-dir", str(data_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err
    assert not storage.exists()


def test_a_grid_with_no_seeds_axis_is_refused():
    from argparse import Namespace

    from sweeps.engine.seed_search import check
    from trainables.core.errors import SweepInputError

    no_seed = MetricContract(primary="p", report="r", axes=("model", "layer"), select="layer", seed=None)
    with pytest.raises(SweepInputError, match="needs a grid with a --seeds axis"):
        check(Namespace(initial_seeds=2, search="grid", seeds=[0, 1, 2]), no_seed)


@pytest.mark.sweep
def test_a_killed_seeds_by_need_sweep_resumes_and_reports_seeds_and_intervals(
    sweep_env, tiny_models, ray_session, tmp_path
):
    address = ray_session.get_runtime_context().gcs_address
    uri = sweep_env["uri"]
    MlflowClient(uri).search_experiments()
    settings = "--layers 1,2 --seeds 0,1,2 --epochs 1 --max-concurrent 1 --seeds-by-need --seed-ci-width 0.001"
    # 320 pairs (not sweep_env's 48): enough steps for the seeds to differ, so intervals have a width
    sweep = [*sweep_env["flags"], *sweep_args(tiny_models["bert"], f"{settings} --max-train-samples 320")]

    def round_zero_logged():
        parents, _ = runs_by_role(uri)
        client = MlflowClient(uri)
        return parents and any(
            a.path.endswith("round_0.json") for a in client.list_artifacts(parents[0].info.run_id, "seeds_by_need")
        )

    kill_driver_when(
        "sweeps/electra_layers.py",
        [*sweep, "--name", "byneed", "--address", address],
        sweep_env["tmp"] / "driver.log",
        round_zero_logged,
        what="round 0's decisions in MLflow",
    )
    assert main(["--resume", str(sweep_env["storage"] / "byneed")]) == 0
    parents, children = runs_by_role(uri)
    finished = [c for c in children if c.info.status == "FINISHED"]
    # width 0.001: every configuration stays open to its last seed; each (layer, seed) runs once
    assert sorted((c.data.params["layer"], c.data.params["seed"]) for c in finished) == [
        (layer, seed) for layer in ("1", "2") for seed in ("0", "1", "2")
    ]
    client = MlflowClient(uri)
    rounds = sorted(a.path for a in client.list_artifacts(parents[0].info.run_id, "seeds_by_need"))
    assert rounds == ["seeds_by_need/round_0.json", "seeds_by_need/round_1.json"]
    local = client.download_artifacts(parents[0].info.run_id, "seeds_by_need/round_0.json", str(tmp_path))
    record = json.loads(open(local).read())
    assert record["next_trials"] == 2 and all(r["another_seed"] for r in record["decisions"])
    assert all("width" in r["why"] for r in record["decisions"])

    from analysis.report import build_report

    report = build_report(uri, tmp_path / "report")
    text = report.index.read_text()
    assert "## Seeds by need" in text
    table = (tmp_path / "report" / "tables" / "seeds_by_need.csv").read_text()
    assert table.count("\n") == 3 and ",3," in table


def test_a_script_whose_grid_has_no_seeds_is_refused_before_anything_is_written(
    tiny_models, data_dir, tmp_path, capsys
):
    from sweeps.evaluate import main as evaluate

    storage = tmp_path / "runs"
    argv = [
        "--models",
        tiny_models["bert"],
        "--seeds-by-need",
        "--storage-path",
        str(storage),
        "--data-dir",
        str(data_dir),
    ]
    assert evaluate(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs a grid with a --seeds axis" in err, err
    assert not storage.exists()
