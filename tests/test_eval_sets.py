"""The evaluation suite: known answers on a hand-made SentEval-layout set, the layout's rules and
errors, the real data's pair counts, one-pass layer embeddings against per-layer truncated
forwards, and (slow) the published MTEB scores of the real models."""

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import pearsonr, spearmanr

from trainables.core.errors import DataFormatError, SweepInputError
from trainables.evaluation.sets import eval_set_names, load_suite

# Two subsets of (sentence 1, sentence 2, cosine of their embeddings, gold line). The texts hold
# what a careless reader breaks: quotes (csv quoting), U+2028 and a form feed (str.splitlines),
# an undecodable byte (written as \xff in place of U+FFFD, read back as U+FFFD).
PAIRS = {
    "alpha": [
        ('a1 "quoted', "b1", 0.9, "4.0"),
        ("a2", "b2\u2028x", 0.5, "3.0"),
        ("a3\x0c", "b3", 0.1, "1.0"),
        ("a4", "b4", 0.7, ""),
    ],
    "beta": [("c1", "d1 caf\ufffd", 0.2, "5.0"), ("c2", "d2", 0.3, "2.0"), ("c3", "d3", 0.8, "0.5")],
}
CRLF = {"alpha"}  # line endings of a subset's files: CRLF here, LF in the other


def write_year(root: Path, year: int = 15) -> Path:
    folder = root / "nested" / "deeper" / f"STS{year}-en-test"
    folder.mkdir(parents=True)
    for subset, rows in PAIRS.items():
        end = "\r\n" if subset in CRLF else "\n"
        text = "".join(f"{a}\t{b}{end}" for a, b, _, _ in rows)
        (folder / f"STS.input.{subset}.txt").write_bytes(text.encode().replace("\ufffd".encode(), b"\xff"))
        (folder / f"STS.gs.{subset}.txt").write_bytes("".join(f"{g}{end}" for *_, g in rows).encode())
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
    assert set(suite.sentences) == {s for rows in PAIRS.values() for a, b, _, g in rows if g for s in (a, b)}
    scores = suite.score(embeddings_for(suite))
    scored = {k: [r for r in rows if r[3]] for k, rows in PAIRS.items()}  # the blank gold line is skipped
    assert sum(map(len, scored.values())) == len(suite.sets["sts15"]) == 6
    cos = {k: [r[2] for r in rows] for k, rows in scored.items()}
    gold = {k: [float(r[3]) for r in rows] for k, rows in scored.items()}
    pooled = spearmanr(cos["alpha"] + cos["beta"], gold["alpha"] + gold["beta"]).statistic * 100
    per_subset = [spearmanr(cos[k], gold[k]).statistic * 100 for k in ("alpha", "beta")]
    assert scores["sts15_spearman"] == pytest.approx(pooled)
    assert scores["sts15_pearson"] == pytest.approx(
        pearsonr(cos["alpha"] + cos["beta"], gold["alpha"] + gold["beta"]).statistic * 100
    )
    assert scores["sts15_spearman_mean"] == pytest.approx(np.mean(per_subset))
    assert scores["sts15_alpha_spearman"] == pytest.approx(per_subset[0])
    assert scores["sts15_beta_spearman"] == pytest.approx(per_subset[1])
    assert abs(scores["sts15_spearman"] - scores["sts15_spearman_mean"]) > 1  # the two rules differ here
    assert "sts15_withheld_spearman" not in scores and scores["mean_spearman"] == scores["sts15_spearman"]


def test_the_suite_survives_pickling_and_its_checksum_follows_the_files_read(tmp_path):
    folder = write_year(tmp_path)
    suite = load_suite(["sts15"], tmp_path)
    copy = pickle.loads(pickle.dumps(suite))
    assert copy.sentences == suite.sentences and copy.score(embeddings_for(copy)) == suite.score(embeddings_for(suite))
    (folder / "STS.gs.withheld.txt").write_text("3.0\n")  # not read: same checksum
    assert load_suite(["sts15"], tmp_path).checksums == suite.checksums
    (folder / "STS.gs.beta.txt").write_text("5.0\n2.0\n0.25\n")
    assert load_suite(["sts15"], tmp_path).checksums["sts15"] != suite.checksums["sts15"]


