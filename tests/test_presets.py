"""Presets of the ELECTRA paper: `--list-presets` with trial counts and GPU-hours, a preset's flags
as defaults that the command line overrides, a preset refused on the wrong script, the preset
recorded on the runs, and the report's comparison with the paper's published numbers."""

from argparse import Namespace

import pandas as pd
import pytest
from analysis_helpers import log_runs
from sweep_helpers import sweep_args

from analysis import published
from analysis.report import build_report
from sweeps import electra_layers, improvements
from sweeps.engine import presets
from sweeps.engine.runner import parser_for, plan_sweep
from trainables.methods import get_method
from trainables.methods.tmft.method import TMFT
from trainables.methods.tmft.paper import PRESETS, TABLE1, TABLE2

# Depths of the paper's models, from their public configs.
DEPTHS = {
    "google/bert_uncased_L-2_H-128_A-2": 2,
    "google/bert_uncased_L-4_H-256_A-4": 4,
    "google/bert_uncased_L-4_H-512_A-8": 4,
    "google/bert_uncased_L-8_H-512_A-8": 8,
    "bert-base-cased": 12,
    "bert-large-cased": 24,
    "google/electra-small-discriminator": 12,
    "google/electra-base-discriminator": 12,
    "google/electra-large-discriminator": 24,
    "google/electra-small-generator": 12,
    "google/electra-base-generator": 12,
    "google/electra-large-generator": 24,
    "microsoft/deberta-v3-base": 12,
}
PAPER_PRESETS = {
    "table1",
    "table2",
    "fig2a",
    "fig2b",
    "fig2c",
    "fig3",
    "fig4",
    "fig5",
    "fig6",
    "fig7",
    "fig8",
    "fig9",
    "fig10",
    "fig11",
    "fig12",
    "fig13",
}


@pytest.mark.sweep
def test_every_table_and_figure_has_a_preset_listed_with_trials_and_gpu_hours(capsys, data_dir):
    assert set(PRESETS) == PAPER_PRESETS
    assert electra_layers.main(["--list-presets", "--data-dir", str(data_dir)]) == 0
    lines = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.split()}
    base = sum(
        DEPTHS[m] + 1
        for m in (
            "google/electra-base-discriminator",
            "google/electra-base-generator",
            "bert-base-cased",
            "microsoft/deberta-v3-base",
        )
    )
    sizes = sum(DEPTHS[m] + 1 for m in DEPTHS if m != "microsoft/deberta-v3-base")
    expected = {
        "table1": 3 * 5 * base,
        "table2": 5 * sizes,
        "fig2a": 5 * base,
        "fig2b": 5 * base,
        "fig4": 5 * sizes,
        "fig13": 5 * base,
        "fig7": 5 * 3 * 13,
        "fig12": 5 * (3 + 5 + 5 + 9 + 13 + 25),
    }
    for name in PAPER_PRESETS:
        script, trials, hours = lines[name][1:4]
        assert script == PRESETS[name].script
        if name in expected:
            assert int(trials) == expected[name], name
        assert float(hours) > 0, name
    # three upstream variants of the same grid: three times the hours of one
    assert float(lines["table1"][3]) == pytest.approx(3 * float(lines["fig2a"][3]), abs=0.15)


def test_a_preset_sets_defaults_that_the_command_line_overrides(sweep_env, tiny_models):
    parser = parser_for("tmft")
    argv = ["--preset", "fig13", "--models", tiny_models["bert"], "--layers", "0,1", *sweep_env["flags"]]
    args = presets.apply(parser, argv, parser.parse_args(argv), get_method("tmft"))
    assert args.random_init is True and args.layers == [0, 1] and args.models == [tiny_models["bert"]]
    assert parser_for("tmft").parse_args([]).random_init is False


def test_a_preset_of_another_script_is_refused_before_any_work(sweep_env, capsys):
    assert electra_layers.main(["--preset", "table1", *sweep_env["flags"]]) == 2
    assert "python sweeps/improvements.py --preset table1" in capsys.readouterr().err
    assert not sweep_env["storage"].exists()


