"""Domain evaluation sets on small fixtures in their released layouts: the Twitter sets' label rule,
AskUbuntu's queries, discovery through symlinked folders, the hub's layout offline, and the errors
that name a missing or torn file."""

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainables.core.errors import DataFormatError, SweepInputError
from trainables.evaluation.sets import load_suite, main_metric, suite_primary

# (sentence 1, sentence 2, votes of six): 4+ a paraphrase, 2- not, 3 dropped
URL_ROWS = [("Headline one ", "Same headline one ", 6), ("Headline one ", "unrelated tweet", 0),
            ("Headline one ", "debatable tweet", 3), ("Headline two", "headline two again", 4),
            ("Headline two", "about something else", 2), ("Headline two", "another thing", 1)]  # fmt: skip
# (sentence 1, sentence 2, expert label 0-5): PIT test
PIT_ROWS = [("the movie is on", "that movie is on tv", 5), ("the movie is on", "i hate rain", 0),
            ("the movie is on", "maybe the movie", 3), ("rain again", "it rains again", 4),
            ("rain again", "sunny day", 1)]  # fmt: skip
MARKS = {0: "false", 1: "false", 2: "false", 3: "----", 4: "true", 5: "true"}


def write_turl(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"{a}\t{b}\t({n},6)\thttps://t.co/x" for a, b, n in URL_ROWS]
    lines.insert(2, "")  # the release has blank separator lines
    lines[-1] = lines[-1].replace("\thttps", "\t\thttps")  # and a few lines with an empty field before the URL
    (folder / "Twitter_URL_Corpus_test.txt").write_text("\n".join(lines) + "\n")
    return folder


def write_pit(folder: Path, rows=PIT_ROWS, split: str = "test") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = [f"1\ttopic\t{a}\t{b}\t{label}\ttags1\ttags2" for a, b, label in rows]
    (folder / f"{split}.data").write_text("\n".join(data) + "\n")
    if split == "test":
        (folder / "test.label").write_text("".join(f"{MARKS[label]}\t{label / 5:.4f}\n" for *_, label in rows))
    return folder


def test_twitterpara_applies_the_vote_rule_and_averages_its_two_parts(tmp_path):
    write_turl(tmp_path / "Twitter-URL-Corpus")
    write_pit(tmp_path / "SemEval-PIT2015" / "data")
    suite = load_suite(["twitterpara", "turl", "pit"], tmp_path)
    turl, pit = suite.sets["turl"].subsets["turl"], suite.sets["pit"].subsets["pit"]
    assert list(turl.gold) == [1, 0, 1, 0, 0] and turl.s1[0] == "Headline one"  # the 3-vote pair dropped, stripped
    assert list(pit.gold) == [1, 0, 1, 0]
    assert set(suite.sets["twitterpara"].subsets) == {"turl", "pit"}
    rng = np.random.default_rng(0)
    scores = suite.score(rng.normal(size=(len(suite.sentences), 8)))
    assert scores["twitterpara_ap"] == pytest.approx((scores["turl_ap"] + scores["pit_ap"]) / 2)
    assert scores["twitterpara_turl_ap"] == scores["turl_ap"]
    assert main_metric("twitterpara") == "twitterpara_ap"
    assert suite_primary(["twitterpara", "pit"]) == "mean_pair_classification_ap"
    assert suite_primary(["twitterpara", "sts12"]) == "mean_spearman"


def test_pit_crowd_votes_follow_mtebs_rule_and_mtebs_twittersemeval2015_joins_the_three_splits(tmp_path):
    folder = write_pit(tmp_path / "pit")
    votes = [("a", "b", "(4, 1)"), ("c", "d", "(3, 2)"), ("e", "f", "(2, 3)"), ("g", "h", "(5, 0)")]
    for split in ("train", "dev"):
        (folder / f"{split}.data").write_text("".join(f"1\tt\t{a}\t{b}\t{v}\tx\ty\n" for a, b, v in votes))
    data = load_suite(["twittersemeval2015"], tmp_path).sets["twittersemeval2015"]
    assert list(data.subsets["all"].gold) == [1, 0, 1] * 2 + [1, 0, 1, 0]  # (3, 2) dropped; test: 3 dropped


