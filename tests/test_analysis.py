"""The analysis against small MLflow stores written with the sweeps' run schema
(tests/analysis_helpers.py): loader, summary, best layer, Pareto front, tables, plots, report;
runs grouped and selected by their logged metric contract (zero-shot evaluation without seed or
task, no selection, min mode) and runs logged before contracts existed."""

from __future__ import annotations

import statistics
from argparse import Namespace
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from analysis_helpers import (
    BERT,
    ELECTRA_D,
    EVAL_LAYERS,
    EVAL_SETS,
    LAYERS,
    MODELS,
    POOLINGS,
    evaluation_scores,
    evaluation_store,
    log_runs,
    paper_summary,
    shared_store,
)
from matplotlib.text import Text

from analysis.loader import AnalysisError, load_runs
from analysis.names import short_name
from analysis.pareto import pareto_mask, pareto_points
from analysis.plots import plot_layer_curves, plot_metric_curves, plot_pareto
from analysis.report import build_report
from analysis.summary import LAYER_FAMILY, TABLE_FAMILY, split_runs, summarize
from analysis.tables import table1, table1_markdown, table2, table2_markdown
from trainables.core.errors import SweepInputError
from trainables.core.schema import EPOCH_METRICS, FINAL_METRICS, PARAMS


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return shared_store(tmp_path_factory)


@pytest.fixture(scope="module")
def runs(store):
    return load_runs(store.uri, store.experiment)


@pytest.fixture(scope="module")
def summary(runs):
    return summarize(runs)


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    """The URI of a zero-shot evaluation sweep (analysis_helpers.evaluation_store)."""
    return evaluation_store(tmp_path_factory.mktemp("evaluation"))


def hand_stats(store, method, model, layer, key):
    values = [r[key] for r in store.complete if (r["method"], r["model"], r["layer"]) == (method, model, layer)]
    return statistics.mean(values), statistics.stdev(values), len(values)


def hand_best_layer(store, method, model, key="dev_spearman"):
    means = {layer: hand_stats(store, method, model, layer, key)[0] for layer in LAYERS}
    return max(means, key=means.get)


# ---- loader -----------------------------------------------------------------------------------
def test_loader_reads_one_row_per_trial_with_the_schema(store, runs):
    assert len(runs) == store.n_trials == 34
    assert runs["run_id"].is_unique
    assert set(PARAMS) | set(FINAL_METRICS) | {"status", "run_id", "parent_run_id", "sweep"} <= set(runs.columns)
    assert not set(EPOCH_METRICS) & set(runs.columns)  # a run's last-epoch values are not its results
    assert runs["layer"].dtype == "Int64" and runs["seed"].dtype == "Int64"
    assert runs["status"].value_counts().to_dict() == {"FINISHED": 32, "FAILED": 1, "RUNNING": 1}
    assert set(runs["sweep"]) == {"electra_layers", "electra_dapt"}  # from the parent runs' tags
    assert runs.groupby("sweep")["parent_run_id"].nunique().eq(1).all()


def test_loader_fills_dev_pearson_from_the_best_dev_epoch(store, runs):
    # BERT runs did not log dev_pearson_at_best_dev: it comes from the per-epoch history.
    for record in store.complete:
        row = runs[
            (runs["method"] == record["method"])
            & (runs["model"] == record["model"])
            & (runs["layer"] == record["layer"])
            & (runs["seed"] == record["seed"])
            & (runs["status"] == "FINISHED")
        ]
        assert row["dev_pearson_at_best_dev"].iloc[-1] == pytest.approx(record["dev_pearson"])


def test_loader_every_experiment_and_pagination(store, runs, monkeypatch):
    import analysis.loader as loader

    monkeypatch.setattr(loader, "_PAGE", 5)  # seven pages of trials
    everything = load_runs(store.uri)
    assert sorted(everything["run_id"]) == sorted(runs["run_id"])


def test_loader_errors_are_clear(store, tmp_path):
    with pytest.raises(AnalysisError, match="No MLflow database"):
        load_runs(f"sqlite:///{tmp_path}/missing.db")
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(AnalysisError, match="No experiment named 'nope'.*electra"):
        load_runs(store.uri, "nope")
    with pytest.raises(AnalysisError, match="No trial runs"):
        load_runs(store.uri, "scratch")