def test_a_missing_set_and_a_torn_file_are_named(tmp_path):
    with pytest.raises(SweepInputError, match=r"sts16: no folder STS16-en-test under .*STS.input.<subset>.txt"):
        load_suite(["sts16"], tmp_path)
    with pytest.raises(SweepInputError, match="unknown evaluation set 'sts99'"):
        load_suite(["sts99"], tmp_path)
    folder = write_year(tmp_path)
    (folder / "STS.gs.beta.txt").write_text("1.0\n")
    with pytest.raises(DataFormatError, match=r"STS.gs.beta.txt: 1 gold lines but 3 sentence pairs"):
        load_suite(["sts15"], tmp_path)
    (folder / "STS.gs.beta.txt").write_text("1.0\nmany\n2.0\n")
    with pytest.raises(DataFormatError, match=r"STS.gs.beta.txt, line 2: gold score 'many'"):
        load_suite(["sts15"], tmp_path)


def test_copies_of_a_year_must_agree(tmp_path):
    folder = write_year(tmp_path)
    shutil.copytree(folder, tmp_path / "elsewhere" / folder.name)
    assert len(load_suite(["sts15"], tmp_path).sets["sts15"]) == 6
    (tmp_path / "elsewhere" / folder.name / "STS.gs.beta.txt").write_text("0.0\n0.0\n0.0\n")
    with pytest.raises(SweepInputError, match="2 different folders STS15-en-test"):
        load_suite(["sts15"], tmp_path)


def test_registry_and_real_pair_counts(data_dir):
    assert {"sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "stsb_dev", "sickr", "sickr_all"} <= set(
        eval_set_names()
    )
    suite = load_suite(["sts12", "sts13", "sts14", "stsb", "stsb_dev", "sickr", "sickr_all"], data_dir)
    counts = {name: len(data) for name, data in suite.sets.items()}
    assert counts == {
        "sts12": 3108,
        "sts13": 1500,
        "sts14": 3750,
        "stsb": 1379,
        "stsb_dev": 1500,
        "sickr": 4927,
        "sickr_all": 9927,
    }
    assert sorted(suite.sets["sts13"].subsets) == ["FNWN", "OnWN", "headlines"]  # SMT has no input file
    assert "ALL" not in suite.sets["sts12"].subsets
    assert len(set(suite.checksums.values())) == len(suite.sets)


def _tiny(tiny_models, kind):
    from transformers import AutoModel, AutoTokenizer

    return AutoModel.from_pretrained(tiny_models[kind]).eval(), AutoTokenizer.from_pretrained(tiny_models[kind])


SENTENCES = ["A man is playing a guitar.", "Two dogs run.", "A woman is slicing an onion on a board.", "Hi"]


@pytest.mark.parametrize("kind", ["bert", "electra-generator", "mpnet", "deberta-v2"])
def test_one_pass_equals_each_layers_truncated_forward(kind, tiny_models):
    from trainables.encoders.loading import truncate
    from trainables.evaluation.zero_shot import pool, pooled_layers

    model, tokenizer = _tiny(tiny_models, kind)
    if kind == "electra-generator":  # its embeddings are projected to the hidden size
        assert model.config.embedding_size != model.config.hidden_size
    depth = model.config.num_hidden_layers
    layers = list(range(depth + 1))
    one_pass = pooled_layers(model, tokenizer, SENTENCES, layers, ["mean", "cls"], batch_size=3)
    encoded = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    for layer in layers:
        with torch.no_grad():
            hidden = truncate(model, layer)(**encoded).last_hidden_state
        for pooling in ("mean", "cls"):
            np.testing.assert_allclose(
                one_pass[(layer, pooling)], pool(hidden, encoded["attention_mask"], pooling).numpy(), atol=1e-5
            )
    assert not np.allclose(one_pass[(depth, "mean")], one_pass[(depth, "mean")][::-1])  # rows are not all alike
    assert not np.allclose(one_pass[(depth, "mean")], one_pass[(depth, "cls")])


