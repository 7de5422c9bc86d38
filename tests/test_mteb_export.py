"""Runs exported as mteb results (analysis/mteb_export.py) and read back by mteb's own loader: the same
scores, one folder per model and layer, the main score's definition in every file; the Pareto
selection; and (slow) the real all-MiniLM-L6-v2 zero-shot sweep exported and read back equal to the
suite's scores and to MTEB's published ones.

All slow: importing mteb alone takes 5-8 s. Run with `pytest -m slow tests/test_mteb_export.py`."""

from __future__ import annotations

import json

import pandas as pd
import pytest

pytest.importorskip("mteb")
pytestmark = [pytest.mark.slow, pytest.mark.mteb]


def load_back(folder) -> dict:
    """{(model, revision): {task: TaskResult}} as mteb's ResultCache reads the folder."""
    from mteb.cache import ResultCache

    loaded = ResultCache(folder).load_results(include_remote=False)
    return {(m.model_name, m.model_revision): {t.task_name: t for t in m.task_results} for m in loaded.model_results}


@pytest.fixture(scope="module")
def runs(tiny_models):
    model = tiny_models["bert"]  # 4 layers
    evaluated = {"method": "evaluate", "model": model, "pooling": "mean", "metric_report": "mean_spearman"}
    rows = [
        {**evaluated, "run_id": "a" * 32, "layer": 4, "sets": "stsb,sts12,sickr,turl", "params_truncated": 1000,
         "stsb_spearman": 38.0123, "stsb_pearson": 40.5, "sts12_spearman": 48.25, "sts12_pearson": 52.9,
         "sickr_spearman": 41.0, "mean_spearman": 43.0},
        {**evaluated, "run_id": "b" * 32, "layer": 2, "sets": "stsb", "params_truncated": 600,
         "stsb_spearman": 37.5, "stsb_pearson": 39.0, "mean_spearman": 37.5},
        {"run_id": "c" * 32, "method": "tmft", "model": "org/base", "layer": 2, "seed": 0, "sweep": "minilm",
         "eval_sets": "stsb,twittersemeval2015", "stsb_spearman": 80.25, "stsb_pearson": 81.0,
         "twittersemeval2015_ap": 70.125, "twittersemeval2015_accuracy": 81.5, "twittersemeval2015_f1": 60.0,
         "params_truncated": 5000, "metric_report": "test_spearman_at_best_dev", "test_spearman_at_best_dev": 80.0},
        {"run_id": "d" * 32, "method": "tmft", "model": "org/base", "layer": 3, "seed": 1, "sweep": "minilm",
         "task": "stsb", "max_eval_samples": None, "test_spearman_at_best_dev": 79.5, "test_pearson_at_best_dev": 80.5,
         "params_truncated": 6000, "metric_report": "test_spearman_at_best_dev"},
        {"run_id": "e" * 32, "method": "tmft", "model": "org/base", "layer": 3, "seed": 2, "sweep": "minilm",
         "task": "stsb", "max_eval_samples": 200, "test_spearman_at_best_dev": 79.0, "test_pearson_at_best_dev": 80.0,
         "params_truncated": 6000, "metric_report": "test_spearman_at_best_dev"},
    ]  # fmt: skip
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def exported(runs, tmp_path_factory):
    from analysis.mteb_export import export_runs

    folder = tmp_path_factory.mktemp("mteb")
    return folder, export_runs(runs, folder)


def test_exported_runs_read_back_by_mtebs_loader_with_the_same_scores(exported):
    folder, export = exported
    back = load_back(folder)
    last, layer2, trained = (
        back[(name, revision)]
        for name, revision in [
            ("embsweep/bert", "no_revision_available"),
            ("embsweep/bert-L2", "no_revision_available"),
            ("embsweep/minilm-tmft-base-L2-s0", "c" * 32),
        ]
    )
    assert set(last) == {"STSBenchmark", "STS12"} and set(layer2) == {"STSBenchmark"}
    assert last["STSBenchmark"].get_score() == pytest.approx(0.380123, abs=1e-6)
    assert last["STSBenchmark"].get_score(getter=lambda s: s["cosine_pearson"]) == pytest.approx(0.405, abs=1e-6)
    assert last["STS12"].get_score() == pytest.approx(0.4825, abs=1e-6)
    assert layer2["STSBenchmark"].get_score() == pytest.approx(0.375, abs=1e-6)
    assert trained["STSBenchmark"].get_score() == pytest.approx(0.8025, abs=1e-6)
    assert trained["TwitterSemEval2015"].get_score() == pytest.approx(0.70125, abs=1e-6)
    stsb_trained = back[("embsweep/minilm-tmft-base-L3-s1", "d" * 32)]  # its whole test split is MTEB's STS-B
    assert stsb_trained["STSBenchmark"].get_score() == pytest.approx(0.795, abs=1e-6)
    assert ("embsweep/minilm-tmft-base-L3-s2", "e" * 32) not in back  # 200 test pairs are not MTEB's STS-B
    assert export.runs == 4 and len(export.files) == 6
    assert export.skipped == {"sickr", "turl"}  # SICK-R's test split and USEB's TURL are no MTEB task


