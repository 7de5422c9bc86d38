"""The evaluation suite: known answers on a hand-made SentEval-layout set, the registry's rules,
the real data's pair counts, one-pass layer embeddings against per-layer truncated forwards, and
(slow) the published MTEB scores of the real models."""
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import pearsonr, spearmanr

from trainables.errors import DataFormatError, SweepInputError
from trainables.eval_sets import eval_set_names, load_suite

# Two subsets; unit-circle embeddings make each pair's cosine a chosen number.
PAIRS = {
    "alpha": [("a1", "b1", 0.9, "4.0"), ("a2", "b2", 0.5, "3.0"), ("a3", "b3", 0.1, "1.0"), ("a4", "b4", 0.7, "")],
    "beta": [("c1", "d1", 0.2, "5.0"), ("c2", "d2", 0.3, "2.0"), ("c3", "d3", 0.8, "0.5")],
}


def write_year(root: Path, year: int = 15) -> Path:
    folder = root / "nested" / "deeper" / f"STS{year}-en-test"
    folder.mkdir(parents=True)
    for subset, rows in PAIRS.items():
        (folder / f"STS.input.{subset}.txt").write_text("".join(f"{a}\t{b}\n" for a, b, _, _ in rows))
        (folder / f"STS.gs.{subset}.txt").write_text("".join(f"{g}\n" for *_, g in rows))
    (folder / "STS.gs.withheld.txt").write_text("1.0\n2.0\n")  # gold without input: skipped
    return folder


def embeddings_for(suite) -> np.ndarray:
    """Each first sentence at angle 0, its partner at the angle whose cosine is the chosen one."""
    cosine = {a: 1.0 for rows in PAIRS.values() for a, *_ in rows}
    cosine.update({b: c for rows in PAIRS.values() for _, b, c, _ in rows})
    return np.array([[cosine[s], np.sqrt(1 - cosine[s] ** 2)] for s in suite.sentences])


def test_known_answers_pooled_against_mean_over_subsets(tmp_path):
    write_year(tmp_path)
    suite = load_suite(["sts15"], tmp_path)
    scores = suite.score(embeddings_for(suite))
    scored = {k: [r for r in rows if r[3]] for k, rows in PAIRS.items()}  # the blank gold line is skipped
    assert sum(map(len, scored.values())) == len(suite.sets["sts15"]) == 6
    cos = {k: [r[2] for r in rows] for k, rows in scored.items()}
    gold = {k: [float(r[3]) for r in rows] for k, rows in scored.items()}
    pooled = spearmanr(cos["alpha"] + cos["beta"], gold["alpha"] + gold["beta"]).statistic * 100
    per_subset = [spearmanr(cos[k], gold[k]).statistic * 100 for k in ("alpha", "beta")]
    assert scores["sts15_spearman"] == pytest.approx(pooled)
    assert scores["sts15_pearson"] == pytest.approx(pearsonr(cos["alpha"] + cos["beta"], gold["alpha"] + gold["beta"]).statistic * 100)
    assert scores["sts15_spearman_mean"] == pytest.approx(np.mean(per_subset))
    assert scores["sts15_alpha_spearman"] == pytest.approx(per_subset[0])
    assert abs(scores["sts15_spearman"] - scores["sts15_spearman_mean"]) > 1  # the two rules differ here
    assert "sts15_withheld_spearman" not in scores and scores["mean_spearman"] == scores["sts15_spearman"]


def test_a_missing_set_and_a_torn_file_are_named(tmp_path):
    with pytest.raises(SweepInputError, match="sts16: no folder STS16-en-test"):
        load_suite(["sts16"], tmp_path)
    with pytest.raises(SweepInputError, match="unknown evaluation set 'sts99'"):
        load_suite(["sts99"], tmp_path)
    folder = write_year(tmp_path)
    (folder / "STS.gs.beta.txt").write_text("1.0\n")
    with pytest.raises(DataFormatError, match="STS.gs.beta.txt"):
        load_suite(["sts15"], tmp_path)


def test_registry_and_real_pair_counts(data_dir):
    assert {"sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "stsb_dev", "sickr", "sickr_all"} <= set(eval_set_names())
    suite = load_suite(["sts12", "sts13", "sts14", "stsb", "stsb_dev", "sickr", "sickr_all"], data_dir)
    counts = {name: len(data) for name, data in suite.sets.items()}
    assert counts == {"sts12": 3108, "sts13": 1500, "sts14": 3750, "stsb": 1379, "stsb_dev": 1500, "sickr": 4927, "sickr_all": 9927}
    assert len(suite.sets["sts13"].subsets) == 3  # SMT has no input file


@pytest.mark.parametrize("kind", ["bert", "electra-generator"])
def test_one_pass_equals_each_layers_truncated_forward(kind, tiny_models):
    from transformers import AutoModel, AutoTokenizer

    from trainables.encoders import truncate
    from trainables.zero_shot import pool, pooled_layers

    model, tokenizer = AutoModel.from_pretrained(tiny_models[kind]).eval(), AutoTokenizer.from_pretrained(tiny_models[kind])
    sentences = ["A man is playing a guitar.", "Two dogs run.", "A woman is slicing an onion on a board.", "Hi"]
    depth = model.config.num_hidden_layers
    layers = list(range(depth + 1))
    one_pass = pooled_layers(model, tokenizer, sentences, layers, ["mean", "cls"], batch_size=3)
    encoded = tokenizer(sentences, padding=True, return_tensors="pt")
    for layer in layers:
        with torch.no_grad():
            hidden = truncate(model, layer)(**encoded).last_hidden_state
        for pooling in ("mean", "cls"):
            np.testing.assert_allclose(one_pass[(layer, pooling)], pool(hidden, encoded["attention_mask"], pooling).numpy(), atol=1e-5)
    assert not np.allclose(one_pass[(depth, "mean")], one_pass[(depth, "cls")])


MTEB = [  # published MTEB scores: cosine Spearman, mean pooling
    ("sentence-transformers/all-MiniLM-L6-v2", "sts12", 72.37), ("sentence-transformers/all-MiniLM-L6-v2", "sts13", 80.60),
    ("sentence-transformers/all-MiniLM-L6-v2", "sts14", 75.59), ("sentence-transformers/all-MiniLM-L6-v2", "stsb", 82.03),
    ("sentence-transformers/all-MiniLM-L6-v2", "sickr_all", 77.58), ("sentence-transformers/all-mpnet-base-v2", "stsb", 83.42),
]


@pytest.mark.slow
@pytest.mark.parametrize("model_id", sorted({m for m, *_ in MTEB}))
def test_real_models_reproduce_published_mteb_scores(model_id, data_dir):
    from transformers import AutoModel, AutoTokenizer

    from trainables.encoders import resolve_model
    from trainables.zero_shot import default_max_length, encode_sentences

    path = resolve_model(model_id)  # installed by `embsweep-assets install <id>`
    expected = {name: score for m, name, score in MTEB if m == model_id}
    suite = load_suite(sorted(expected), data_dir)
    embeddings = encode_sentences(AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path), suite.sentences,
                                  "mean", batch_size=128, max_length=default_max_length(path))
    scores = suite.score(embeddings)
    for name, published in expected.items():
        assert scores[f"{name}_spearman"] == pytest.approx(published, abs=0.05), (name, scores[f"{name}_spearman"])
