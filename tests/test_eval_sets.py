"""The evaluation suite: known answers on a hand-made SentEval-layout set, the layout's rules and
errors, the real data's pair counts, one-pass layer embeddings against per-layer truncated
forwards, and (slow) the published MTEB scores of the real models."""

import pickle
import re
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
    "beta": [
        ("c1", "d1 caf\ufffd", 0.2, "5.0"),
        ("c2", "d2", 0.3, "2.0"),
        ("c3", "d3", 0.8, "0.5"),
        ("c4", "d4", 0.6, "3.5"),
    ],
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
    assert sum(map(len, scored.values())) == len(suite.sets["sts15"]) == 7
    cos = {k: [r[2] for r in rows] for k, rows in scored.items()}
    gold = {k: [float(r[3]) for r in rows] for k, rows in scored.items()}
    pooled = spearmanr(cos["alpha"] + cos["beta"], gold["alpha"] + gold["beta"]).statistic * 100
    per_subset = [spearmanr(cos[k], gold[k]).statistic * 100 for k in ("alpha", "beta")]
    assert scores["sts15_spearman"] == pytest.approx(pooled)
    assert scores["sts15_pearson"] == pytest.approx(
        pearsonr(cos["alpha"] + cos["beta"], gold["alpha"] + gold["beta"]).statistic * 100
    )
    assert scores["sts15_spearman_mean"] == pytest.approx(np.mean(per_subset))
    sizes = [len(scored[k]) for k in ("alpha", "beta")]
    assert sizes[0] != sizes[1]  # SentEval's weighted mean differs from the plain one here
    assert scores["sts15_spearman_wmean"] == pytest.approx(np.dot(per_subset, sizes) / sum(sizes))
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
    (folder / "STS.gs.beta.txt").write_text("5.0\n2.0\n0.25\n3.5\n")
    assert load_suite(["sts15"], tmp_path).checksums["sts15"] != suite.checksums["sts15"]


def test_a_missing_set_and_a_torn_file_are_named(tmp_path):
    with pytest.raises(SweepInputError, match=r"sts16: no folder STS16-en-test under .*STS.input.<subset>.txt"):
        load_suite(["sts16"], tmp_path)
    with pytest.raises(SweepInputError, match="unknown evaluation set 'sts99'"):
        load_suite(["sts99"], tmp_path)
    folder = write_year(tmp_path)
    (folder / "STS.gs.beta.txt").write_text("1.0\n")
    with pytest.raises(DataFormatError, match=r"STS.gs.beta.txt: 1 gold lines but 4 sentence pairs"):
        load_suite(["sts15"], tmp_path)
    (folder / "STS.gs.beta.txt").write_text("1.0\nmany\n2.0\n3.0\n")
    with pytest.raises(DataFormatError, match=r"STS.gs.beta.txt, line 2: gold score 'many'"):
        load_suite(["sts15"], tmp_path)


def test_copies_of_a_year_must_agree(tmp_path):
    folder = write_year(tmp_path)
    shutil.copytree(folder, tmp_path / "elsewhere" / folder.name)
    assert len(load_suite(["sts15"], tmp_path).sets["sts15"]) == 7
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


# Published MTEB scores: cosine Spearman, mean pooling. all-MiniLM-L6-v2's (STS12-14, STS-B, SICK-R) are checked
# through a whole zero-shot sweep in tests/test_mteb_export.py, with the same tolerance.
MTEB = [("sentence-transformers/all-mpnet-base-v2", "stsb", 83.42)]


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


# --- gold that cannot be scored: refused when the set is loaded -----------------------------------------------
def released_copy(data_dir, tmp_path, name: str) -> Path:
    """A copy of the released folder of set `name` under tmp_path/data, in the same layout; its file to corrupt."""
    from trainables.evaluation.sets import find_sts_year

    if name == "stsb":
        folder = shutil.copytree(data_dir / "stsbenchmark", tmp_path / "data" / "stsbenchmark")
        return folder / "sts-test.csv"
    if name == "sickr":
        folder = shutil.copytree(data_dir / "sick", tmp_path / "data" / "sick")
        return folder / "SICK_test_annotated.txt"
    source = find_sts_year(data_dir, int(name[3:]))
    folder = shutil.copytree(source, tmp_path / "data" / source.parent.name / source.name)
    return folder / "STS.gs.MSRpar.txt"