def test_sets_are_found_through_symlinked_folders_and_a_link_cycle_ends(tmp_path):
    elsewhere = write_turl(tmp_path / "elsewhere" / "url")
    root = tmp_path / "data"
    root.mkdir()
    os.symlink(elsewhere.parent, root / "twitter")
    os.symlink(root, root / "twitter" / "loop")  # a cycle back to the root
    assert not list(root.rglob("Twitter_URL_Corpus_test.txt"))  # what the walk before this change saw
    assert len(load_suite(["turl"], root).sets["turl"]) == 5


def test_a_missing_or_torn_twitter_file_is_named(tmp_path):
    with pytest.raises(
        SweepInputError, match=r"evaluation set turl: no Twitter_URL_Corpus_test.txt under .*--data-dir"
    ):
        load_suite(["turl"], tmp_path)
    folder = write_pit(tmp_path / "pit")
    with pytest.raises(SweepInputError, match=r"twitterpara \(turl\): no Twitter_URL_Corpus_test.txt"):
        load_suite(["twitterpara"], tmp_path)
    (folder / "test.label").write_text("true\t1.0\n" * len(PIT_ROWS))
    with pytest.raises(DataFormatError, match=r"test.label, line 2: 'true' disagrees with test.data's expert label 0"):
        load_suite(["pit"], tmp_path)
    write_turl(tmp_path / "url")
    path = tmp_path / "url" / "Twitter_URL_Corpus_test.txt"
    path.write_text(path.read_text().replace("(0,6)", "zero"))
    with pytest.raises(DataFormatError, match=r"Twitter_URL_Corpus_test.txt, line 2: expected sentence, sentence"):
        load_suite(["turl"], tmp_path)


def write_askubuntu(folder: Path) -> Path:
    folder.mkdir(parents=True)
    titles = {str(i): f"title {i}" for i in range(1, 13)}  # 12: in neither dev nor test
    with gzip.open(folder / "text_tokenized.txt.gz", "wt") as handle:
        handle.writelines(f"{i}\t{t}\tbody of {i}\n" for i, t in titles.items())
    (folder / "test.txt").write_text(
        "1\t2 3\t2 4 5 3\t9.0 8.0 7.0 6.0\n"  # two similar among the candidates
        "6\t\t7 8\t1.0 2.0\n"  # no similar question: left out
        "9\t11\t10 11\t1.0 2.0\n"
    )
    return folder


def test_askubuntu_reranks_each_querys_candidates_by_title(tmp_path):
    write_askubuntu(tmp_path / "askubuntu")
    data = load_suite(["askubuntu"], tmp_path).sets["askubuntu"].subsets["test"]
    assert data.queries == ["title 1", "title 9"]
    assert data.positives == [["title 2", "title 3"], ["title 11"]]
    assert data.negatives == [["title 4", "title 5"], ["title 10"]]
    (tmp_path / "askubuntu" / "dev.txt").write_text("12\t1\t1 4\t1.0 2.0\n")
    mteb = load_suite(["askubuntudupquestions"], tmp_path).sets["askubuntudupquestions"].subsets["all"]
    assert mteb.queries == ["title 12", "title 1", "title 9"]  # MTEB's: dev and test queries with a positive
    (tmp_path / "askubuntu" / "test.txt").write_text("1\t2\t2 99\t1.0 2.0\n")
    with pytest.raises(DataFormatError, match=r"test.txt, line 1: question 99 is not in text_tokenized"):
        load_suite(["askubuntu"], tmp_path)