# ---- summary ----------------------------------------------------------------------------------
def test_incomplete_runs_are_listed_not_averaged(store, runs, summary):
    complete, excluded = split_runs(runs)
    assert len(complete) == len(store.complete) == 30
    assert dict(zip(excluded["run_id"], excluded["reason"])).keys() == store.excluded.keys()
    for run_id, reason in zip(excluded["run_id"], excluded["reason"]):
        assert reason.startswith(store.excluded[run_id])
    assert not set(excluded["run_id"]) & set(complete["run_id"])
    assert summary["n_seeds"].sum() == 30


def test_summary_equals_hand_computation(store, summary):
    assert len(summary) == 2 * 2 * 3  # methods x models x layers
    for row in summary.itertuples():
        for column, key in (
            ("best_dev_spearman", "dev_spearman"),
            ("test_spearman_at_best_dev", "test_spearman"),
            ("dev_pearson_at_best_dev", "dev_pearson"),
            ("test_pearson_at_best_dev", "test_pearson"),
        ):
            mean, std, n = hand_stats(store, row.method, row.model, row.layer, key)
            assert getattr(row, f"{column}_mean") == pytest.approx(mean), (row, column)
            assert getattr(row, f"{column}_std") == pytest.approx(std), (row, column)
            assert row.n_seeds == n == (3 if row.method == "tmft" else 2)
    assert summary["dev_mean"].equals(summary["best_dev_spearman_mean"])


def test_best_layer_is_chosen_on_dev_never_test(store, summary):
    for (method, model), group in summary.groupby(["method", "model"]):
        best = group.loc[group["is_best_layer"], "layer"].tolist()
        assert best == [hand_best_layer(store, method, model)]
        assert group.loc[group["is_last_layer"], "layer"].tolist() == [12]
    # ELECTRA-D under TMFT: best dev at layer 6, best test at layer 12.
    assert hand_best_layer(store, "tmft", ELECTRA_D) == 6
    assert hand_best_layer(store, "tmft", ELECTRA_D, key="test_spearman") == 12


# ---- Pareto -----------------------------------------------------------------------------------
def test_pareto_mask_on_a_hand_made_set_with_ties():
    points = {  # name: (params, score, on the front?)
        "A": (1, 50, True),
        "G": (1, 50, True),  # exact tie with A: neither has fewer parameters
        "F": (0.5, 40, True),  # the smallest
        "B": (2, 60, True),
        "C": (2, 55, True),  # same size as B, lower score: B does not have *fewer* parameters
        "D": (3, 60, True),  # same score as B, more parameters: B's score is not *higher*
        "E": (4, 58, False),  # B has fewer parameters and a higher score
        "J": (6, 65, True),
        "H": (5, np.nan, False),  # no score: never on the front
        "I": (np.nan, 70, False),  # no size: never on the front, dominates nothing (J stays)
    }
    params, scores, expected = zip(*points.values())
    assert dict(zip(points, pareto_mask(params, scores))) == dict(zip(points, expected))


def test_pareto_mask_matches_the_definition_on_random_points():
    rng = np.random.default_rng(0)
    params, scores = rng.integers(0, 6, 40).astype(float), rng.integers(0, 6, 40).astype(float)
    brute = [not any(params[j] < params[i] and scores[j] > scores[i] for j in range(40)) for i in range(40)]
    assert pareto_mask(params, scores).tolist() == brute


def test_pareto_points_of_the_store(summary):
    """Every (model, layer) mean is a point; the best and last layers are marked; the front is the
    definition's, checked by brute force over all the points."""
    points = pareto_points(summary)
    tmft = points[points["method"] == "tmft"]
    assert sorted(zip(tmft["model"], tmft["layer"])) == sorted((m, l) for m in MODELS for l in LAYERS)
    marked = {(m, l): k for m, l, k in zip(tmft["model"], tmft["layer"], tmft["row_kind"]) if k != "layer"}
    assert marked == {(BERT, 12): "best", (ELECTRA_D, 6): "best", (ELECTRA_D, 12): "last"}
    for group in (tmft, points[points["method"] == "dapt+tmft"]):
        p, t = group["params_m"].to_numpy(), group["test_mean"].to_numpy()
        brute = [not any(p[j] < p[i] and t[j] > t[i] for j in range(len(p))) for i in range(len(p))]
        assert group["on_front"].tolist() == brute
    on_front = {(m, l) for m, l, f in zip(tmft["model"], tmft["layer"], tmft["on_front"]) if f}
    assert (BERT, 12) in on_front and (ELECTRA_D, 12) not in on_front
    assert tmft.loc[(tmft["model"] == BERT) & (tmft["layer"] == 12), "params_m"].iloc[0] == pytest.approx(107.323392)


