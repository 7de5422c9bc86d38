"""Nothing scored or exported as what it is not (issue 45): a model is re-scored by its own pipeline (its
sentence-transformers pooling and the Dense layer it keeps, e.g. SimCSE's MLP) unless a pooling is asked
for, the plan says which, and an mteb name is the bare hub id only for a hub model's own pipeline."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainables.core.errors import SweepInputError

SENTENCES = ["A man is playing a guitar.", "Two dogs run on the beach.", "A woman slices an onion.", "Rain."]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def kept_mlp(tiny_models, tmp_path_factory):
    """A tiny SimCSE model as a trial keeps it with `mlp` keep: CLS pooling, then its trained Dense + tanh."""
    import torch

    from trainables.methods.tsdae.training import sentence_model, simcse_training_model

    st = simcse_training_model(sentence_model(tiny_models["bert"], "cls", 64), "keep")
    torch.nn.init.normal_(st[2].linear.weight, std=0.5)  # far from the identity, so leaving it out shows
    folder = tmp_path_factory.mktemp("simcse") / "best"
    st.save(str(folder))
    return folder


@pytest.fixture(scope="module")
def mean_normalized(tiny_models, tmp_path_factory):
    """A tiny model saved as all-MiniLM-L6-v2's pipeline is: Transformer, Pooling(mean), Normalize."""
    from sentence_transformers import SentenceTransformer, models

    word = models.Transformer(str(tiny_models["bert"]))
    pooling = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="mean")
    folder = tmp_path_factory.mktemp("minilm_like") / "model"
    SentenceTransformer(modules=[word, pooling, models.Normalize()], device="cpu").save(str(folder))
    return folder


def test_the_own_pipeline_is_read_from_the_sentence_transformers_config(kept_mlp, mean_normalized, tiny_models):
    from trainables.encoders.st_folder import own_pipeline

    simcse = own_pipeline(kept_mlp)
    assert (simcse.pooling, simcse.head, simcse.source, simcse.name) == ("cls", ("2_Dense",), "model", "cls+dense")
    assert "its own pooling cls then its 2_Dense" in simcse.says()
    bare = own_pipeline(tiny_models["bert"])  # no sentence-transformers config: mean, and it says so
    assert (bare.name, bare.source) == ("mean", "default") and "no sentence-transformers config" in bare.says()
    minilm = own_pipeline(mean_normalized)  # Transformer, Pooling(mean), Normalize: a cosine is the same
    assert (minilm.name, minilm.head, minilm.source) == ("mean", (), "model")


def test_a_pipeline_the_project_cannot_compute_is_refused_in_one_line(kept_mlp, tmp_path):
    import shutil

    from trainables.encoders.st_folder import own_pipeline

    folder = tmp_path / "odd"
    shutil.copytree(kept_mlp, folder)
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps([*modules, {"idx": 3, "path": "3_LN", "type": "x.LayerNorm"}]))
    with pytest.raises(SweepInputError, match=r"ends with LayerNorm.*--pooling mean, cls or max") as refused:
        own_pipeline(folder)
    assert "\n" not in str(refused.value)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "weightedmean"}))
    with pytest.raises(SweepInputError, match="pools in a way other than mean, cls or max"):
        own_pipeline(folder)


class FewSentences:
    """A suite of a few sentences (the stage reads only its sentences and checksums)."""

    sentences = SENTENCES * 3
    checksums = {"few": "0"}


