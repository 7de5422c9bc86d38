"""What a domain set's release cannot hold is refused with a data-format error naming the file and
line (or JSON key), before anything is encoded: votes beyond the annotators, short lines, torn or
non-gzip gzip, torn, non-UTF-8 or wrongly typed JSON; so is a set that cannot be scored; and the
refusals point at the right file or folder. Each case is a tiny file in its release's layout."""

import gzip
import json
import time

import pytest
from test_domain_sets import write_askubuntu, write_cqadupstack_useb, write_pit, write_scidocs_useb, write_turl

from trainables.core.errors import DataFormatError, SweepInputError
from trainables.evaluation.sets import load_suite


def refusal(name: str, data_dir) -> str:
    with pytest.raises(SweepInputError) as refused:
        load_suite([name], data_dir)
    return str(refused.value)


def replace_in(path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_votes_beyond_the_annotators_are_refused(tmp_path):
    folder = write_turl(tmp_path / "url")
    replace_in(folder / "Twitter_URL_Corpus_test.txt", "(6,6)", "(9,6)")
    message = refusal("turl", tmp_path)
    assert "Twitter_URL_Corpus_test.txt, line 1: votes (9,6): 9 yes votes of 6 annotators" in message
    replace_in(folder / "Twitter_URL_Corpus_test.txt", "(9,6)", "(4,8)")
    assert "line 1: votes (4,8): 8 annotators, but the corpus has 6 a pair" in refusal("turl", tmp_path)

    pit = write_pit(tmp_path / "pit")
    (pit / "train.data").write_text("1\tt\ta\tb\t(9, 7)\tx\ty\n")
    (pit / "dev.data").write_text("1\tt\tc\td\t(4, 1)\tx\ty\n")
    message = refusal("twittersemeval2015", tmp_path)
    assert "train.data, line 1: votes (9, 7): 16 votes, but PIT's crowd has 5 annotators a pair" in message


def test_pit_short_lines_and_test_labels_are_reported_against_the_file_that_holds_them(tmp_path):
    short, wrong = tmp_path / "short", tmp_path / "wrong"
    pit = write_pit(short / "pit")
    replace_in(pit / "test.data", "\ti hate rain\t0\ttags1\ttags2", "\ti hate rain")  # 4 columns
    assert "test.data, line 2: expected 7 tab-separated fields, found 4" in refusal("pit", short)
    replace_in(pit / "test.data", "\ti hate rain", "")  # 3 columns: the label field is missing
    assert "test.data, line 2: expected 7 tab-separated fields, found 3" in refusal("pit", short)

    pit = write_pit(wrong / "pit")
    replace_in(pit / "test.data", "\ti hate rain\t0\t", "\ti hate rain\t7\t")
    message = refusal("pit", wrong)
    assert "pit/test.data, line 2: label '7' is neither an expert 0-5" in message and "test.label" not in message
    replace_in(pit / "test.data", "\ti hate rain\t7\t", "\ti hate rain\t(1, 4)\t")
    assert "test.data, line 2: (yes, no) votes where the test split has the expert's" in refusal("pit", wrong)


@pytest.mark.parametrize(
    "content, problem",
    [
        ("torn", r"line \d+: not a whole gzip file \(Compressed file ended before the end-of-stream marker"),
        (b"1\ttitle 1\tbody\n", r"line 1: not a whole gzip file \(Not a gzipped file"),
        ("short", r"line 3: expected id, title and body, tab-separated; found 2 fields"),
    ],
)
def test_askubuntu_refuses_a_torn_or_non_gzip_or_short_text_tokenized(tmp_path, content, problem):
    folder = write_askubuntu(tmp_path / "askubuntu")
    path = folder / "text_tokenized.txt.gz"
    if content == "torn":
        data = gzip.compress(b"".join(b"%d\ttitle %d\tbody of %d\n" % (i, i, i) for i in range(1, 4000)))
        path.write_bytes(data[: len(data) // 2])
    elif content == "short":
        with gzip.open(path, "wt") as handle:
            handle.write("1\ttitle 1\tbody\n2\ttitle 2\tbody\n3\ttitle 3\n")
    else:
        path.write_bytes(content)
    with pytest.raises(DataFormatError, match=rf"text_tokenized.txt.gz, {problem}"):
        load_suite(["askubuntu"], tmp_path)


def test_askubuntu_refuses_a_short_query_line_and_a_test_set_with_nothing_to_score(tmp_path):
    folder = write_askubuntu(tmp_path / "askubuntu")
    (folder / "test.txt").write_text("1\t2 3\t2 4 5 3\n")
    assert "test.txt, line 1: expected query id, similar ids, candidate ids and BM25" in refusal("askubuntu", tmp_path)
    (folder / "test.txt").write_text("1\t2\t2 4\t9.0 high\n")
    assert "test.txt, line 1: BM25 score 'high' is not a number" in refusal("askubuntu", tmp_path)
    (folder / "test.txt").write_text("1\t7\t2 4\t9.0 8.0\n6\t\t7 8\t1.0 2.0\n")  # no query has a similar candidate
    message = refusal("askubuntu", tmp_path)
    assert "test.txt: askubuntu: none of its 0 queries has both a positive and a negative candidate" in message
    assert "cannot be scored" in message


@pytest.mark.parametrize(
    "file, content, problem",
    [
        ("corpus.json", b'{"android": {"1": "how', r"corpus.json, line 1: not valid JSON \(Unterminated string"),
        ("corpus.json", b'{"android":\n {"1": "caf\xe9"}}', r"corpus.json, line 2: not valid UTF-8"),
        ("corpus.json", "list", r"corpus.json: android should be dict, found list"),
        ("corpus.json", "number title", r"corpus.json: android.1 should be str, found int"),
        ("retrieval_split.json", b'{"test": {"android": {"1": ["3"]}', r"retrieval_split.json, line 1: not valid JSON"),
        ("retrieval_split.json", "split list", r"retrieval_split.json: 'test' should be dict, found list"),
        ("retrieval_split.json", "duplicate int", r"retrieval_split.json: a duplicate of test.android.1 should be str"),
    ],
)
def test_cqadupstack_refuses_torn_non_utf8_or_wrongly_typed_json(tmp_path, file, content, problem):
    folder = write_cqadupstack_useb(tmp_path)
    corpus = json.loads((folder / "corpus.json").read_text())
    split = json.loads((folder / "retrieval_split.json").read_text())
    if content == "list":
        corpus["android"] = list(corpus["android"].values())
    elif content == "number title":
        corpus["android"]["1"] = 17
    elif content == "split list":
        split["test"] = [split["test"]]
    elif content == "duplicate int":
        split["test"]["android"]["1"] = [3]
    if isinstance(content, bytes):
        (folder / file).write_bytes(content)
    else:
        (folder / "corpus.json").write_text(json.dumps(corpus))
        (folder / "retrieval_split.json").write_text(json.dumps(split))
    with pytest.raises(DataFormatError, match=problem):
        load_suite(["cqadupstack"], tmp_path)


def test_a_cqadupstack_forum_that_cannot_be_scored_is_refused(tmp_path):
    folder = write_cqadupstack_useb(tmp_path)
    corpus = json.loads((folder / "corpus.json").read_text())
    corpus["gis"] = {}  # as a partial extraction leaves it
    (folder / "corpus.json").write_text(json.dumps(corpus))
    assert "corpus.json: forum gis is empty, so its 2 test questions have no text" in refusal("cqadupstack", tmp_path)
    corpus["gis"] = {"1": "how to a", "2": "how to b", "4": "other"}  # question 3, 1's only duplicate, is gone
    (folder / "corpus.json").write_text(json.dumps(corpus))
    message = refusal("cqadupstack", tmp_path)
    assert "retrieval_split.json: cqadupstack (gis): none of its 2 queries has a relevant document in the corpus" in (
        message
    )
    corpus["gis"] = {"2": "how to b", "3": "a duplicate of 1"}  # a test question missing from the corpus
    (folder / "corpus.json").write_text(json.dumps(corpus))
    assert "retrieval_split.json: test.gis: question 1 (and 0 more) is not in corpus.json's gis" in refusal(
        "cqadupstack", tmp_path
    )


def test_scidocs_refuses_torn_or_wrongly_typed_json_and_a_task_with_nothing_to_rank(tmp_path):
    folder = write_scidocs_useb(tmp_path)
    data = json.loads((folder / "data.json").read_text())
    (folder / "data.json").write_text(json.dumps(data)[:-40])
    assert "scidocs/data.json, line 1: not valid JSON" in refusal("scidocs", tmp_path)
    data["corpus"]["p3"] = {"title": ["a", "list"]}
    (folder / "data.json").write_text(json.dumps(data))
    assert "data.json: corpus.p3.title should be str or null, found list" in refusal("scidocs", tmp_path)
    data["corpus"]["p3"] = {"title": "paper 3"}
    data["test"]["cite"] = {"p0": {"p1": "1"}}
    (folder / "data.json").write_text(json.dumps(data))
    assert "data.json: test.cite.p0.p1 should be int, found str" in refusal("scidocs", tmp_path)
    data["test"]["cite"] = {"p0": {"p7": 1, "p2": 0}}  # its one relevant paper is untitled
    (folder / "data.json").write_text(json.dumps(data))
    message = refusal("scidocs", tmp_path)
    assert "scidocs (cite): none of its 1 queries has a relevant candidate that can be ranked" in message


def test_refusals_name_the_files_a_set_needs_and_a_data_dir_that_does_not_exist(tmp_path):
    write_pit(tmp_path / "pit")
    message = refusal("twittersemeval2015", tmp_path)
    assert "no train.data with dev.data with test.data under" in message
    assert "Put PIT-2015's train.data, dev.data and test.data there" in message and "test.label" not in message
    for name in ("turl", "cqadupstack", "scidocs", "twittersemeval2015", "sts12"):
        message = refusal(name, tmp_path / "nope")
        assert f"evaluation set {name}: the data folder {tmp_path / 'nope'} does not exist" in message, message
        assert " under " not in message


@pytest.mark.parametrize("case", ["torn askubuntu", "unscorable cqadupstack"])
def test_a_layer_sweep_with_a_broken_domain_set_is_refused_before_ray_starts(
    tmp_path, data_dir, tiny_models, capsys, case
):
    import os

    import ray

    from sweeps.electra_layers import main

    root = tmp_path / "data"
    root.mkdir()
    for folder in data_dir.iterdir():
        if folder.is_dir():
            os.symlink(folder, root / folder.name)
    if case == "torn askubuntu":
        path = write_askubuntu(root / "askubuntu") / "text_tokenized.txt.gz"
        path.write_bytes(path.read_bytes()[:-12])
        sets, expected = "askubuntu", "text_tokenized.txt.gz, line 13: not a whole gzip file"  # 12 lines read
    else:
        folder = write_cqadupstack_useb(root)
        corpus = json.loads((folder / "corpus.json").read_text())
        corpus["tex"] = {}
        (folder / "corpus.json").write_text(json.dumps(corpus))
        sets, expected = "cqadupstack", "corpus.json: forum tex is empty"
    storage = tmp_path / "fresh" / "runs"
    argv = ["--storage-path", str(storage), "--data-dir", str(root), "--seeds", "0", "--epochs", "1"]
    ray.shutdown()  # an earlier test's Ray in this process: the refusal must not start one
    started = time.perf_counter()
    code = main([*argv, "--models", tiny_models["bert"], "--eval-sets", sets])
    err = capsys.readouterr().err
    print(f"refused in {time.perf_counter() - started:.2f} s: {err.strip()}")
    assert code == 2 and expected in err and "Traceback" not in err
    assert not ray.is_initialized() and not storage.exists()