def test_each_file_names_its_main_score_definition_and_the_model_meta_its_base(exported):
    folder, export = exported
    by_task = {path.stem: json.loads(path.read_text()) for path in export.files}
    pair = by_task["TwitterSemEval2015"]["scores"]["test"][0]
    assert pair["main_score"] == pair["cosine_ap"] and "max_ap" not in pair
    assert pair["embsweep_main_score_definition"].startswith("MTEB 1: AP of the cosine")
    assert by_task["STS12"]["scores"]["test"][0]["embsweep_main_score_definition"].startswith("MTEB 1 and 2")
    meta = json.loads(
        (folder / "results" / "embsweep__minilm-tmft-base-L2-s0" / ("c" * 32) / "model_meta.json").read_text()
    )
    assert (meta["adapted_from"], meta["n_parameters"]) == ("org/base", 5000)


def test_pareto_keeps_the_runs_no_smaller_run_beats(runs):
    from analysis.mteb_export import pareto_runs

    evaluated = runs[runs["method"] == "evaluate"].dropna(axis=1, how="all")
    assert list(pareto_runs(evaluated)["run_id"]) == ["a" * 32, "b" * 32]  # bigger and better, smaller and worse
    worse = evaluated.assign(mean_spearman=[30.0, 37.5])
    assert list(pareto_runs(worse)["run_id"]) == ["b" * 32]  # the bigger one is now dominated


def test_model_names_keep_layers_and_poolings_of_one_model_apart():
    from trainables.evaluation.mteb_encoder import model_name

    hub = "sentence-transformers/all-MiniLM-L6-v2"
    names = {
        model_name(hub, layer, pooling, 6, own=pooling == "mean") for layer in range(7) for pooling in ("mean", "cls")
    }
    assert len(names) == 14 and model_name(hub, 6, "mean", 6, own=True) == hub
    assert model_name(hub, 3, "cls", 6) == "embsweep/sentence-transformers-all-MiniLM-L6-v2-L3-cls"
    assert model_name("runs:/0123abcd", own=True) == "embsweep/run-0123abcd"
    assert model_name("/some/where/best", 2, "mean", None, own=True) == "embsweep/best-L2"


MTEB_STS = {  # MTEB's published cosine Spearman of all-MiniLM-L6-v2 (as tests/test_eval_sets.py)
    "STS12": 72.37,
    "STS13": 80.60,
    "STS14": 75.59,
    "STSBenchmark": 82.03,
    "SICK-R": 77.58,
}


def test_real_minilm_zero_shot_sweep_exported_reads_back_as_the_suite_and_mtebs_published_scores(
    sweep_env, tmp_path, capsys
):
    """The Done-when check: STS-B, STS12-16 and SICK-R (all pairs, MTEB's) zero-shot, exported by the
    command line and read back by mteb's loader; TwitterPara has no MTEB task (USEB's) and is listed."""
    from analysis.__main__ import main as analysis
    from analysis.loader import load_runs
    from sweeps.evaluate import main
    from trainables.core.errors import SweepInputError
    from trainables.core.paths import default_data_dir
    from trainables.evaluation.sets import load_suite

    sets = "sts12,sts13,sts14,sts15,sts16,stsb,sickr_all"
    try:
        load_suite(["twitterpara"], default_data_dir())
        sets += ",twitterpara"
    except SweepInputError:
        print("TwitterPara's data is not here (docs/data.md says where to fetch it): left out")
    model = "sentence-transformers/all-MiniLM-L6-v2"
    assert main(["--models", model, "--sets", sets, "--name", "minilm-zero-shot", *sweep_env["base"]]) == 0
    assert analysis(["mteb", "--mlflow-uri", sweep_env["uri"], "--out", str(tmp_path / "mteb")]) == 0
    printed = capsys.readouterr().out
    (run,) = [r for _, r in load_runs(sweep_env["uri"]).iterrows()]
    scores = load_back(tmp_path / "mteb")[(model, "no_revision_available")]
    names = {"sts12": "STS12", "sts13": "STS13", "sts14": "STS14", "sts15": "STS15", "sts16": "STS16"}
    print({task: round(result.get_score() * 100, 4) for task, result in sorted(scores.items())})
    for ours, task in {**names, "stsb": "STSBenchmark", "sickr_all": "SICK-R"}.items():
        assert scores[task].get_score() * 100 == pytest.approx(run[f"{ours}_spearman"], abs=1e-4), task
    for task, published in MTEB_STS.items():
        assert scores[task].get_score() * 100 == pytest.approx(published, abs=0.05), task
    if "twitterpara" in sets:
        assert "not MTEB tasks, not written: twitterpara" in printed


def test_two_evaluations_of_one_model_never_share_a_file(runs, tmp_path):
    from analysis.mteb_export import export_runs

    evaluated = runs[runs["run_id"] == "b" * 32]
    twice = pd.concat([evaluated, evaluated.assign(run_id="f" * 32, stsb_spearman=12.5)], ignore_index=True)
    export = export_runs(twice, tmp_path)
    assert len(export.files) == 2 and len(set(map(str, export.files))) == 2
    loaded = load_back(tmp_path)
    scores = sorted(r["STSBenchmark"].scores["test"][0]["main_score"] for r in loaded.values())
    assert scores == [0.125, 0.375], loaded.keys()