def write_scidocs_useb(root: Path) -> Path:
    folder = root / "scidocs"
    folder.mkdir(parents=True)
    corpus = {f"p{i}": {"title": f"paper {i}"} for i in range(8)}
    corpus["p7"] = {"title": None}  # untitled: not ranked as a candidate, skipped as a query
    qrels = {"q": {"p0": {"p1": 1, "p2": 0, "p7": 1}, "p7": {"p1": 1, "p2": 0}}}
    test = {task: qrels["q"] for task in ("cite", "cocite", "coread", "coview")}
    (folder / "data.json").write_text(json.dumps({"corpus": corpus, "valid": {}, "test": test}))
    return folder


def write_cqadupstack_useb(root: Path) -> Path:
    from trainables.evaluation.domain_sets import CQA_FORUMS

    folder = root / "cqadupstack"
    folder.mkdir(parents=True)
    corpus = {forum: {"1": "how to a", "2": "how to b", "3": "a duplicate of 1", "4": "other"} for forum in CQA_FORUMS}
    split = {"test": {forum: {"1": ["3"], "2": []} for forum in CQA_FORUMS}}
    (folder / "corpus.json").write_text(json.dumps(corpus))
    (folder / "retrieval_split.json").write_text(json.dumps(split))
    return folder


def test_scidocs_and_cqadupstack_are_built_as_useb_builds_them_and_the_four_tasks_give_useb_avg(tmp_path):
    write_scidocs_useb(tmp_path)
    write_cqadupstack_useb(tmp_path)
    write_askubuntu(tmp_path / "askubuntu")
    write_turl(tmp_path / "url")
    write_pit(tmp_path / "pit")
    suite = load_suite(["askubuntu", "cqadupstack", "twitterpara", "scidocs"], tmp_path)
    cite = suite.sets["scidocs"].subsets["cite"]
    assert (cite.queries, cite.candidates, cite.relevance) == (["paper 0"], [["paper 2", "paper 1"]], [[False, True]])
    assert cite.relevant == [2]  # the untitled p7 stays relevant, never ranked (pytrec_eval's qrels)
    android = suite.sets["cqadupstack"].subsets["android"]
    assert set(android.corpus) == {"3", "4"}  # the split's queries are taken out of the pool
    assert android.relevant["1"] == {"3"} and len(suite.sets["cqadupstack"].subsets) == 12
    scores = suite.score(np.random.default_rng(2).normal(size=(len(suite.sentences), 6)))
    mains = [
        scores["askubuntu_map"],
        scores["cqadupstack_useb_map_at_100"],
        scores["twitterpara_ap"],
        scores["scidocs_map"],
    ]
    assert scores["useb_avg"] == pytest.approx(np.mean(mains))
    assert scores["scidocs_map"] == pytest.approx(
        np.mean([scores[f"scidocs_{t}_map"] for t in ("cite", "cocite", "coread", "coview")])
    )
    assert main_metric("cqadupstack") == "cqadupstack_useb_map_at_100"


def suite_cosines(suite, embeddings: np.ndarray):
    """The cosine of two texts as the suite computes it from `embeddings` (rows of `suite.sentences`)."""
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    return lambda a, b: float(unit[suite.position[a]] @ unit[suite.position[b]])


