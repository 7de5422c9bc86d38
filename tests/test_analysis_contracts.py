"""The analysis groups and selects by each run's logged metric contract: runs of a method with no
layer or seed axis are analysed (not left out), a min-mode contract selects the lowest, and a
real zero-shot evaluation sweep gets its per-set table and layer curves in the report."""

import pandas as pd
import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param
from sweep_helpers import sweep_args

from analysis.loader import load_runs
from analysis.report import build_report
from analysis.summary import TABLE_FAMILY, split_runs, summarize
from sweeps.evaluate import main as evaluate_main
from trainables.core.schema import TAG_PARENT, TAG_ROLE, TAG_SWEEP, config_hash


def fabricated_store(tmp_path, contract: dict, rows: list[dict]) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("made", artifact_location=(tmp_path / "a").as_uri())
    parent = client.create_run(experiment, tags={TAG_ROLE: "sweep", TAG_SWEEP: "made"}).info.run_id
    for row in rows:
        params = {**contract, **{k: v for k, v in row.items() if not isinstance(v, float)}}
        run = client.create_run(
            experiment, tags={TAG_PARENT: parent, TAG_ROLE: "trial", "embsweep.config_hash": config_hash(params)}
        )
        client.log_batch(
            run.info.run_id,
            params=[Param(k, str(v)) for k, v in params.items()],
            metrics=[Metric(k, v, 0, 0) for k, v in row.items() if isinstance(v, float)],
        )
        client.set_terminated(run.info.run_id)
    return uri


def test_min_mode_contract_with_a_select_axis_picks_the_lowest(tmp_path):
    contract = {
        "method": "distil",
        "sweep_axes": "student,lr,seed",
        "select_axis": "lr",
        "seed_axis": "seed",
        "metric_primary": "best_dev_loss",
        "metric_report": "test_loss",
        "metric_columns": "",
        "metric_mode": "min",
    }
    rows = [
        {"student": "s", "lr": lr, "seed": seed, "best_dev_loss": loss + seed / 10, "test_loss": loss + 1.0}
        for lr, loss in (("1e-4", 3.0), ("1e-3", 2.0), ("1e-2", 5.0))
        for seed in (0, 1)
    ]
    summary = summarize(load_runs(fabricated_store(tmp_path, contract, rows)))
    assert len(summary) == 3 and set(summary["family"]) == {TABLE_FAMILY}
    best = summary[summary["is_best"]]
    assert list(best["lr"]) == [pytest.approx(1e-3)] and best["dev_mean"].iloc[0] == pytest.approx(2.05)
    assert set(summary["n_seeds"]) == {2}


def test_runs_without_seed_or_task_are_analysed_and_missing_axes_named(tmp_path):
    contract = {
        "method": "evaluate",
        "sweep_axes": "model,pooling,layer",
        "select_axis": "",
        "seed_axis": "",
        "metric_primary": "mean_spearman",
        "metric_report": "mean_spearman",
        "metric_columns": "stsb_spearman,sts12_spearman",
        "metric_mode": "max",
    }
    rows = [
        {
            "model": "m",
            "pooling": "mean",
            "layer": layer,
            "mean_spearman": 50.0 + layer,
            "stsb_spearman": 40.0 + layer,
            "sts12_spearman": 60.0 + layer,
        }
        for layer in range(3)
    ]
    rows.append({"model": "m", "pooling": "mean", "mean_spearman": 1.0})  # no layer: left out, with the reason
    runs = load_runs(fabricated_store(tmp_path, contract, rows))
    complete, excluded = split_runs(runs)
    assert len(complete) == 3 and list(excluded["reason"]) == ["missing param layer"]
    summary = summarize(runs)
    assert sorted(summary["layer"].astype(int)) == [0, 1, 2] and set(summary["task"]) == {""}
    assert list(summary.sort_values("layer")["sts12_spearman_mean"]) == [60.0, 61.0, 62.0]
    assert not summary["is_best"].any()


@pytest.mark.sweep
def test_report_of_a_real_evaluation_sweep_beside_a_one_seed_layer_sweep(sweep_env, tiny_models, tmp_path):
    from sweeps.electra_layers import main as tmft_main

    sweep = "--layers 0,2 --seeds 0 --epochs 1 --name one-seed"
    assert tmft_main(sweep_args(tiny_models["bert"], sweep, *sweep_env["flags"])) == 0
    evaluation = "--layers all --pooling mean,cls --sets stsb,sts12 --name zero-shot"
    assert evaluate_main(sweep_args(tiny_models["bert"], evaluation, *sweep_env["base"])) == 0
    runs = load_runs(sweep_env["uri"], "test")
    assert len(runs[runs["method"] == "evaluate"]) == 10 and runs.loc[runs["method"] == "evaluate", "seed"].isna().all()
    report = build_report(sweep_env["uri"], tmp_path / "report", "test")
    # [CLS] at layer 0 is the same vector for every sentence: its Spearman is undefined, the run left out.
    assert list(report.excluded["reason"]) == ["missing metric mean_spearman"]
    assert list(report.excluded["layer"].astype(int)) == [0]
    table = pd.read_csv(tmp_path / "report" / "tables" / "scores_evaluate_all.csv")
    assert len(table) == 9 and {"model", "pooling", "layer", "stsb_spearman", "sts12_spearman"} <= set(table.columns)
    figures = sorted(p.name for p in (tmp_path / "report" / "figures").glob("curves_*.png"))
    assert len(figures) == 2, figures  # one per pooling, each with a line per set
    index = report.index.read_text()
    assert "## Zero-shot" in index or "## evaluate" in index.lower(), index[:2000]
    for name in figures:
        assert f"figures/{name}" in index
    assert (
        tmp_path / "report" / "figures" / "layer_curves_tmft_stsb.png"
    ).is_file()  # one seed: no spread, still drawn


def test_reference_rows_put_every_row_beside_the_best_reference_by_dev(tmp_path):
    from analysis.tables import scores_markdown, scores_table, table_axes

    contract = {
        "method": "combine",
        "sweep_axes": "how,part,seed",
        "select_axis": "",
        "seed_axis": "seed",
        "metric_primary": "best_dev_pearson",
        "metric_report": "test_score",
        "metric_columns": "",
        "metric_mode": "max",
        "reference_rows": "how=alone",
    }
    # "alone b" has the better dev but the worse test: the reference is chosen on dev
    levels = {("alone", "a"): (70.0, 60.0), ("alone", "b"): (75.0, 55.0), ("mixed", "-"): (72.0, 63.0)}
    rows = [
        {"how": how, "part": part, "seed": seed, "best_dev_pearson": dev + seed, "test_score": test + 2 * seed}
        for (how, part), (dev, test) in levels.items()
        for seed in (0, 1)
    ]
    summary = summarize(load_runs(fabricated_store(tmp_path, contract, rows)))
    table = scores_table(summary.reset_index(drop=True))
    by = {(r["how"], r["part"]): r for r in table.to_dict("records")}
    assert by[("alone", "b")]["is_reference"] and not by[("alone", "a")]["is_reference"]
    assert by[("mixed", "-")]["test_score_vs_reference"] == pytest.approx(63.0 - 55.0)
    assert by[("alone", "a")]["best_dev_pearson_vs_reference"] == pytest.approx(70.0 - 75.0)
    markdown = scores_markdown(table, table_axes(summary), ["test_score"])
    assert "64.00 ± 1.41 (max 65.00) (Δ +8.00)" in markdown and "alone (reference)" in markdown