def test_pareto_of_a_one_model_sweep_has_a_point_per_layer_and_a_front_through_them(summary):
    one = summary[(summary["method"] == "tmft") & (summary["model"] == BERT)]
    points = pareto_points(one)
    assert len(points) == len(LAYERS) and points["on_front"].sum() > 1
    fig = plot_pareto(points)
    scatter_points = sum(len(c.get_offsets()) for c in fig.axes[0].collections)
    assert scatter_points == len(LAYERS)
    front_line = fig.axes[0].lines[0]
    assert len(front_line.get_xdata()) == points["on_front"].sum()


def test_pareto_front_of_the_papers_table2():
    points = pareto_points(paper_summary())
    front = {short_name(m) for m in points.loc[points["on_front"], "model"]}
    # The paper: "the best models are BERT (tiny, mini, large) and ELECTRA generator (small, base, large)".
    assert front == {"BERT tiny", "BERT mini", "BERT large", "ELECTRA-G small", "ELECTRA-G base", "ELECTRA-G large"}


# ---- tables -----------------------------------------------------------------------------------
def test_table2_layout_and_values(store, summary):
    table = table2(summary, "tmft", "stsb")
    assert list(zip(table["name"], table["row_kind"], table["layer"])) == [
        ("BERT base", "best", 12),
        ("ELECTRA-D base", "best", 6),
        ("ELECTRA-D base", "last", 12),
    ]
    for row in table.itertuples():
        for column, key in (
            ("dev_spearman", "dev_spearman"),
            ("dev_pearson", "dev_pearson"),
            ("test_spearman", "test_spearman"),
            ("test_pearson", "test_pearson"),
        ):
            mean, std, _ = hand_stats(store, "tmft", row.model, row.layer, key)
            assert getattr(row, f"{column}_mean") == pytest.approx(mean)
            assert getattr(row, f"{column}_std") == pytest.approx(std)
    markdown = table2_markdown(table)
    lines = markdown.strip().splitlines()
    assert lines[0] == "| Model | Layer | Params | Seeds | Dev Spearman | Dev Pearson | Test Spearman | Test Pearson |"
    mean, std, _ = hand_stats(store, "tmft", ELECTRA_D, 6, "test_spearman")
    assert lines[3].startswith("| ELECTRA-D base | 6 | 66.36M | 3 |") and f"{mean:.2f} ± {std:.2f}" in lines[3]
    assert lines[4].startswith("| ELECTRA-D base (last layer) | 12 | 108.89M |")


def test_table1_across_methods(store, summary):
    table = table1(summary, "stsb")
    assert list(zip(table["name"], table["method"], table["layer"])) == [
        ("BERT base", "tmft", 12),
        ("BERT base", "dapt+tmft", 12),
        ("ELECTRA-D base", "tmft", 6),
        ("ELECTRA-D base", "dapt+tmft", 12),
    ]
    markdown = table1_markdown(table)
    header = markdown.splitlines()[0]
    assert header.index("TMFT layer") < header.index("DAPT+TMFT layer")
    mean, std, _ = hand_stats(store, "dapt+tmft", BERT, 12, "test_spearman")
    assert f"**{mean:.2f} ± {std:.2f}**" in markdown  # best test Spearman under DAPT+TMFT is bold
    assert (
        len([line for line in markdown.splitlines() if line.startswith("|")]) == 2 + 2
    )  # header, rule, one row per model
    assert markdown.strip().endswith("Params: the whole truncated model.")  # runs without the paper's count


def test_tables_and_pareto_show_the_papers_count_where_runs_have_it():
    import pandas as pd

    from analysis.summary import params_column

    both = pd.DataFrame({"params_truncated": [10, 20], "params_paper": [9, 19]})
    assert params_column(both) == "params_paper"
    assert params_column(both.assign(params_paper=[9, None])) == "params_truncated"  # older runs lack it
    assert params_column(pd.DataFrame({"x": [1]})) is None