def test_scidocs_scores_as_useb_with_pytrec_eval(tmp_path):
    """USEB's SciDocs on data.json: pytrec_eval over the titled queries' titled candidates, with the
    qrels whole; an untitled relevant paper counts as relevant and not retrieved."""
    import pytrec_eval

    folder = tmp_path / "scidocs"
    folder.mkdir()
    corpus = {f"p{i}": {"title": f"paper {i}"} for i in range(20)} | {"p20": {"title": None}, "p21": {"title": ""}}
    rng = np.random.default_rng(5)
    test = {
        task: {
            f"p{q}": {f"p{c}": int(c % 3 == 0) for c in rng.choice(22, 8, replace=False) if c != q} | {"p20": 1}
            for q in range(4)
        }
        for task in ("cite", "cocite", "coread", "coview")
    }
    (folder / "data.json").write_text(json.dumps({"corpus": corpus, "test": test}))
    suite = load_suite(["scidocs"], tmp_path)
    embeddings = rng.normal(size=(len(suite.sentences), 6))
    scores, cosine = suite.score(embeddings), suite_cosines(suite, embeddings)
    for task, qrels in test.items():
        run = {q: {p: cosine(corpus[q]["title"], corpus[p]["title"]) for p in papers if corpus[p]["title"]}
               for q, papers in qrels.items()}  # fmt: skip
        reference = pytrec_eval.RelevanceEvaluator(qrels, {"map"}).evaluate(run)
        assert scores[f"scidocs_{task}_map"] == pytest.approx(100 * np.mean([r["map"] for r in reference.values()]))
        titled = {q: {p: r for p, r in papers.items() if corpus[p]["title"]} for q, papers in qrels.items()}
        before = pytrec_eval.RelevanceEvaluator(titled, {"map"}).evaluate(run)  # the rule before: untitled dropped
        assert scores[f"scidocs_{task}_map"] < 100 * np.mean([r["map"] for r in before.values()])


def test_cqadupstack_scores_every_test_question_as_useb_does(tmp_path):
    """USEB's CQADupStack: each forum's test questions out of the pool, every one scored; a question
    whose duplicate is another test question (so not in the pool) scores 0, as USEB counts it."""
    from test_eval_tasks import useb_cqadupstack

    from trainables.evaluation.domain_sets import CQA_FORUMS

    folder = tmp_path / "cqadupstack"
    folder.mkdir()
    titles = {str(i): f"question {i}" for i in range(130)}
    split = {"0": ["50", "51"], "1": ["2"], "2": ["1"], "3": ["60"], "4": []}  # 1 and 2: each other's only duplicate
    (folder / "corpus.json").write_text(json.dumps({forum: titles for forum in CQA_FORUMS}))
    (folder / "retrieval_split.json").write_text(json.dumps({"test": {forum: split for forum in CQA_FORUMS}}))
    suite = load_suite(["cqadupstack"], tmp_path)
    embeddings = np.random.default_rng(4).normal(size=(len(suite.sentences), 6))
    scores, cosine = suite.score(embeddings), suite_cosines(suite, embeddings)
    pool = [i for i in titles if i not in split]
    cosines = np.array([[cosine(titles[q], titles[d]) for d in pool] for q in split])
    useb_map, useb_ndcg = useb_cqadupstack(cosines, pool, split)
    assert scores["cqadupstack_android_useb_map_at_100"] == pytest.approx(100 * useb_map)
    assert scores["cqadupstack_useb_map_at_100"] == pytest.approx(100 * useb_map)  # the 12 forums alike
    assert scores["cqadupstack_ndcg_at_10"] == pytest.approx(100 * useb_ndcg)


def test_scidocs_reads_the_original_release_too(tmp_path):
    folder = tmp_path / "scidocs-release"
    folder.mkdir()
    metadata = {f"p{i}": {"title": f"paper {i}", "abstract": "..."} for i in range(4)}
    (folder / "paper_metadata_view_cite_read.json").write_text(json.dumps(metadata))
    for task in ("cite", "cocite", "coread", "coview"):
        (folder / task).mkdir()
        (folder / task / "test.qrel").write_text("p0 0 p1 1\np0 0 p2 0\np3 0 p2 1\np3 0 p1 0\n")
    data = load_suite(["scidocs"], tmp_path).sets["scidocs"].subsets["coview"]
    assert data.queries == ["paper 0", "paper 3"] and data.candidates == [["paper 2", "paper 1"]] * 2
    assert data.relevance == [[False, True], [True, False]] and data.relevant == [1, 1]
    (folder / "coview" / "test.qrel").write_text("p0 p1 1\n")
    with pytest.raises(DataFormatError, match=r"coview/test.qrel, line 1: expected: query 0 paper relevance"):
        load_suite(["scidocs"], tmp_path)