def set_gold(path: Path, value: str, line_no: int | None = None) -> None:
    """Write `value` as the gold score of line `line_no` (1-based; None: every line after a header) of a
    released file, its line endings kept."""
    column = {"sts-test.csv": 4, "SICK_test_annotated.txt": 3}.get(path.name, 0)
    lines = path.read_bytes().split(b"\n")
    first = 1 if path.name == "SICK_test_annotated.txt" else 0
    for index in [line_no - 1] if line_no else range(first, len(lines)):
        if lines[index].strip():
            fields = lines[index].removesuffix(b"\r").split(b"\t")
            fields[column] = value.encode()
            lines[index] = b"\t".join(fields) + (b"\r" if lines[index].endswith(b"\r") else b"")
    path.write_bytes(b"\n".join(lines))


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("sts12", "9.0", "STS.gs.MSRpar.txt, line 5: gold score 9 is outside the set's scale 0-5"),
        ("sts12", "-40", "STS.gs.MSRpar.txt, line 5: gold score -40 is outside the set's scale 0-5"),
        ("stsb", "9.0", "sts-test.csv, line 5: score 9.0 is outside 0-5"),
        ("sickr", "0.5", "SICK_test_annotated.txt, line 5: relatedness score 0.5 is outside 1-5"),
    ],
)
def test_gold_outside_the_sets_scale_is_refused_naming_file_line_and_value(data_dir, tmp_path, name, value, message):
    set_gold(released_copy(data_dir, tmp_path, name), value, line_no=5)
    with pytest.raises(DataFormatError, match=re.escape(message)):
        load_suite([name], tmp_path / "data")


def test_constant_or_blank_gold_is_refused_at_load_time(data_dir, tmp_path):
    """Constant gold has no correlation: the subset and its set's <set>_spearman_mean would be NaN.
    All-blank gold leaves no pair: the trial failed with scipy's "length at least 2", thrice."""
    gold = released_copy(data_dir, tmp_path, "sts12")
    lines = gold.read_text().splitlines()
    gold.write_text("3.0\n" * len(lines))
    with pytest.raises(DataFormatError, match=r"STS.gs.MSRpar.txt: gold 3 throughout its 750 pairs"):
        load_suite(["sts12"], tmp_path / "data")
    gold.write_text("\n" * len(lines))
    with pytest.raises(DataFormatError, match=r"STS.gs.MSRpar.txt: 0 scored pairs \(a correlation needs two or more\)"):
        load_suite(["sts12"], tmp_path / "data")
    gold.write_text("2.5\n" + "\n" * (len(lines) - 1))
    with pytest.raises(DataFormatError, match=r"STS.gs.MSRpar.txt: 1 scored pair "):
        load_suite(["sts12"], tmp_path / "data")


def test_constant_stsb_and_sick_gold_is_refused(data_dir, tmp_path):
    for name in ("stsb", "sickr"):
        path = released_copy(data_dir, tmp_path / name, name)
        set_gold(path, "3.0")
        with pytest.raises(DataFormatError, match=f"{path.name}: gold 3 throughout"):
            load_suite([name], tmp_path / name / "data")


def test_a_sample_that_leaves_constant_gold_asks_to_raise_it():
    from trainables.evaluation.sets import check_scorable

    check_scorable([1.0, 2.0], "x", "--max-eval-samples 2")
    with pytest.raises(SweepInputError, match=r"--max-eval-samples 2 leaves the stsb dev split with gold 4 throughout"):
        check_scorable([4.0, 4.0], "the stsb dev split", "--max-eval-samples 2")
    with pytest.raises(SweepInputError, match=r"1 scored pair \(a correlation needs two or more\); raise --max-eval"):
        check_scorable([4.0], "the stsb dev split", "--max-eval-samples 1")


@pytest.mark.parametrize("name", eval_set_names())
def test_every_registered_set_has_a_kind_a_main_metric_a_report_name_and_a_documented_source(name):
    """Generated from the registry: a new set is held to what the suite, the report and the docs need."""
    from analysis.names import score_name, set_names
    from trainables.evaluation.sets import get_eval_set, main_metric
    from trainables.evaluation.task_kinds import TASK_KINDS

    found = get_eval_set(name)
    assert found.kind in TASK_KINDS.names(), found.kind
    assert main_metric(name).startswith(f"{name}_")
    assert name in set_names() and score_name(main_metric(name)) != main_metric(name)
    docs = Path(__file__).resolve().parents[1] / "docs"
    pages = [*(docs / "methods").glob("*.md"), docs / "data.md"]
    assert f"`{name}`" in "".join(p.read_text() for p in pages), name
