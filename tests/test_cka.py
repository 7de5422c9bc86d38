"""Linear CKA: known properties, a hand-computed value, and the `cka` command end to end on two
tiny random models (pretrained and from sweep-style checkpoints), logged to MLflow."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.cka import gram_cka, linear_cka, stsb_test_sentences
from trainables.core.paths import default_data_dir


def _random(rng, n, d):
    return rng.normal(size=(n, d)) @ rng.normal(size=(d, d))  # correlated features


def _orthogonal(rng, d):
    q, r = np.linalg.qr(rng.normal(size=(d, d)))
    return q * np.sign(np.diag(r))


def test_cka_of_a_representation_with_itself_is_one():
    x = _random(np.random.default_rng(0), 30, 8)
    assert linear_cka(x, x) == pytest.approx(1.0)
    assert gram_cka(x @ x.T, x @ x.T) == pytest.approx(1.0)


def test_cka_is_invariant_to_rotation_and_isotropic_scaling_of_either_side():
    rng = np.random.default_rng(1)
    x, y = _random(rng, 40, 6), _random(rng, 40, 9)
    base = linear_cka(x, y)
    assert 0.0 < base < 1.0
    assert linear_cka(x @ _orthogonal(rng, 6), y) == pytest.approx(base)
    assert linear_cka(x, y @ _orthogonal(rng, 9)) == pytest.approx(base)
    assert linear_cka(3.7 * x, y) == pytest.approx(base)
    assert linear_cka(x, 0.01 * y) == pytest.approx(base)
    assert linear_cka(x + 5.0, y) == pytest.approx(base)  # centring removes a shared offset
    # ... but not to anisotropic scaling
    assert linear_cka(x * np.arange(1, 7), y) != pytest.approx(base, abs=1e-3)


def test_feature_space_and_gram_forms_agree():
    rng = np.random.default_rng(2)
    for n, d1, d2 in ((50, 5, 7), (6, 20, 30)):  # more rows than features, and fewer
        x, y = _random(rng, n, d1), _random(rng, n, d2)
        assert linear_cka(x, y) == pytest.approx(gram_cka(x @ x.T, y @ y.T))


def test_cka_on_a_tiny_matrix_by_hand():
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    y = np.array([[1.0], [2.0], [4.0]])
    n = 3
    h = np.eye(n) - np.ones((n, n)) / n  # the explicit centring matrix
    k, l = h @ (x @ x.T) @ h, h @ (y @ y.T) @ h
    expected = np.trace(k @ l) / math.sqrt(np.trace(k @ k) * np.trace(l @ l))
    # By hand: <K~, L~> = 17/9, ||K~||² = 10/9, ||L~||² = 196/9, so CKA = 17 / (14 sqrt 10).
    assert expected == pytest.approx(17 / (14 * math.sqrt(10)))
    assert linear_cka(x, y) == pytest.approx(expected, rel=1e-12)
    assert gram_cka(x @ x.T, y @ y.T) == pytest.approx(expected, rel=1e-12)


def test_test_sentences_unique_or_all():
    data = default_data_dir()
    assert len(stsb_test_sentences(data)) == 2758  # the authors' default: every sentence of every pair
    assert len(stsb_test_sentences(data, unique=True)) == 2552
    assert len(stsb_test_sentences(data, max_sentences=7)) == 7


# ---- end to end -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """Two tiny models of different widths, and a sweep-style checkpoint folder: for each model
    and layer 0..2, <trial>/trial.json + <trial>/encoder (the truncated encoder and tokenizer)."""
    from transformers import AutoTokenizer

    from trainables.encoders.loading import load_pretrained, truncate
    from trainables.encoders.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("cka")
    sentences = stsb_test_sentences(default_data_dir(), max_sentences=200)
    models = {
        kind: str(build_tiny_model(kind, root / kind, layers=2, hidden=32, sentences=sentences))
        for kind in ("bert", "electra-generator")
    }
    checkpoints = root / "sweep"
    for kind, path in models.items():
        full, tokenizer = load_pretrained(path), AutoTokenizer.from_pretrained(path)
        for layer in range(3):
            trial = checkpoints / f"tmft_{kind}_l{layer}_s0" / "checkpoint_000002"
            truncate(full, layer).save_pretrained(trial / "encoder")
            tokenizer.save_pretrained(trial / "encoder")
            trial.joinpath("trial.json").write_text(
                json.dumps({"model": path, "layer": layer, "seed": 0, "method": "tmft", "task": "stsb"})
            )
    return models, checkpoints


def _independent_cka(model_dir, other_dir, sentences, layer):
    """Layer-`layer` CKA recomputed with the encoders module and an explicit centring matrix."""
    import torch
    from transformers import AutoTokenizer

    from trainables.encoders.loading import encode, load_pretrained, truncate

    embeddings = []
    for path in (model_dir, other_dir):
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = truncate(load_pretrained(path), layer).eval()
        batch = tokenizer(sentences, padding=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            embeddings.append(encode(model, batch["input_ids"], batch["attention_mask"]).double().numpy())
    n = len(sentences)
    h = np.eye(n) - np.ones((n, n)) / n
    k, l = (h @ (e @ e.T) @ h for e in embeddings)
    return float(np.sum(k * l) / (np.linalg.norm(k) * np.linalg.norm(l)))


def test_cka_command_end_to_end(tiny_models, tmp_path, monkeypatch, capsys):
    from mlflow import MlflowClient

    from analysis.__main__ import main
    from analysis.loader import AnalysisError, load_runs

    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root (./mlruns) lands in tmp_path
    models, checkpoints = tiny_models
    a, b = models["bert"], models["electra-generator"]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "out"
    assert (
        main(
            [
                "cka",
                "--models",
                f"{a},{b}",
                "--checkpoints",
                str(checkpoints),
                "--data-dir",
                str(default_data_dir()),
                "--max-sentences",
                "12",
                "--out",
                str(out),
                "--mlflow-uri",
                uri,
            ]
        )
        == 0
    )

    frame = pd.read_csv(out / "cka.csv")
    pre, tuned = frame[frame["source"] == "pretrained"], frame[frame["source"] == "finetuned"]
    assert pre["layer"].tolist() == [0, 1, 2] and sorted(tuned["layer"]) == [0, 1, 2]
    assert frame["cka"].between(0, 1).all() and (frame["n_sentences"] == 12).all()
    # The checkpoints are truncated copies of the pretrained models: physically truncated, same numbers.
    np.testing.assert_allclose(tuned.sort_values("layer")["cka"], pre["cka"], atol=1e-6)
    sentences = stsb_test_sentences(default_data_dir(), max_sentences=12)
    assert pre.set_index("layer").at[1, "cka"] == pytest.approx(_independent_cka(a, b, sentences, 1), abs=1e-6)
    assert (out / "cka.png").read_bytes()[:4] == b"\x89PNG" and "<svg" in (out / "cka.svg").read_text()

    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name("cka").experiment_id])
    assert run.data.params["method"] == "cka" and run.data.tags["embsweep.role"] == "cka"
    assert {f.path for f in client.list_artifacts(run.info.run_id)} == {"cka.csv", "cka.png", "cka.svg"}
    history = client.get_metric_history(run.info.run_id, "cka_pretrained")
    assert sorted(m.step for m in history) == [0, 1, 2]
    with pytest.raises(AnalysisError, match="No trial runs"):  # a CKA run is not a trial
        load_runs(uri)
    assert "MLflow run" in capsys.readouterr().out


def test_cka_command_rejects_bad_input(tiny_models, tmp_path, capsys):
    from analysis.__main__ import main

    models, _ = tiny_models
    assert main(["cka", "--models", models["bert"], "--out", str(tmp_path)]) == 2
    assert "exactly two models" in capsys.readouterr().err
    assert main(["cka", "--models", f"{models['bert']},{tmp_path / 'nope'}", "--out", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_checkpoints_are_compared_at_their_best_dev_epoch(tmp_path):
    from analysis.cka import find_checkpoints

    for name, folders in (("with-best", ("encoder", "best")), ("older", ("encoder",))):
        trial = tmp_path / name / "checkpoint_000003"
        for folder in folders:
            (trial / folder).mkdir(parents=True)
            (trial / folder / "config.json").write_text("{}")
        (trial / "trial.json").write_text(json.dumps({"model": "m", "layer": 1, "seed": 0 if name == "older" else 1}))
    found = find_checkpoints(tmp_path).set_index("seed")
    assert found.loc[1, "weights"] == "best-dev" and found.loc[1, "encoder"].endswith("/best")
    assert found.loc[0, "weights"] == "last epoch" and found.loc[0, "encoder"].endswith("/encoder")