def test_mtebs_sets_read_a_folder_in_the_hubs_layout_offline(tmp_path):
    pair_folder = tmp_path / "mteb" / "twitterurlcorpus-pairclassification"
    pair_folder.mkdir(parents=True)
    row = {"sent1": ["a", "b", "c"], "sent2": ["a2", "b2", "c2"], "labels": [1, 0, 1]}
    with gzip.open(pair_folder / "test.jsonl.gz", "wt") as handle:
        handle.write(json.dumps(row) + "\n")
    rerank_folder = tmp_path / "askubuntudupquestions-reranking" / "data"
    rerank_folder.mkdir(parents=True)
    table = {"query": ["q1", "q2"], "positive": [["p1"], ["p2", "p3"]], "negative": [["n1", "n2"], []]}
    pq.write_table(pa.table(table), rerank_folder / "test-00000-of-00001.parquet")
    sts_folder = tmp_path / "sts13-sts"
    sts_folder.mkdir()
    sts = {"sentence1": ["x", "y", "z"], "sentence2": ["x2", "y2", "z2"], "score": [4.0, 1.0, 2.5]}
    pq.write_table(pa.table(sts), sts_folder / "test.parquet")
    suite = load_suite(["twitterurlcorpus", "askubuntudupquestions", "sts13"], tmp_path)
    assert list(suite.sets["twitterurlcorpus"].subsets["all"].gold) == [1, 0, 1]
    assert suite.sets["askubuntudupquestions"].subsets["all"].positives == [["p1"], ["p2", "p3"]]
    assert list(suite.sets["sts13"].subsets["all"].gold) == [4.0, 1.0, 2.5]
    scores = suite.score(np.random.default_rng(1).normal(size=(len(suite.sentences), 4)))
    assert scores["askubuntudupquestions_queries"] == 1  # q2 has no negative: left out, as MTEB does
    sts[("score")] = [4.0, 9.0, 2.5]
    pq.write_table(pa.table(sts), sts_folder / "test.parquet")
    with pytest.raises(DataFormatError, match=r"mteb/sts13-sts, split test \(pair 2\).*outside the set's scale 0-5"):
        load_suite(["sts13"], tmp_path)