def test_improvements_runs_plain_tmft_beside_the_stages_for_table1(sweep_env, tiny_models):
    parser = parser_for("improvements")
    argv = ["--preset", "table1", "--models", tiny_models["bert"], "--layers", "1", "--seeds", "0", *sweep_env["flags"]]
    args = presets.apply(parser, argv, parser.parse_args(argv), get_method("improvements"))
    plan = plan_sweep(args, method="improvements", prog="improvements")
    assert sorted(c["method"] for c in plan.configs) == ["dapt+tmft", "tmft", "ws+tmft"]
    assert "stage_key" not in next(c for c in plan.configs if c["method"] == "tmft")
    assert len(plan.stages) == 2 and plan.static_params["preset"] == "table1"
    assert improvements.main(["--improvement", "none,cka", *sweep_env["flags"]]) == 2


@pytest.mark.sweep
def test_a_preset_sweep_records_its_name_and_the_report_names_the_figure(sweep_env, tiny_models):
    from mlflow_helpers import runs_by_role

    sweep = sweep_args(tiny_models["bert"], "--layers 0,1 --seeds 0 --epochs 1 --name random", *sweep_env["flags"])
    assert electra_layers.main(["--preset", "fig13", *sweep]) == 0
    _, children = runs_by_role(sweep_env["uri"])
    assert {c.data.params["preset"] for c in children} == {"fig13"}
    assert {c.data.params["random_init"] for c in children} == {"True"}
    report = build_report(sweep_env["uri"], sweep_env["tmp"] / "report")
    text = report.index.read_text()
    assert "Figure 13 (Appendix E)" in text and "The paper gives only a plot" in text


def _tmft_rows(model, by_layer, preset):
    """Runs of one model: {layer: [(dev, test, test pearson) per seed]}."""
    rows = []
    for layer, seeds in by_layer.items():
        for seed, (dev, test, pearson) in enumerate(seeds):
            rows.append(
                {
                    "method": "tmft",
                    "task": "stsb",
                    "model": model,
                    "layer": str(layer),
                    "seed": str(seed),
                    "preset": preset,
                    "params_paper": str(1_000_000 * (layer + 1)),
                    "best_dev_spearman": dev,
                    "test_spearman_at_best_dev": test,
                    "test_pearson_at_best_dev": pearson,
                }
            )
    return rows


def test_the_report_puts_the_published_numbers_beside_ours_with_the_difference(tmp_path):
    contract = TMFT.metrics(Namespace(task="stsb", eval_sets=[])).params()
    small_d = "google/electra-small-discriminator"
    rows = _tmft_rows(
        small_d, {1: [(80.0, 70.0, 71.0), (79.0, 69.0, 70.0)], 12: [(74.0, 66.0, 67.0), (73.0, 67.0, 68.0)]}, "table2"
    )
    uri = log_runs(tmp_path / "store", contract, rows)
    report = build_report(uri, tmp_path / "report")
    table = pd.read_csv(tmp_path / "report" / "tables" / "paper_table2.csv")
    assert len(table) == len(TABLE2)
    best = table[table["model"] == small_d].iloc[0]
    paper = next(r for r in TABLE2 if r.model == small_d and r.selection == "best")
    assert best["layer (paper)"] == paper.layer == 1 and best["layer (ours)"] == 1
    assert best["test Spearman (ours)"] == pytest.approx(69.5)
    assert best["Δ test Spearman"] == pytest.approx(69.5 - paper.test_spearman)
    assert best["Δ test Pearson"] == pytest.approx(70.5 - paper.test_pearson)
    assert best["params M (ours)"] == pytest.approx(2.0) and best["params M (paper)"] == pytest.approx(4.76)
    last = table[table["model"] == f"{small_d} (last layer)"].iloc[0]
    assert last["layer (ours)"] == 12 and last["test Spearman (ours)"] == pytest.approx(66.5)
    assert last["Δ test Spearman"] == pytest.approx(66.5 - 66.72)
    others = table[~table["model"].str.startswith(small_d)]
    assert others["test Spearman (ours)"].isna().all() and (others["seeds"] == 0).all()
    text = report.index.read_text()
    assert "Table 2 (Appendix D)" in text and "not run" in text and "-0.22" in text


def test_table1_published_rows_cover_every_method_and_base_model():
    assert {(r.method, r.model) for r in TABLE1} == {
        (method, model)
        for method in ("tmft", "ws+tmft", "dapt+tmft")
        for model in (
            "bert-base-cased",
            "google/electra-base-discriminator",
            "google/electra-base-generator",
            "microsoft/deberta-v3-base",
        )
    }
    assert published.preset_names(pd.DataFrame({"preset": ["fig2a", None, "table1"]})) == ["fig2a", "table1"]
