"""The analysis against a small MLflow store written with the sweeps' run schema
(tests/analysis_helpers.py): loader, summary, best layer, Pareto front, tables, plots, report."""
from __future__ import annotations

import statistics
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from matplotlib.text import Text

from analysis.loader import AnalysisError, load_runs
from analysis.names import short_name
from analysis.pareto import pareto_mask, pareto_points
from analysis.plots import plot_layer_curves, plot_pareto
from analysis.summary import split_runs, summarize
from analysis.tables import table1, table1_markdown, table2, table2_markdown
from trainables.schema import EPOCH_METRICS, FINAL_METRICS, PARAMS

try:
    from tests.analysis_helpers import BERT, ELECTRA_D, LAYERS, MODELS, paper_summary, shared_store
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from analysis_helpers import BERT, ELECTRA_D, LAYERS, MODELS, paper_summary, shared_store


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return shared_store(tmp_path_factory)


@pytest.fixture(scope="module")
def runs(store):
    return load_runs(store.uri, store.experiment)


@pytest.fixture(scope="module")
def summary(runs):
    return summarize(runs)


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
        row = runs[(runs["method"] == record["method"]) & (runs["model"] == record["model"])
                   & (runs["layer"] == record["layer"]) & (runs["seed"] == record["seed"]) & (runs["status"] == "FINISHED")]
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
        for column, key in (("best_dev_spearman", "dev_spearman"), ("test_spearman_at_best_dev", "test_spearman"),
                            ("dev_pearson_at_best_dev", "dev_pearson"), ("test_pearson_at_best_dev", "test_pearson")):
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
        "G": (1, 50, True),     # exact tie with A: neither has fewer parameters
        "F": (0.5, 40, True),   # the smallest
        "B": (2, 60, True),
        "C": (2, 55, True),     # same size as B, lower score: B does not have *fewer* parameters
        "D": (3, 60, True),     # same score as B, more parameters: B's score is not *higher*
        "E": (4, 58, False),    # B has fewer parameters and a higher score
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
        ("BERT base", "best", 12), ("ELECTRA-D base", "best", 6), ("ELECTRA-D base", "last", 12)]
    for row in table.itertuples():
        for column, key in (("dev_spearman", "dev_spearman"), ("dev_pearson", "dev_pearson"),
                            ("test_spearman", "test_spearman"), ("test_pearson", "test_pearson")):
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
        ("BERT base", "tmft", 12), ("BERT base", "dapt+tmft", 12),
        ("ELECTRA-D base", "tmft", 6), ("ELECTRA-D base", "dapt+tmft", 12)]
    markdown = table1_markdown(table)
    header = markdown.splitlines()[0]
    assert header.index("TMFT layer") < header.index("DAPT+TMFT layer")
    mean, std, _ = hand_stats(store, "dapt+tmft", BERT, 12, "test_spearman")
    assert f"**{mean:.2f} ± {std:.2f}**" in markdown  # best test Spearman under DAPT+TMFT is bold
    assert len(markdown.strip().splitlines()) == 2 + 2  # header, rule, one row per model


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
            rows.append({"run_id": f"r{layer}{seed}", "status": "FINISHED", "method": "tmft", "task": "mrpc",
                         "model": BERT, "layer": layer, "seed": seed, "params_truncated": 1_000_000 * layer,
                         "best_dev_f1": dev + shift, "test_f1_at_best_dev": test - shift,
                         "end_time": pd.Timestamp("2026-01-01", tz="UTC")})
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
    from trainables import schema

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("ri")
    parent = client.create_run(experiment, tags={schema.TAG_ROLE: "sweep", schema.TAG_SWEEP: "ri"}).info.run_id
    for random_init, score in (("False", 80.0), ("True", 20.0)):
        for seed in (0, 1):
            run = client.create_run(experiment, tags={schema.TAG_ROLE: "trial", schema.TAG_PARENT: parent,
                                                      schema.TAG_CONFIG_HASH: f"{random_init}{seed}"}).info.run_id
            for key, value in dict(method="tmft", task="stsb", model="google/electra-base-discriminator", layer=3,
                                   seed=seed, epochs=1, lr=2e-5, batch_size=32, params_truncated=10,
                                   random_init=random_init).items():
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