# ---- plots ------------------------------------------------------------------------------------
def test_layer_curve_figure_content(store, summary):
    fig = plot_layer_curves(summary, "tmft", "stsb")
    ax = fig.axes[0]
    assert "Layer" in ax.get_xlabel() and "Spearman" in ax.get_ylabel()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:2] == ["BERT base (n=3 seeds)", "ELECTRA-D base (n=3 seeds)"]
    stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
    assert sorted(int(line.get_xdata()[0]) for line in stars) == [6, 12]
    curve = ax.get_lines()[0]  # BERT base
    assert list(curve.get_xdata()) == list(LAYERS)
    assert curve.get_ydata()[1] == pytest.approx(hand_stats(store, "tmft", BERT, 6, "test_spearman")[0])


def test_pareto_labels_do_not_overlap_on_a_crowded_plot():
    points = pareto_points(paper_summary())
    fig = plot_pareto(points)
    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = list(ax.texts)
    assert len(texts) == len(points) == 14
    boxes = [Text.get_window_extent(t, renderer) for t in texts]  # the text alone, not its leader line
    frame = ax.get_window_extent(renderer)
    for a, b in combinations(boxes, 2):
        assert not a.overlaps(b)
    for box in boxes:
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
    assert "millions" in ax.get_xlabel() and "Spearman" in ax.get_ylabel()