@pytest.mark.sweep  # 3 s or more on a busy machine: three models saved and loaded
@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
def test_the_embeddings_stage_scores_a_kept_mlp_as_sentence_transformers_encodes_it(
    pooling, tiny_models, tmp_path, data_dir, monkeypatch
):
    """The stage's `<pooling>+dense` embeddings of the last layer equal the saved model's own encode; leaving
    the layer out (the bare pooling) does not."""
    import torch
    from sentence_transformers import SentenceTransformer

    from trainables.evaluation import layer_embeddings, sets
    from trainables.evaluation.zero_shot import pipelines
    from trainables.methods.tsdae.training import sentence_model, simcse_training_model

    monkeypatch.setattr(sets, "load_suite", lambda names, data_dir: FewSentences())

    st = simcse_training_model(sentence_model(tiny_models["bert"], pooling, 64), "keep")
    torch.nn.init.normal_(st[2].linear.weight, std=0.5)
    folder = tmp_path / "best"
    st.save(str(folder))
    (own,) = pipelines(folder, ["own"])
    suite = FewSentences()
    names = [own.name, pooling]
    depth = st[0].auto_model.config.num_hidden_layers
    layers = [0, depth]
    spec = layer_embeddings.stage_spec("m", folder, layers, names, ["stsb"], 64, 32, tmp_path, data_dir, suite, None,
                                       head=own.head)  # fmt: skip
    out = tmp_path / "stage"
    out.mkdir()
    layer_embeddings.compute(spec, out)
    sentences = suite.sentences
    expected = SentenceTransformer(str(folder), device="cpu").encode(sentences, convert_to_numpy=True)
    with_head, _ = layer_embeddings.load(out, depth, own.name)
    without, _ = layer_embeddings.load(out, depth, pooling)
    np.testing.assert_allclose(with_head, expected, atol=1e-4)
    assert not np.allclose(without, expected, atol=1e-2)
    assert layer_embeddings.load(out, 0, own.name)[0].shape == without.shape  # the head runs at every layer


@pytest.mark.sweep  # 3 s or more: it reads the real STS-B
def test_the_plan_scores_each_model_by_its_own_pipeline_unless_a_pooling_is_asked(
    kept_mlp, tiny_models, data_dir, tmp_path, capsys
):
    from sweeps.engine.runner import parser_for
    from trainables.core.method import PlanContext
    from trainables.methods.evaluate.method import Evaluate

    def plan(*flags):
        args = parser_for("evaluate").parse_args(["--sets", "stsb", "--data-dir", str(data_dir), *flags])
        return Evaluate.plan(args, PlanContext(str(tmp_path / "runs"), None))

    models = f"{kept_mlp},{tiny_models['bert']}"
    planned = plan("--models", models)
    said = capsys.readouterr().out
    picked = {(c["model"], c["pooling"], c.get("pooling_from")) for c in planned.configs}
    assert picked == {(str(kept_mlp), "cls+dense", "model"), (tiny_models["bert"], "mean", "default")}
    assert f"{kept_mlp}: scored with its own pooling cls then its 2_Dense" in said
    assert "mean pooling (it has no sentence-transformers config)" in said
    heads = {tuple(spec["config"].get("head") or ()) for spec in planned.stages.values()}
    assert heads == {("2_Dense",), ()}
    asked = plan("--models", str(kept_mlp), "--pooling", "mean,own,cls")
    assert [(c["pooling"], c.get("pooling_from")) for c in asked.configs] == [
        ("mean", None),
        ("cls+dense", "model"),
        ("cls", None),
    ]
    assert "pooling_from" not in plan("--models", str(kept_mlp), "--pooling", "cls").configs[0]


def test_the_dry_run_counts_the_models_own_pipeline_once(kept_mlp, mean_normalized):
    from sweeps.engine.runner import parser_for
    from trainables.methods.evaluate.method import Evaluate

    def trials(*flags):
        return Evaluate.estimate(parser_for("evaluate").parse_args(list(flags))).trials

    assert trials("--models", str(kept_mlp), "--pooling", "own,cls,cls") == 2
    assert trials("--models", str(mean_normalized), "--pooling", "own,mean") == 1  # its own is mean
    assert trials("--models", f"runs:/{'a' * 32}", "--pooling", "own,mean") == 2  # not here: as asked


@pytest.mark.slow
@pytest.mark.mteb
def test_mteb_names_the_bare_hub_id_only_for_its_own_pipeline():
    from trainables.evaluation.mteb_encoder import model_name

    assert model_name(MINILM, 6, "mean", 6, own=True) == MINILM
    for layer, pooling, own in ((3, "mean", True), (6, "cls", False), (6, "mean", False), (0, "mean", True)):
        name = model_name(MINILM, layer, pooling, 6, own=own)
        assert name != MINILM and name.startswith("embsweep/") and MINILM not in name, name
    assert model_name(MINILM, 3, "mean", 6, own=True) == "embsweep/sentence-transformers-all-MiniLM-L6-v2-L3"
    assert model_name(MINILM, 6, "cls", 6, own=False) == "embsweep/sentence-transformers-all-MiniLM-L6-v2-cls"
    assert model_name("runs:/0123abcd", None, "cls+dense", None, own=True) == "embsweep/run-0123abcd"
    assert model_name("runs:/0123abcd", None, "mean", None, own=False) == "embsweep/run-0123abcd-mean"
    assert model_name("/some/where/best", 2, "mean", None, own=True) == "embsweep/best-L2"
    names = {model_name(MINILM, layer, p, 6, own=p == "mean") for layer in range(7) for p in ("mean", "cls", "max")}
    assert len(names) == 21