def test_mtebs_cqadupstack_reads_beirs_layout_per_forum_offline(tmp_path):
    from trainables.evaluation.domain_sets import CQA_FORUMS

    for forum in CQA_FORUMS:
        folder = tmp_path / f"cqadupstack-{forum}"
        (folder / "qrels").mkdir(parents=True)
        corpus = [
            {"_id": "d1", "title": "How to root", "text": "my phone"},
            {"_id": "d2", "title": "", "text": "other"},
        ]
        (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
        queries = [{"_id": "q1", "text": "rooting a phone"}, {"_id": "q2", "text": "no relevant document"}]
        (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
        (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    data = load_suite(["cqadupstackretrieval"], tmp_path).sets["cqadupstackretrieval"]
    android = data.subsets["android"]
    assert android.corpus == {"d1": "How to root my phone", "d2": "other"}
    assert android.queries == {"q1": "rooting a phone"} and android.relevant == {"q1": {"d1"}}
    assert len(data.subsets) == 12 and main_metric("cqadupstackretrieval") == "cqadupstackretrieval_ndcg_at_10"


def test_hub_sets_offline_say_what_to_do(tmp_path):
    with pytest.raises(SweepInputError, match=r"--data-dir hub: mteb/twitterurlcorpus-pairclassification.*cannot be"):
        load_suite(["twitterurlcorpus"], "hub")
    with pytest.raises(SweepInputError, match=r"askubuntu has no hub copy; pass --data-dir with its files"):
        load_suite(["askubuntu"], "hub")
    with pytest.raises(
        SweepInputError,
        match=r"no text_tokenized.txt.gz .* hub copy mteb/askubuntudupquestions-reranking .* --data-dir hub",
    ):
        load_suite(["askubuntudupquestions"], tmp_path)


# --- real data: the project's scores against an independent reference, and MTEB's published scores -------------
def released(data_dir, name: str) -> Path:
    found = sorted(Path(data_dir).glob(f"**/{name}")) or [
        Path(root) / name for root, _, files in os.walk(data_dir, followlinks=True) if name in files
    ]
    if not found:
        pytest.skip(f"{name} is not under {data_dir} (docs/data.md says where to fetch it; set EMBSWEEP_DATA_DIR)")
    return found[0]


def reference_twitter_ap(model, turl: Path, pit: Path) -> dict[str, float]:
    """USEB's TwitterPara read without the project's code: votes >= 4 a paraphrase, <= 2 not, 3 dropped;
    sentence-transformers' encode; scikit-learn's average precision of the cosine."""
    from sklearn.metrics import average_precision_score

    def rows_of(path, text_columns, label_column, parse):
        rows = [line.split("\t") for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
        labelled = [(r[text_columns[0]].strip(), r[text_columns[1]].strip(), parse(r[label_column])) for r in rows]
        return [(a, b, int(n >= 4)) for a, b, n in labelled if n != 3]

    out = {}
    parts = {
        "turl": rows_of(turl, (0, 1), 2, lambda v: int(v.strip("()").split(",")[0])),
        "pit": rows_of(pit, (2, 3), 4, int),
    }
    for part, rows in parts.items():
        first = model.encode([a for a, _, _ in rows], normalize_embeddings=True, batch_size=128)
        second = model.encode([b for _, b, _ in rows], normalize_embeddings=True, batch_size=128)
        out[part] = 100 * average_precision_score([y for *_, y in rows], np.sum(first * second, axis=1))
    return out


@pytest.mark.slow
def test_twitterpara_scores_agree_with_an_independent_reference_on_the_real_data():
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    from trainables.core.paths import default_data_dir
    from trainables.encoders.loading import resolve_model
    from trainables.evaluation.zero_shot import encode_sentences

    data_dir = default_data_dir()
    turl, pit = released(data_dir, "Twitter_URL_Corpus_test.txt"), released(data_dir, "test.data")
    path = resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    suite = load_suite(["twitterpara"], data_dir)
    embeddings = encode_sentences(AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path),
                                  suite.sentences, "mean", batch_size=128)  # fmt: skip
    ours = suite.score(embeddings)
    reference = reference_twitter_ap(SentenceTransformer(str(path), device="cpu"), turl, pit)
    print({"ours": {k: round(ours[f"twitterpara_{k}_ap"], 3) for k in reference}, "reference": reference})
    for part, value in reference.items():
        assert ours[f"twitterpara_{part}_ap"] == pytest.approx(value, abs=0.05), part
    assert ours["twitterpara_ap"] == pytest.approx(np.mean(list(reference.values())), abs=0.05)


MTEB_DOMAIN = {  # MTEB's published scores of all-MiniLM-L6-v2 (main metric x100)
    "twitterurlcorpus": 84.70,
    "twittersemeval2015": 67.86,
    "askubuntudupquestions": 63.48,
    "scidocsrr": 87.12,
    "cqadupstackretrieval": 41.32,  # nDCG@10, the mean of the 12 forums
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MTEB_DOMAIN))
def test_all_minilm_reproduces_mtebs_published_domain_scores_where_the_data_is(name):
    from transformers import AutoModel, AutoTokenizer

    from trainables.core.paths import default_data_dir
    from trainables.encoders.loading import resolve_model
    from trainables.evaluation.zero_shot import encode_sentences

    try:
        suite = load_suite([name], default_data_dir())
    except SweepInputError as missing:
        pytest.skip(f"{name}'s data is not here ({missing}); docs/data.md says where to fetch it")
    path = resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    embeddings = encode_sentences(AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path),
                                  suite.sentences, "mean", batch_size=128)  # fmt: skip
    score = suite.score(embeddings)[main_metric(name)]
    assert score == pytest.approx(MTEB_DOMAIN[name], abs=0.05), score


def test_domain_corpora_hold_training_sentences_only(tmp_path):
    from trainables.data.sentences import dapt_corpus

    write_turl(tmp_path / "url")
    pit = write_pit(tmp_path / "pit")
    write_pit(pit, [("a dev tweet", "another dev tweet", 4)], split="dev")
    sentences, name = dapt_corpus(tmp_path, ("twitterpara",))
    assert (sentences, name) == (["a dev tweet", "another dev tweet"], "twitterpara")  # no test sentence
    write_askubuntu(tmp_path / "askubuntu")
    (tmp_path / "askubuntu" / "dev.txt").write_text("10\t\t1\t1.0\n")
    titles, _ = dapt_corpus(tmp_path, ("askubuntu",))
    assert titles == ["title 12"]  # the titles of dev and test questions are held out
    useb = tmp_path / "data-train" / "askubuntu" / "unsupervised"
    useb.mkdir(parents=True)
    (useb / "train.txt").write_text("title one\ntitle two\n")
    assert dapt_corpus(tmp_path, ("askubuntu",))[0] == ["title one", "title two"]  # USEB's own file wins
    with pytest.raises(
        SweepInputError, match=r"corpus scidocs: no unlabelled training sentences .* scidocs/unsupervised"
    ):
        dapt_corpus(tmp_path, ("scidocs",))


def test_the_report_heads_domain_columns_by_set_and_metric_and_says_how_they_aggregate():
    from analysis.names import aggregation_note, score_name

    assert [score_name(m) for m in ("twitterpara_ap", "twitterpara_turl_ap", "sts12_spearman_wmean", "useb_avg")] == [
        "TwitterPara AP",
        "TwitterPara TURL AP",
        "STS12 Spearman wmean",
        "USEB Avg.",
    ]
    assert score_name("mean_pair_classification_ap") == "Avg. pair classification AP"
    note = aggregation_note(["sts12_spearman", "twitterpara_ap"])
    assert "pooled (MTEB's)" in note and "unweighted mean over them (USEB's)" in note
    assert aggregation_note(["best_dev_spearman_x"]) == ""


@pytest.mark.sweep
def test_a_training_sweep_scores_its_best_weights_on_domain_sets_and_the_report_shows_them(
    sweep_env, tiny_models, data_dir, tmp_path
):
    from mlflow_helpers import runs_by_role
    from sweep_helpers import sweep_args

    from analysis.report import build_report
    from sweeps.electra_layers import main as tmft_main

    root = tmp_path / "data"
    root.mkdir()
    for folder in Path(data_dir).iterdir():
        if folder.is_dir():
            os.symlink(folder, root / folder.name)
    write_turl(tmp_path / "elsewhere" / "url")
    write_pit(tmp_path / "elsewhere" / "pit")
    os.symlink(tmp_path / "elsewhere", root / "twitter")  # found through the link
    sweep = "--layers 1 --seeds 0 --epochs 1 --eval-sets twitterpara,stsb_dev --name domain"
    assert tmft_main(sweep_args(tiny_models["bert"], sweep, *sweep_env["flags"], "--data-dir", str(root))) == 0
    (trial,) = runs_by_role(sweep_env["uri"])[1]
    metrics = trial.data.metrics
    assert {"twitterpara_ap", "twitterpara_turl_ap", "twitterpara_pit_ap", "stsb_dev_spearman"} <= set(metrics)
    assert metrics["twitterpara_ap"] == pytest.approx(
        (metrics["twitterpara_turl_ap"] + metrics["twitterpara_pit_ap"]) / 2
    )
    assert trial.data.params["metric_columns"] == "twitterpara_ap,stsb_dev_spearman"
    report = build_report(sweep_env["uri"], tmp_path / "report")
    text = report.index.read_text()
    assert "TwitterPara AP" in text and "unweighted mean over them (USEB's)" in text