# ---- report -----------------------------------------------------------------------------------
def test_report_command_writes_everything(store, tmp_path, capsys):
    from analysis.__main__ import main

    out = tmp_path / "report"
    assert main(["report", "--mlflow-uri", store.uri, "--experiment", store.experiment, "--out", str(out)]) == 0
    assert len(pd.read_csv(out / "runs.csv")) == 34
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 12 and summary["n_seeds"].sum() == 30
    excluded = pd.read_csv(out / "excluded_runs.csv")
    assert set(excluded["run_id"]) == set(store.excluded)
    for stem in ("layer_curves_tmft_stsb", "layer_curves_dapt-tmft_stsb", "pareto_tmft_stsb", "pareto_dapt-tmft_stsb"):
        assert (out / "figures" / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "<svg" in (out / "figures" / f"{stem}.svg").read_text()
    for name in ("table2_tmft_stsb", "table2_dapt-tmft_stsb", "table1_stsb"):
        assert (out / "tables" / f"{name}.md").read_text().startswith("| Model |")
        assert len(pd.read_csv(out / "tables" / f"{name}.csv")) in (3, 2, 4)
    index = (out / "README.md").read_text()
    for run_id in store.excluded:
        assert run_id in index
    for link in ("figures/layer_curves_tmft_stsb.png", "figures/pareto_tmft_stsb.png", "summary.csv", "runs.csv"):
        assert f"]({link})" in index
    assert (out / "tables" / "table2_tmft_stsb.md").read_text() in index
    assert "34 trial runs" in capsys.readouterr().out


def test_report_command_fails_clearly(store, tmp_path, capsys):
    from analysis.__main__ import main

    assert main(["report", "--mlflow-uri", store.uri, "--experiment", "missing", "--out", str(tmp_path)]) == 2
    assert "No experiment named 'missing'" in capsys.readouterr().err
    assert main(["report", "--mlflow-uri", store.uri, "--experiment", "scratch", "--out", str(tmp_path)]) == 2
    assert "No trial runs" in capsys.readouterr().err


def test_report_out_that_is_a_file_is_refused_before_reading_the_store(tmp_path, capsys):
    from analysis.__main__ import main

    taken = tmp_path / "notes.txt"
    taken.write_text("keep")
    uri = f"sqlite:///{tmp_path / 'absent' / 'mlflow.db'}"  # had it been read first, another error
    for out, message in ((taken, "is a file; pass a folder"), (taken / "report", "notes.txt is a file, so no folder")):
        assert main(["report", "--mlflow-uri", uri, "--out", str(out)]) == 2
        assert f"--out {out}" in (err := capsys.readouterr().err) and message in err
    assert taken.read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    with pytest.raises(SweepInputError, match="is a file"):  # from the API too
        build_report(uri, taken)


def test_short_names_follow_the_paper():
    assert [short_name(m) for m in MODELS] == ["ELECTRA-D base", "BERT base"]
    assert short_name("google/electra-large-generator") == "ELECTRA-G large"
    assert short_name("google/bert_uncased_L-4_H-256_A-4") == "BERT mini"
    assert short_name("microsoft/deberta-v3-base") == "DeBERTaV3 base"
    assert short_name("/tmp/some/local-model/") == "local-model"


def test_classification_tasks_use_f1_as_primary_metric():
    """MRPC/SICK runs log best_dev_f1 / test_f1_at_best_dev: summary, tables and plots follow."""
    rows = []
    for layer, (dev, test) in {1: (80.0, 78.0), 2: (84.0, 79.0), 3: (82.0, 81.0)}.items():
        for seed, shift in enumerate((-1.0, 0.0, 2.5)):
            rows.append(
                {
                    "run_id": f"r{layer}{seed}",
                    "status": "FINISHED",
                    "method": "tmft",
                    "task": "mrpc",
                    "model": BERT,
                    "layer": layer,
                    "seed": seed,
                    "params_truncated": 1_000_000 * layer,
                    "best_dev_f1": dev + shift,
                    "test_f1_at_best_dev": test - shift,
                    "end_time": pd.Timestamp("2026-01-01", tz="UTC"),
                }
            )
    summary = summarize(pd.DataFrame(rows))
    assert summary["metric"].unique().tolist() == ["f1"]
    assert summary["dev_mean"].tolist() == pytest.approx([statistics.mean([d - 1, d, d + 2.5]) for d in (80, 84, 82)])
    assert summary["test_std"].tolist() == pytest.approx([statistics.stdev([1.0, 0.0, -2.5])] * 3)
    assert summary.loc[summary["is_best_layer"], "layer"].tolist() == [2]
    markdown = table2_markdown(table2(summary, "tmft", "mrpc"), "f1")
    assert "| Dev F1 | Test F1 |" in markdown and "Pearson" not in markdown
    assert "F1" in plot_layer_curves(summary, "tmft", "mrpc").axes[0].get_ylabel()


def test_report_where_keeps_matching_runs_and_mixed_settings_are_flagged(store, runs, tmp_path):
    from analysis.__main__ import main
    from analysis.report import build_report

    report = build_report(store.uri, tmp_path / "dapt", store.experiment, where={"method": "dapt+tmft"})
    assert len(report.runs) == 12 and set(report.summary["method"]) == {"dapt+tmft"}
    assert "runs with `method=dapt+tmft`" in report.index.read_text()
    assert main(["report", "--mlflow-uri", store.uri, "--where", "colour=red", "--out", str(tmp_path / "x")]) == 2

    mixed = runs.copy()  # as if half the seeds had run with another learning rate
    mixed.loc[mixed["seed"] == 0, "lr"] = 1e-4
    summary = summarize(mixed)
    assert (summary["configs"] == 2).all() and (summary["varying"] == "lr").all()


def test_random_init_runs_are_a_model_of_their_own(tmp_path):
    """Runs with random_init=True are never averaged with the pretrained runs of the same model."""
    from mlflow import MlflowClient

    from analysis.loader import load_runs
    from analysis.names import short_name
    from analysis.summary import summarize
    from trainables.core import schema

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("ri")
    parent = client.create_run(experiment, tags={schema.TAG_ROLE: "sweep", schema.TAG_SWEEP: "ri"}).info.run_id
    for random_init, score in (("False", 80.0), ("True", 20.0)):
        for seed in (0, 1):
            run = client.create_run(
                experiment,
                tags={
                    schema.TAG_ROLE: "trial",
                    schema.TAG_PARENT: parent,
                    schema.TAG_CONFIG_HASH: f"{random_init}{seed}",
                },
            ).info.run_id
            for key, value in dict(
                method="tmft",
                task="stsb",
                model="google/electra-base-discriminator",
                layer=3,
                seed=seed,
                epochs=1,
                lr=2e-5,
                batch_size=32,
                params_truncated=10,
                random_init=random_init,
            ).items():
                client.log_param(run, key, value)
            for key in ("best_dev_spearman", "test_spearman_at_best_dev"):
                client.log_metric(run, key, score + seed)
            client.set_terminated(run, "FINISHED")
    runs = load_runs(uri)
    summary = summarize(runs)
    assert len(summary) == 2
    by_model = dict(zip(summary["model"], summary["test_mean"]))
    assert by_model["google/electra-base-discriminator"] == 80.5
    assert by_model["google/electra-base-discriminator (random init)"] == 20.5
    assert short_name("google/electra-base-discriminator (random init)").endswith("(random init)")


# ---- metric contracts ------------------------------------------------------------------------
SET_COLUMNS = [f"{name}_spearman" for name in EVAL_SETS]


def test_evaluation_runs_without_seed_or_task_are_loaded_and_summarised(evaluation):
    runs = load_runs(evaluation)
    assert len(runs) == len(POOLINGS) * len(EVAL_LAYERS) and not {"seed", "task"} & set(runs.columns)
    assert set(runs["metric_primary"]) == {"mean_spearman"} and set(runs["select_axis"]) == {""}
    complete, excluded = split_runs(runs)
    assert len(complete) == len(runs) and excluded.empty
    summary = summarize(runs)
    assert sorted(zip(summary["pooling"], summary["layer"])) == sorted((p, l) for p in POOLINGS for l in EVAL_LAYERS)
    assert set(summary["family"]) == {TABLE_FAMILY} and set(summary["task"]) == {""} and set(summary["n_seeds"]) == {1}
    assert not summary["is_best"].any() and not summary["is_best_layer"].any()  # no select axis: every row stands
    for row in summary.to_dict("records"):
        expected = evaluation_scores(row["pooling"], row["layer"])
        assert row["dev_mean"] == row["test_mean"] == pytest.approx(expected["mean_spearman"])
        for column in SET_COLUMNS:
            assert row[f"{column}_mean"] == pytest.approx(expected[column])


def test_report_of_evaluation_runs_has_layer_curves_and_a_table_per_set(evaluation, tmp_path):
    report = build_report(evaluation, tmp_path)
    table = pd.read_csv(tmp_path / "tables" / "scores_evaluate_all.csv")
    assert list(table.columns) == ["model", "pooling", "layer", *SET_COLUMNS, "mean_spearman"]
    assert len(table) == len(POOLINGS) * len(EVAL_LAYERS)
    scores = [*SET_COLUMNS, "mean_spearman"]
    for row in table.to_dict("records"):
        expected = evaluation_scores(row["pooling"], row["layer"])
        assert [row[c] for c in scores] == pytest.approx([expected[c] for c in scores])
    markdown = (tmp_path / "tables" / "scores_evaluate_all.md").read_text()
    assert markdown.splitlines()[0] == "| model | pooling | layer | STS12 | STS-B | SICK-R | Avg. |"
    assert "| all-MiniLM-L6-v2 | mean | 2 | 60.00 | 70.00 | 65.00 | 65.00 |" in markdown
    index = report.index.read_text()
    assert "## Zero-shot evaluation" in index and markdown in index
    assert "](tables/scores_evaluate_all.md)" in index and "](tables/scores_evaluate_all.csv)" in index
    curves = sorted(p.name for p in (tmp_path / "figures").glob("*.png"))
    assert curves == [f"curves_evaluate_all_sentence-transformers-all-minilm-l6-v2_{p}.png" for p in sorted(POOLINGS)]
    for name in curves:
        assert f"](figures/{name})" in index

    mean_pooling = report.summary[report.summary["pooling"] == "mean"]
    ax = plot_metric_curves(mean_pooling, SET_COLUMNS, "mean pooling").axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["STS12", "STS-B", "SICK-R"]
    for line, column in zip(ax.get_lines(), SET_COLUMNS):
        assert list(line.get_xdata()) == list(EVAL_LAYERS)
        assert list(line.get_ydata()) == pytest.approx(
            [evaluation_scores("mean", layer)[column] for layer in EVAL_LAYERS]
        )


def test_a_contract_without_a_select_axis_shows_every_row(tmp_path):
    contract = {
        "method": "probe",
        "sweep_axes": "model,layer,seed",
        "select_axis": "",
        "seed_axis": "seed",
        "metric_primary": "probe_dev",
        "metric_report": "probe_test",
        "metric_companion": "",
        "metric_mode": "max",
        "metric_columns": "",
    }
    rows = [
        {
            "model": BERT,
            "layer": layer,
            "seed": seed,
            "probe_dev": 70.0 + layer + seed,
            "probe_test": 60.0 + layer - seed,
        }
        for layer in (0, 1, 2)
        for seed in (0, 1)
    ]
    uri = log_runs(tmp_path, contract, rows)
    summary = summarize(load_runs(uri))
    assert sorted(summary["layer"]) == [0, 1, 2] and set(summary["family"]) == {TABLE_FAMILY}
    assert not summary["is_best"].any() and set(summary["n_seeds"]) == {2}
    assert summary["dev_mean"].tolist() == pytest.approx([70.5, 71.5, 72.5])
    assert summary["test_std"].tolist() == pytest.approx([statistics.stdev([0, -1])] * 3)
    build_report(uri, tmp_path / "report")
    table = pd.read_csv(tmp_path / "report" / "tables" / "scores_probe_all.csv")
    assert table["layer"].tolist() == [0, 1, 2] and "is_best" not in table
    assert table["probe_test_std"].tolist() == pytest.approx([statistics.stdev([0, -1])] * 3)
    assert "60.50 ± 0.71" in (tmp_path / "report" / "tables" / "scores_probe_all.md").read_text()
    assert not list((tmp_path / "report" / "tables").glob("table2_*"))  # no layer selected: no Table 2


@pytest.mark.parametrize("select", ["layer", "lr"])
def test_a_min_mode_contract_selects_the_lowest(tmp_path, select):
    """The lowest mean primary over seeds is selected, whether the select axis is the layer (the
    layer family: Table 2, curves) or any other axis."""
    contract = {
        "method": "distil",
        "sweep_axes": f"model,{select},seed",
        "select_axis": select,
        "seed_axis": "seed",
        "metric_primary": "best_dev_loss",
        "metric_report": "test_loss_at_best_dev",
        "metric_companion": "",
        "metric_mode": "min",
        "metric_columns": "",
    }
    losses = {1: 3.0, 2: 2.0, 3: 5.0}  # layer (or lr) -> dev loss: 2 is the lowest, 3 the highest
    rows = [
        {
            "model": BERT,
            select: value,
            "seed": seed,
            "best_dev_loss": loss + seed / 10,
            "test_loss_at_best_dev": loss + 1.0,
            "params_truncated": 1_000_000 * value,
        }
        for value, loss in losses.items()
        for seed in (0, 1)
    ]
    uri = log_runs(tmp_path, contract, rows)
    summary = summarize(load_runs(uri))
    assert len(summary) == 3 and set(summary["n_seeds"]) == {2}
    best = summary[summary["is_best"]]
    assert best[select].astype(float).tolist() == [2.0] and best["dev_mean"].tolist() == pytest.approx([2.05])
    if select == "layer":
        assert set(summary["family"]) == {LAYER_FAMILY} and summary["is_best_layer"].equals(summary["is_best"])
        table = table2(summary, "distil", "")
        assert list(zip(table["row_kind"], table["layer"])) == [("best", 2), ("last", 3)]
        points = pareto_points(summary)  # lower loss is better: the front runs from layer 1 to the smaller-loss layer 2
        assert points.loc[points["on_front"], "layer"].tolist() == [1, 2]
    else:
        assert set(summary["family"]) == {TABLE_FAMILY} and not summary["is_best_layer"].any()
        build_report(uri, tmp_path / "report")
        markdown = (tmp_path / "report" / "tables" / "scores_distil_all.md").read_text()
        assert "| **2** |" in markdown and markdown.count("**") == 2  # the selected lr, bold


def test_runs_without_a_contract_keep_todays_results(runs, summary, evaluation):
    """The store's runs log no contract and are read as TMFT's (the tests above check the numbers
    by hand); logging TMFT's contract, as the engine now does, or adding evaluation runs changes none."""
    from trainables.methods.tmft.method import TMFT

    contract = TMFT.metrics(Namespace(task="stsb", eval_sets=[])).params()
    assert {contract["metric_primary"], contract["metric_report"]} == {"best_dev_spearman", "test_spearman_at_best_dev"}
    columns = [
        "method",
        "task",
        "model",
        "layer",
        "metric",
        "n_seeds",
        "seeds",
        "dev_mean",
        "dev_std",
        "test_mean",
        "test_std",
        "dev2_mean",
        "test2_mean",
        "is_best_layer",
        "is_last_layer",
        "is_best",
    ]
    assert set(summary["family"]) == {LAYER_FAMILY} and set(summary["metric"]) == {"spearman"}
    with_contract = summarize(runs.assign(**contract))
    pd.testing.assert_frame_equal(with_contract[columns], summary[columns])
    mixed = summarize(pd.concat([runs, load_runs(evaluation)], ignore_index=True))
    layers = mixed[mixed["family"] == LAYER_FAMILY].reset_index(drop=True)
    pd.testing.assert_frame_equal(layers[columns], summary[columns], check_dtype=False)
    assert (mixed["method"] == "evaluate").sum() == len(POOLINGS) * len(EVAL_LAYERS)