@pytest.mark.slow
@pytest.mark.mteb
def test_an_mteb_encoder_of_a_kept_mlp_encodes_as_the_model_and_is_named_for_it(kept_mlp):
    from sentence_transformers import SentenceTransformer

    from trainables.evaluation.mteb_encoder import from_reference

    expected = SentenceTransformer(str(kept_mlp), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    own = from_reference(str(kept_mlp))
    np.testing.assert_allclose(own.embed(SENTENCES), expected, atol=1e-4)
    assert own.mteb_model_meta.name == "embsweep/best"
    asked = from_reference(str(kept_mlp), None, "cls")
    assert not np.allclose(asked.embed(SENTENCES), expected, atol=1e-2)
    assert asked.mteb_model_meta.name == "embsweep/best-cls"
    truncated = from_reference(str(kept_mlp), 1)
    assert truncated.mteb_model_meta.name == "embsweep/best-L1"


@pytest.mark.slow
@pytest.mark.mteb
def test_an_mteb_export_of_a_truncated_layer_never_carries_the_bare_hub_id():
    import pandas as pd

    from analysis.mteb_export import run_identity

    def name(**run):
        base = {"model": MINILM, "method": "evaluate", "run_id": "a" * 32, "layer": 6, "pooling": "mean"}
        return run_identity(pd.Series({**base, **run}))[0]

    assert name(pooling_from="model") == MINILM  # its own pipeline at its last layer
    assert name() == MINILM  # recorded before `pooling_from`: mean is all-MiniLM-L6-v2's own pooling
    runs = ({"layer": 3, "pooling_from": "model"}, {"layer": 0}, {"pooling": "cls"}, {"pooling": "mean+dense"})
    for run in runs:
        assert MINILM not in name(**run), run
    assert name(model="runs:/" + "c" * 32, layer=None, pooling_from="model") == "embsweep/run-" + "c" * 32
    trained = run_identity(pd.Series({"model": MINILM, "method": "tmft", "run_id": "b" * 32, "layer": 6, "seed": 0}))
    assert MINILM not in trained[0] and trained[2] == MINILM
    simcse = {"model": MINILM, "method": "tsdae", "objective": "simcse", "run_id": "d" * 32, "seed": 0, "sweep": "w"}
    assert run_identity(pd.Series(simcse))[:2] == ("embsweep/w-tsdae-simcse-all-MiniLM-L6-v2-s0", "d" * 32)


@pytest.mark.sweep
def test_a_simcse_run_kept_with_its_mlp_is_rescored_by_evaluate_to_its_kept_test_score(sweep_env, tiny_models, capsys):
    """The Done-when check on a tiny BERT: a SimCSE trial (the TSDAE paper's settings: its MLP kept at test
    time) scores STS-B test at the end; `evaluate.py --models runs:/<id>` re-scores its kept model by the
    model's own pipeline (CLS, then the MLP) to within 0.05, and says so; asked for mean pooling, it differs."""
    from mlflow_helpers import runs_by_role

    from sweeps import evaluate, tsdae

    flags = ["--objective", "simcse", "--models", tiny_models["bert"], "--corpus", "wiki", "--max-sentences", "64"]
    flags += ["--steps", "4", "--eval-steps", "2", "--batch-size", "8", "--seeds", "0", "--eval-sets", "stsb"]
    assert tsdae.main([*flags, "--name", "simcse", *sweep_env["base"]]) == 0
    (trial,) = runs_by_role(sweep_env["uri"])[1]
    assert trial.data.params["mlp"] == "keep"
    kept = trial.data.metrics["stsb_spearman"]
    reference = f"runs:/{trial.info.run_id}"
    storage = ["--storage-path", str(sweep_env["tmp"] / "evaluated")]
    base = [f for f in sweep_env["base"] if f not in sweep_env["base"][:2]]
    assert evaluate.main(["--models", reference, "--sets", "stsb", "--name", "again", *storage, *base]) == 0
    assert f"{reference}: scored with its own pooling cls then its 2_Dense" in capsys.readouterr().out
    assert evaluate.main(["--models", reference, "--sets", "stsb", "--pooling", "mean", "--name", "mean", *storage,
                          *base]) == 0  # fmt: skip
    scored = {
        r.data.params["pooling"]: r.data.metrics["stsb_spearman"]
        for r in runs_by_role(sweep_env["uri"])[1]
        if r.data.params.get("method") == "evaluate"
    }
    assert scored["cls+dense"] == pytest.approx(kept, abs=0.05)
    assert abs(scored["mean"] - kept) > 0.05


def adaptive_rows(seeds=(0, 1)) -> list[dict]:
    """Finished adaptive-layer trials as they log: each layer's scores, and their mean under the contract's names."""
    rows = []
    for seed in seeds:
        layers = {k: 60.0 + 3 * k + seed for k in range(7)}
        row = {"method": "adaptive-layer", "model": MINILM, "task": "stsb", "seed": seed}
        for k, score in layers.items():
            row[f"layer{k}_test_spearman_at_best_dev"] = score
            row[f"layer{k}_dev_spearman_at_best_dev"] = score + 5
        mean = float(np.mean(list(layers.values())))
        row.update(best_dev_spearman=mean + 5, test_spearman_at_best_dev=mean, test_pearson_at_best_dev=mean + 1)
        rows.append(row)
    return rows


@pytest.mark.sweep  # 3 s or more: it imports the sweep engine
def test_the_adaptive_layer_sweeps_console_table_names_its_scores_as_the_mean_over_layers():
    import pandas as pd

    from sweeps.engine.runner import parser_for
    from sweeps.engine.summary import summary_table
    from trainables.methods.adaptive_layer.method import AdaptiveLayer

    contract = AdaptiveLayer.metrics(parser_for("adaptive-layer").parse_args([]))
    assert contract.params()["metric_averaged_over"] == "layers"
    frame = pd.DataFrame([{f"config/{k}": r.pop(k) for k in ("model", "seed")} | r for r in adaptive_rows()])
    header = summary_table(frame, contract).splitlines()[1]
    assert "dev Spearman (mean over layers)" in header and "test Spearman (mean over layers)" in header, header
    plain = summary_table(frame, type(contract)(**{**vars(contract), "averaged_over": ""}))
    assert "mean over" not in plain


@pytest.mark.sweep  # 3 s or more: a whole report
@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "logged-before-it"])
def test_the_reports_every_model_table_names_the_adaptive_layer_mean_as_a_mean(recorded, tmp_path):
    from analysis_helpers import log_runs

    from analysis.report import build_report
    from sweeps.engine.runner import parser_for
    from trainables.methods.adaptive_layer.method import AdaptiveLayer

    contract = AdaptiveLayer.metrics(parser_for("adaptive-layer").parse_args([])).params()
    if not recorded:
        del contract["metric_averaged_over"]
    uri = log_runs(tmp_path, contract, adaptive_rows())
    report = build_report(uri, tmp_path / "report")
    table = (tmp_path / "report" / "tables" / "scores_adaptive-layer_stsb.md").read_text()
    header = table.splitlines()[0]
    for score in ("best_dev_spearman", "test_spearman_at_best_dev", "test_pearson_at_best_dev"):
        assert f"| {score} (mean over layers) |" in header, header
    assert "test_spearman_at_best_dev (mean over layers)" in report.index.read_text()


@pytest.mark.parametrize("case", ["unknown pooling", "pipeline not computed"])
def test_a_pooling_evaluate_cannot_score_is_one_line_exit_2_nothing_written(case, kept_mlp, tmp_path, data_dir, capsys):
    import shutil

    from sweeps import evaluate

    folder = tmp_path / "odd"
    shutil.copytree(kept_mlp, folder)
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps([*modules, {"idx": 3, "path": "3_LN", "type": "x.LayerNorm"}]))
    flags = ["--pooling", "avg"] if case == "unknown pooling" else []
    runs = tmp_path / "runs"
    argv = ["--models", str(folder), "--sets", "stsb", "--data-dir", str(data_dir), "--storage-path", str(runs)]
    code = evaluate.main([*argv, *flags, "--mlflow-uri", f"sqlite:///{runs / 'mlflow.db'}"])
    err = capsys.readouterr().err
    message = "--pooling unknown 'avg'" if flags else "ends with LayerNorm"
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not runs.exists()