@pytest.mark.parametrize("layers", [[0], [1], [2, 0]])
def test_a_shallow_request_runs_a_truncated_copy_and_leaves_the_model_alone(layers, tiny_models):
    from trainables.evaluation.zero_shot import encode_sentences, pooled_layers

    model, tokenizer = _tiny(tiny_models, "bert")
    everything = pooled_layers(model, tokenizer, SENTENCES, [0, 1, 2, 3, 4], ["mean"])
    shallow = pooled_layers(model, tokenizer, SENTENCES, layers, ["mean"], batch_size=2)
    assert model.config.num_hidden_layers == 4 and len(model.encoder.layer) == 4
    assert sorted(shallow) == sorted((layer, "mean") for layer in layers)
    for key, embeddings in shallow.items():
        np.testing.assert_allclose(embeddings, everything[key], atol=1e-5)
    model.train()  # a trial in training: evaluated without dropout, then left training
    np.testing.assert_allclose(
        encode_sentences(model, tokenizer, SENTENCES, "mean"), everything[(4, "mean")], atol=1e-6
    )
    assert model.training
    with pytest.raises(SweepInputError, match=r"layers \[5\] are not within 0..4"):
        pooled_layers(model, tokenizer, SENTENCES, [2, 5], ["mean"])


def test_default_max_length(tiny_models, tmp_path):
    from transformers import AutoTokenizer

    from trainables.evaluation.zero_shot import default_max_length

    folder = tiny_models["bert"]
    assert default_max_length(folder) == 126  # the tiny tokenizer's limit
    unlimited = AutoTokenizer.from_pretrained(folder, model_max_length=int(1e30))
    assert default_max_length(tmp_path / "no-such-folder", unlimited) == 512
    shutil.copytree(folder, tmp_path / "st")
    (tmp_path / "st" / "sentence_bert_config.json").write_text('{"max_seq_length": 40, "do_lower_case": false}')
    assert default_max_length(tmp_path / "st") == 40


MTEB = [  # published MTEB scores: cosine Spearman, mean pooling
    ("sentence-transformers/all-MiniLM-L6-v2", "sts12", 72.37),
    ("sentence-transformers/all-MiniLM-L6-v2", "sts13", 80.60),
    ("sentence-transformers/all-MiniLM-L6-v2", "sts14", 75.59),
    ("sentence-transformers/all-MiniLM-L6-v2", "stsb", 82.03),
    ("sentence-transformers/all-MiniLM-L6-v2", "sickr_all", 77.58),
    ("sentence-transformers/all-mpnet-base-v2", "stsb", 83.42),
]


@pytest.mark.slow
@pytest.mark.parametrize("model_id", sorted({m for m, *_ in MTEB}))
def test_real_models_reproduce_published_mteb_scores(model_id, data_dir):
    from transformers import AutoModel, AutoTokenizer

    from trainables.encoders.loading import resolve_model
    from trainables.evaluation.zero_shot import encode_sentences

    path = resolve_model(model_id)  # installed by `embsweep-assets install <id>`
    expected = {name: score for m, name, score in MTEB if m == model_id}
    suite = load_suite(sorted(expected), data_dir)
    # max length: the folder's sentence_bert_config.json (256 for MiniLM, 384 for mpnet)
    embeddings = encode_sentences(
        AutoModel.from_pretrained(path).eval(),
        AutoTokenizer.from_pretrained(path),
        suite.sentences,
        "mean",
        batch_size=128,
    )
    scores = suite.score(embeddings)
    print({name: round(scores[f"{name}_spearman"], 2) for name in expected})
    for name, published in expected.items():
        assert scores[f"{name}_spearman"] == pytest.approx(published, abs=0.05), (name, scores[f"{name}_spearman"])
