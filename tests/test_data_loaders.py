"""MRPC, SICK, word-similarity and DAPT-corpus loaders: the real files in ../shared/data (counts,
quirks) and small malformed copies, whose errors must name the file and the line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from trainables.core.errors import DataFormatError, SweepInputError
from trainables.core.paths import default_data_dir
from trainables.data.mrpc import load_mrpc, mrpc_checksums
from trainables.data.sentences import (
    DAPT_SOURCES,
    dapt_corpus,
    dapt_corpus_checksum,
    parse_sources,
    read_allnli_sentences,
    read_nli_jsonl_sentences,
)
from trainables.data.sick import LABELS, load_sick, sick_checksums
from trainables.data.word_similarity import build_ws_dataset, load_word_pairs, split_indices, ws_checksum, ws_pairs


@pytest.fixture(scope="module")
def data_dir() -> Path:
    path = default_data_dir()
    if not (path / "mrpc").is_dir():
        pytest.skip(f"real datasets not found at {path} (set EMBSWEEP_DATA_DIR)")
    return path


def write(path: Path, text: str, encoding="utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode(encoding))
    return path


def assert_names(exc_info, path: Path, line: int | None):
    message = str(exc_info.value)
    assert path.name in message
    if line is not None:
        assert f"line {line}" in message
        assert exc_info.value.line == line


# ---------------------------------------------------------------- real files


def test_mrpc_real_files(data_dir):
    splits = load_mrpc(data_dir)
    assert {k: len(v) for k, v in splits.items()} == {"train": 3576, "dev": 500, "test": 1725}
    # train and test start with a byte-order mark, dev does not; all end lines with CRLF.
    assert splits["train"][0].sentence1.startswith("Amrozi accused his brother")
    assert splits["dev"][0].sentence1.startswith("Stocks have rallied")
    assert '"the witness"' in splits["train"][0].sentence1  # quotes kept verbatim
    assert not any(ex.sentence2.endswith("\r") for ex in splits["test"])
    assert sum(ex.score for ex in splits["train"]) == 2407
    assert {ex.score for split in splits.values() for ex in split} == {0.0, 1.0}
    assert set(mrpc_checksums(data_dir)) == {"train", "dev", "test"}


def test_sick_real_files(data_dir):
    splits = load_sick(data_dir)
    assert {k: len(v) for k, v in splits.items()} == {"train": 4500, "dev": 500, "test": 4927}
    counts = np.bincount([ex.label for ex in splits["train"]], minlength=3)
    assert dict(zip(LABELS, counts.tolist())) == {"ENTAILMENT": 1299, "NEUTRAL": 2536, "CONTRADICTION": 665}
    assert all(1.0 <= ex.score <= 5.0 for split in splits.values() for ex in split)
    assert splits["test"][-1].label == 1  # CRLF file: the label parses on the last line
    assert set(sick_checksums(data_dir)) == {"train", "dev", "test"}


def test_word_similarity_real_files(data_dir):
    rg = load_word_pairs(data_dir / "word-similarity" / "EN-RG-65.txt", 4.0)
    simverb = load_word_pairs(data_dir / "word-similarity" / "EN-SimVerb-3500.txt", 10.0)
    assert len(rg) == 65 and max(p.score for p in rg) == pytest.approx(3.94)
    assert len(simverb) == 3500  # CRLF, no final newline

    pairs = ws_pairs(data_dir)
    assert len(pairs) == 4561  # 4767 rows minus the unordered duplicates
    assert len({tuple(sorted((p.sentence1, p.sentence2))) for p in pairs}) == len(pairs)
    assert all(0.0 <= p.score <= 1.0 for p in pairs)
    assert pairs[0].score == pytest.approx(rg[0].score / 4)

    dataset = build_ws_dataset(data_dir, seed=0)
    assert {k: len(v) for k, v in dataset.items()} == {"train": 3192, "dev": 684, "test": 685}
    assert build_ws_dataset(data_dir, seed=0) == dataset
    assert build_ws_dataset(data_dir, seed=1)["train"] != dataset["train"]
    keys = [set(map(tuple, map(lambda p: (p.sentence1, p.sentence2), v))) for v in dataset.values()]
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])
    assert len(ws_checksum(data_dir)) == 16


def test_split_indices_partition_and_sklearn_compat():
    for method in ("numpy", "sklearn-compat"):
        idx = split_indices(101, seed=3, split_method=method)
        assert sorted(np.concatenate(list(idx.values())).tolist()) == list(range(101))
    with pytest.raises(SweepInputError, match="sklearn-compat"):
        split_indices(10, split_method="pandas")
    sklearn = pytest.importorskip("sklearn.model_selection")
    n = 4561
    np.random.seed(0)  # what the authors' script does before its two train_test_split calls
    train, rest = sklearn.train_test_split(np.arange(n), train_size=0.7, test_size=0.3)
    dev, test = sklearn.train_test_split(rest, train_size=0.5, test_size=0.5)
    ours = split_indices(n, seed=0, split_method="sklearn-compat")
    assert np.array_equal(ours["train"], train) and np.array_equal(ours["dev"], dev)
    assert np.array_equal(ours["test"], test)


def test_dapt_corpus_real_files(data_dir):
    sentences, sources = dapt_corpus(data_dir)
    assert sources == "sick+stsb-train+wiki"
    assert len(sentences) == len(set(sentences)) == 28160
    assert all(s and s == s.strip() for s in sentences)
    sick_first = load_sick(data_dir, splits=("train",))["train"][0].sentence1.strip()
    assert sentences[0] == sick_first
    assert dapt_corpus(data_dir, "sick+stsb-train+wiki") == (sentences, sources)
    wiki_only, name = dapt_corpus(data_dir, ["wiki"])
    assert name == "wiki" and len(wiki_only) == 11548  # 11914 lines, repeats dropped
    assert dapt_corpus_checksum(data_dir) != dapt_corpus_checksum(data_dir, "wiki")


# ---------------------------------------------------------------- malformed copies

MRPC_HEADER = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n"


def test_mrpc_small_copy_with_bom_and_crlf(tmp_path):
    write(
        tmp_path / "mrpc" / "msr-para-train.tsv",
        MRPC_HEADER + '1\t1\t2\tA "quoted" one.\tB one.\r\n0\t3\t4\tC.\tD.\r\n',
    )
    [a, b] = load_mrpc(tmp_path, splits=("train",))["train"]
    assert (a.sentence1, a.sentence2, a.score) == ('A "quoted" one.', "B one.", 1.0)
    assert b.score == 0.0


@pytest.mark.parametrize(
    "body, line, needle",
    [
        ("1\t1\t2\tA.\tB.\r\n1\t1\tA.\tB.\r\n", 3, "expected 5 tab-separated fields"),
        ("yes\t1\t2\tA.\tB.\r\n", 2, "unknown label"),
        ("2\t1\t2\tA.\tB.\r\n", 2, "unknown label"),
    ],
)
def test_mrpc_malformed(tmp_path, body, line, needle):
    path = write(tmp_path / "mrpc" / "msr-para-train.tsv", MRPC_HEADER + body)
    with pytest.raises(DataFormatError, match=needle) as exc_info:
        load_mrpc(tmp_path, splits=("train",))
    assert_names(exc_info, path, line)


def test_mrpc_missing_file_and_bad_header(tmp_path):
    (tmp_path / "mrpc").mkdir()
    with pytest.raises(DataFormatError, match="file not found") as exc_info:
        load_mrpc(tmp_path, splits=("dev",))
    assert_names(exc_info, tmp_path / "mrpc" / "msr-para-val.tsv", None)
    path = write(tmp_path / "mrpc" / "msr-para-val.tsv", "1\t1\t2\tA.\tB.\n")
    with pytest.raises(DataFormatError, match="header") as exc_info:
        load_mrpc(tmp_path, splits=("dev",))
    assert_names(exc_info, path, 1)


SICK_HEADER = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"


@pytest.mark.parametrize(
    "body, line, needle",
    [
        ("1\tA.\tB.\t4.5\tNEUTRAL\n2\tA.\tB.\tfour\tNEUTRAL\n", 3, "is not a number"),
        ("1\tA.\tB.\t4.5\tMAYBE\n", 2, "unknown entailment label"),
        ("1\tA.\tB.\t4.5\n", 2, "expected 5 tab-separated fields"),
        ("1\tA.\tB.\t4.5\tNEUTRAL\textra\n", 2, "expected 5 tab-separated fields"),
        ("1\tA.\tB.\t7\tNEUTRAL\n", 2, "outside 1-5"),
    ],
)
def test_sick_malformed(tmp_path, body, line, needle):
    path = write(tmp_path / "sick" / "SICK_trial.txt", SICK_HEADER + body)
    with pytest.raises(DataFormatError, match=needle) as exc_info:
        load_sick(tmp_path, splits=("dev",))
    assert_names(exc_info, path, line)


def test_sick_small_copy_crlf_and_missing(tmp_path):
    write(tmp_path / "sick" / "SICK_train.txt", SICK_HEADER.replace("\n", "\r\n") + "1\tA.\tB.\t3.2\tCONTRADICTION\r\n")
    [ex] = load_sick(tmp_path, splits=("train",))["train"]
    assert (ex.sentence1, ex.sentence2, ex.score, ex.label) == ("A.", "B.", 3.2, 2)
    with pytest.raises(DataFormatError, match="file not found") as exc_info:
        load_sick(tmp_path, splits=("test",))
    assert_names(exc_info, tmp_path / "sick" / "SICK_test_annotated.txt", None)
    path = write(tmp_path / "sick" / "SICK_test_annotated.txt", "pair_ID\tsentence_A\tsentence_B\tscore\tlabel\n")
    with pytest.raises(DataFormatError, match="relatedness_score") as exc_info:
        load_sick(tmp_path, splits=("test",))
    assert_names(exc_info, path, 1)


@pytest.mark.parametrize(
    "body, line, needle",
    [
        ("gem\tjewel\t3.94\ncar\tauto\thigh\n", 2, "is not a number"),
        ("gem\tjewel\t3.94\ncar auto\n", 2, "expected 3 whitespace-separated fields"),
        ("gem\tjewel\t3.94\nice cream cone 2\n", 2, "expected 3 whitespace-separated fields"),
        ("gem\tjewel\t3.94\n\ncar\tauto\t4.5\n", 3, "outside 0-4"),
    ],
)
def test_word_similarity_malformed(tmp_path, body, line, needle):
    path = write(tmp_path / "word-similarity" / "EN-RG-65.txt", body)
    with pytest.raises(DataFormatError, match=needle) as exc_info:
        ws_pairs(tmp_path)
    assert_names(exc_info, path, line)


def test_word_similarity_missing_file(tmp_path):
    write(tmp_path / "word-similarity" / "EN-RG-65.txt", "gem\tjewel\t3.94\n")
    with pytest.raises(DataFormatError, match="file not found") as exc_info:
        build_ws_dataset(tmp_path)
    assert_names(exc_info, tmp_path / "word-similarity" / "EN-SIMLEX-999.txt", None)


def test_invalid_utf8_names_line(tmp_path):
    path = tmp_path / "word-similarity" / "EN-RG-65.txt"
    path.parent.mkdir()
    path.write_bytes(b"gem\tjewel\t3.94\ncaf\xe9\tbar\t1.0\n")
    with pytest.raises(DataFormatError, match="UTF-8") as exc_info:
        ws_pairs(tmp_path)
    assert_names(exc_info, path, 2)


ALLNLI_HEADER = "split\tdataset\tfilename\tsentence1\tsentence2\tlabel\n"


def test_allnli_and_snli_formats(tmp_path):
    allnli = tmp_path / "AllNLI.tsv.gz"
    with gzip.open(allnli, "wt", encoding="utf-8") as handle:
        handle.write(ALLNLI_HEADER)
        handle.write('train\tSNLI\tx\tA "man" walks.\tA person moves.\tentailment\n')
        handle.write("dev\tMNLI\tx\tA person moves.\tNobody moves.\tcontradiction\n")
    assert read_allnli_sentences(allnli) == ['A "man" walks.', "A person moves.", "A person moves.", "Nobody moves."]
    snli = write(
        tmp_path / "snli_1.0" / "snli_1.0_train.jsonl",
        json.dumps({"gold_label": "neutral", "sentence1": "A dog runs.", "sentence2": "A dog plays."}) + "\n",
    )
    assert read_nli_jsonl_sentences(snli) == ["A dog runs.", "A dog plays."]
    for name in ("snli_1.0_dev.jsonl", "snli_1.0_test.jsonl"):
        write(tmp_path / "snli_1.0" / name, json.dumps({"sentence1": "A dog runs.", "sentence2": "A cat."}) + "\n")
    sentences, name = dapt_corpus(tmp_path, ("allnli", "snli"))
    assert name == "allnli+snli"
    assert sentences == ['A "man" walks.', "A person moves.", "Nobody moves.", "A dog runs.", "A dog plays.", "A cat."]


def test_allnli_and_snli_malformed(tmp_path):
    bad_tsv = tmp_path / "bad.tsv"
    write(bad_tsv, ALLNLI_HEADER + "train\tSNLI\tx\tA.\tB.\tneutral\ntrain\tSNLI\tA.\tB.\n")
    with pytest.raises(DataFormatError, match="expected 6") as exc_info:
        read_allnli_sentences(bad_tsv)
    assert_names(exc_info, bad_tsv, 3)
    no_column = write(tmp_path / "nocol.tsv", "split\tsentence1\tlabel\n")
    with pytest.raises(DataFormatError, match="sentence2") as exc_info:
        read_allnli_sentences(no_column)
    assert_names(exc_info, no_column, 1)
    bad_json = write(tmp_path / "bad.jsonl", '{"sentence1": "A.", "sentence2": "B."}\n{"sentence1": "A.",\n')
    with pytest.raises(DataFormatError, match="JSON") as exc_info:
        read_nli_jsonl_sentences(bad_json)
    assert_names(exc_info, bad_json, 2)
    no_field = write(tmp_path / "nofield.jsonl", '{"sentence1": "A."}\n')
    with pytest.raises(DataFormatError, match="sentence2") as exc_info:
        read_nli_jsonl_sentences(no_field)
    assert_names(exc_info, no_field, 1)
    with pytest.raises(DataFormatError, match="file not found") as exc_info:
        dapt_corpus(tmp_path, "allnli")
    assert "AllNLI.tsv.gz" in str(exc_info.value)


def test_dapt_sources_validation(tmp_path):
    with pytest.raises(SweepInputError) as exc_info:
        dapt_corpus(tmp_path, ("sick", "wikipedia"))
    message = str(exc_info.value)
    assert "'wikipedia'" in message and all(name in message for name in DAPT_SOURCES)
    with pytest.raises(SweepInputError, match="no DAPT corpus source"):
        parse_sources("")
    assert parse_sources("sick, wiki,sick") == ("sick", "wiki")
    with pytest.raises(DataFormatError, match="wiki1m-prefix.txt"):
        dapt_corpus(tmp_path, "wiki")


@pytest.mark.parametrize(
    "loader, hub_id, rows, expected",
    [
        (load_mrpc, "SetFit/mrpc", {"text1": ["a"], "text2": ["b"], "label": [1]}, ("a", "b", 1.0)),
        (
            load_sick,
            "RobZamp/sick",
            {
                "sentence_A": ["a"],
                "sentence_B": ["b"],
                "relatedness_score": [4.5],
                "entailment_AB": ["A_contradicts_B"],
            },
            ("a", "b", 4.5, 2),
        ),
    ],
)
def test_hub_copies_map_to_the_release_records(monkeypatch, loader, hub_id, rows, expected):
    """Offline here: `datasets.load_dataset` is replaced by an in-memory DatasetDict with the
    hub copy's columns and splits (train / validation / test)."""
    import dataclasses

    import datasets

    fake = datasets.DatasetDict({s: datasets.Dataset.from_dict(rows) for s in ("train", "validation", "test")})
    requested = []
    monkeypatch.setattr(datasets, "load_dataset", lambda name, *a, **k: requested.append(name) or fake)
    splits = loader("hub")
    assert requested == [hub_id] and set(splits) == {"train", "dev", "test"}
    assert dataclasses.astuple(splits["dev"][0]) == expected
