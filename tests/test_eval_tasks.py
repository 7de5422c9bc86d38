"""Task kinds of the evaluation suite against reference computations: scikit-learn's average
precision and nDCG, a brute-force threshold search, and MAP / MRR / MAP@100 worked by hand."""

import math

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, ndcg_score

from trainables.evaluation.sets import EvalData, EvalSuite
from trainables.evaluation.task_kinds import Pairs, Rerank, Retrieval, task_kind


def at_cosine(cosine: float) -> np.ndarray:
    """A unit vector whose cosine with (1, 0) is `cosine`."""
    return np.array([cosine, math.sqrt(max(0.0, 1.0 - cosine**2))])


def embedder(vectors: dict[str, np.ndarray]):
    return lambda texts: np.stack([vectors[t] for t in texts])


def pair_task(cosines, labels) -> tuple[Pairs, dict]:
    vectors = {f"a{i}": np.array([1.0, 0.0]) for i in range(len(cosines))}
    vectors.update({f"b{i}": at_cosine(c) for i, c in enumerate(cosines)})
    pairs = Pairs([f"a{i}" for i in range(len(cosines))], [f"b{i}" for i in range(len(cosines))], np.array(labels))
    return pairs, vectors


def brute_force_best(cosines, labels):
    """Best accuracy and F1 of `cosine >= t` over every threshold between and beyond the scores."""
    cosines, labels = np.asarray(cosines), np.asarray(labels)
    points = np.unique(cosines)
    candidates = [points[0] - 1, *((points[:-1] + points[1:]) / 2), points[-1] + 1]
    best_accuracy = best_f1 = 0.0
    for t in candidates:
        predicted = cosines >= t
        best_accuracy = max(best_accuracy, float(np.mean(predicted == labels)))
        tp = np.sum(predicted & (labels == 1))
        if tp:
            precision, recall = tp / predicted.sum(), tp / labels.sum()
            best_f1 = max(best_f1, 2 * precision * recall / (precision + recall))
    return best_accuracy, best_f1


def test_pair_classification_against_scikit_learn_and_a_brute_force_threshold_search():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 60)
    cosines = np.clip(0.3 * labels + rng.normal(0.4, 0.25, 60), -0.99, 0.99).round(3)
    pairs, vectors = pair_task(cosines, labels)
    scores = task_kind("pair_classification").score(pairs, embedder(vectors))
    assert scores["ap"] == pytest.approx(100 * average_precision_score(labels, cosines))
    accuracy, f1 = brute_force_best(cosines, labels)
    assert scores["accuracy"] == pytest.approx(100 * accuracy)
    assert scores["f1"] == pytest.approx(100 * f1)
    predicted = cosines >= scores["accuracy_threshold"]
    assert np.mean(predicted == labels) == pytest.approx(accuracy)  # the threshold gives the accuracy reported
    assert 50 < scores["ap"] < 100


def test_reranking_map_and_mrr_worked_by_hand():
    # query q1: candidates ranked p1 (0.9), n1 (0.8), p2 (0.5), n2 (0.1): AP = (1/1 + 2/3) / 2, RR = 1
    # query q2: ranked n3 (0.7), p3 (0.6): AP = 1/2, RR = 1/2
    # query q3 has no negative: left out, as MTEB does
    cos = {"p1": 0.9, "n1": 0.8, "p2": 0.5, "n2": 0.1, "n3": 0.7, "p3": 0.6, "p4": 0.2}
    vectors = {name: at_cosine(c) for name, c in cos.items()}
    vectors.update({q: np.array([1.0, 0.0]) for q in ("q1", "q2", "q3")})
    data = Rerank(["q1", "q2", "q3"], [["p1", "p2"], ["p3"], ["p4"]], [["n1", "n2"], ["n3"], []])
    scores = task_kind("reranking").score(data, embedder(vectors))
    assert scores["map"] == pytest.approx(100 * np.mean([(1 + 2 / 3) / 2, 1 / 2]))
    assert scores["mrr_at_10"] == scores["mrr"] == pytest.approx(100 * np.mean([1, 1 / 2]))
    assert scores["queries"] == 2


def test_retrieval_map_at_100_and_ndcg_at_10_worked_by_hand_and_against_scikit_learn():
    # corpus ranked d0 > d1 > ... > d11 for query q; relevant: d1, d4 and d11 (below the top ten)
    corpus = {f"d{i}": f"doc {i}" for i in range(12)}
    vectors = {f"doc {i}": at_cosine(0.95 - 0.08 * i) for i in range(12)}
    vectors["query"] = np.array([1.0, 0.0])
    data = Retrieval({"q": "query"}, corpus, {"q": {"d1", "d4", "d11"}})
    scores = task_kind("retrieval").score(data, embedder(vectors))
    relevance = np.array([[1.0 if f"d{i}" in {"d1", "d4", "d11"} else 0.0 for i in range(12)]])
    cosines = np.array([[0.95 - 0.08 * i for i in range(12)]])
    assert scores["map_at_100"] == pytest.approx(100 * (1 / 2 + 2 / 5 + 3 / 12) / 3)
    assert scores["useb_map_at_100"] == pytest.approx(100 * average_precision_score(relevance[0], cosines[0]))
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert scores["ndcg_at_10"] == pytest.approx(100 * (1 / math.log2(3) + 1 / math.log2(6)) / ideal)
    assert scores["ndcg_at_10"] == pytest.approx(100 * ndcg_score(relevance, cosines, k=10))
    assert scores["mrr_at_10"] == pytest.approx(100 / 2)
    assert scores["recall_at_100"] == pytest.approx(100.0)


def test_the_suite_averages_subsets_as_useb_and_each_kind_by_its_main_metric():
    pairs, vectors = pair_task([0.9, 0.1, 0.8, 0.2], [1, 0, 1, 0])
    flipped, more = pair_task([0.1, 0.9, 0.3, 0.6], [1, 0, 1, 0])
    flipped = Pairs([f"x{t}" for t in flipped.s1], [f"x{t}" for t in flipped.s2], flipped.gold)
    vectors.update({f"x{t}": v for t, v in more.items()})
    sts, sts_vectors = pair_task([0.9, 0.5, 0.1], [4.0, 2.0, 1.0])
    sts = Pairs([f"s{t}" for t in sts.s1], [f"s{t}" for t in sts.s2], sts.gold)
    vectors.update({f"s{t}": v for t, v in sts_vectors.items()})
    suite = EvalSuite(
        {
            "twitterpara": EvalData("twitterpara", {"turl": pairs, "pit": flipped}, "c1", kind="pair_classification"),
            "sts12": EvalData("sts12", {"all": sts}, "c2"),
        }
    )
    scores = suite.score(np.stack([vectors[t] for t in suite.sentences]))
    turl = 100 * average_precision_score([1, 0, 1, 0], [0.9, 0.1, 0.8, 0.2])
    pit = 100 * average_precision_score([1, 0, 1, 0], [0.1, 0.9, 0.3, 0.6])
    assert scores["twitterpara_turl_ap"] == pytest.approx(turl) and scores["twitterpara_pit_ap"] == pytest.approx(pit)
    assert scores["twitterpara_ap"] == pytest.approx((turl + pit) / 2)
    assert scores["mean_pair_classification_ap"] == scores["twitterpara_ap"]
    assert scores["mean_spearman"] == scores["sts12_spearman"] == pytest.approx(100.0)
    assert "useb_avg" not in scores  # three of USEB's four tasks are missing
    assert {name: data.main for name, data in suite.sets.items()} == {"twitterpara": "ap", "sts12": "spearman"}


def useb_cqadupstack(cosines: np.ndarray, doc_ids: list[str], duplicates: dict[str, list[str]]) -> tuple[float, float]:
    """USEB's `CQADupStackEvaluator.compute_metrics`, rewritten from its code: per query, the top 100
    of the pool by cosine; AP = scikit-learn's average precision of those 100 if a duplicate is among
    them, else 0, averaged over every query; nDCG@10 with the ideal from the query's listed
    duplicates (pool or not), over the queries that list one. (MAP, nDCG)."""
    aps, ndcgs = [], []
    for row, listed in zip(cosines, duplicates.values()):
        top = np.argsort(-row)[:100]
        hit = [1 if doc_ids[i] in set(listed) else 0 for i in top]
        aps.append(average_precision_score(hit, row[top]) if 1 in hit else 0)
        if listed:
            dcg = sum(hit[i] / np.log2(i + 2) for i in range(10))
            ndcgs.append(dcg / sum(1 / np.log2(i + 2) for i in range(min(10, len(listed)))))
    return float(np.mean(aps)), float(np.mean(ndcgs))


def test_retrieval_scores_every_query_as_useb_and_trec_eval_do():
    """USEB's CQADupStack rule (every query; AP 0 when no duplicate is in the top 100) and trec_eval's
    MAP@100 and nDCG@10 (pytrec_eval): duplicates missing from the pool stay relevant. Queries
    `gone` (its duplicate is not in the pool), `none` (no duplicate listed) and `half` (one of two
    missing) are what the rule before this change left out or cut down."""
    import pytrec_eval

    rng = np.random.default_rng(7)
    doc_ids = [f"d{i}" for i in range(150)]
    duplicates = {
        "found": ["d3", "d40", "d141"],
        "gone": ["q-elsewhere"],
        "none": [],
        "half": ["d7", "q-other"],
        "deep": ["d11"],
    }
    texts = {d: f"text {d}" for d in doc_ids} | {q: f"query {q}" for q in duplicates}
    vectors = {t: v / np.linalg.norm(v) for t, v in zip(texts.values(), rng.normal(size=(len(texts), 6)))}
    data = Retrieval(
        {q: texts[q] for q in duplicates}, {d: texts[d] for d in doc_ids}, {q: set(d) for q, d in duplicates.items()}
    )
    scores = task_kind("retrieval").score(data, embedder(vectors))
    cosines = np.array([[vectors[texts[d]] @ vectors[texts[q]] for d in doc_ids] for q in duplicates])
    useb_map, useb_ndcg = useb_cqadupstack(cosines, doc_ids, duplicates)
    assert scores["useb_map_at_100"] == pytest.approx(100 * useb_map)
    assert scores["ndcg_at_10"] == pytest.approx(100 * useb_ndcg)

    qrels = {q: {d: 1 for d in listed} or {"d0": 0} for q, listed in duplicates.items()}
    run = {q: {d: float(c) for d, c in zip(doc_ids, row)} for q, row in zip(duplicates, cosines)}
    trec = pytrec_eval.RelevanceEvaluator(qrels, {"map_cut_100", "ndcg_cut_10"}).evaluate(run)
    assert scores["map_at_100"] == pytest.approx(100 * np.mean([trec[q]["map_cut_100"] for q in duplicates]))
    assert scores["ndcg_at_10"] == pytest.approx(
        100 * np.mean([trec[q]["ndcg_cut_10"] for q in duplicates if duplicates[q]])
    )
    in_pool = [q for q, listed in duplicates.items() if set(listed) & set(doc_ids)]
    assert scores["map_at_100"] != pytest.approx(
        100 * np.mean([trec[q]["map_cut_100"] for q in in_pool])
    )  # the fixture tells the rules apart


def test_judged_reranking_is_trec_evals_average_precision():
    """pytrec_eval on USEB's SciDocs input: every query in the run counts, relevant papers that could
    not be ranked stay in the denominator, tied candidates in trec_eval's order (id descending)."""
    import pytrec_eval

    from trainables.evaluation.domain_sets import scidocs_task

    rng = np.random.default_rng(3)
    corpus = {f"p{i:02d}": {"title": f"paper {i}"} for i in range(40)}
    corpus["p30"]["title"] = corpus["p31"]["title"] = "the same title"  # tie: p31 (not relevant) ranks first
    corpus["p32"] = {"title": None}
    corpus["p33"] = {"title": ""}
    qrels = {
        "p00": {"p01": 1, "p02": 1, "p32": 1, **{f"p{i:02d}": 0 for i in range(10, 16)}},  # one relevant untitled
        "p03": {"p33": 1, "p32": 1, "p10": 0, "p11": 0},  # every relevant untitled: AP 0
        "p04": {"p05": 1, "p06": 1},  # no negative
        "p07": {"p30": 1, "p31": 0, "p12": 0, "p99": 1},  # a tie, and a relevant paper not in the corpus
        "p32": {"p01": 1, "p10": 0},  # an untitled query: not in the run
    }
    judged = scidocs_task(corpus, qrels)
    titles = {record["title"] for record in corpus.values() if record["title"]}
    vectors = {t: v / np.linalg.norm(v) for t, v in zip(sorted(titles), rng.normal(size=(len(titles), 5)))}
    scores = task_kind("reranking").score(judged, embedder(vectors))

    def title(paper):
        return (corpus.get(paper) or {}).get("title")

    run = {
        q: {p: float(vectors[title(p)] @ vectors[title(q)]) for p in papers if title(p)}
        for q, papers in qrels.items()
        if title(q)
    }
    trec = pytrec_eval.RelevanceEvaluator(qrels, {"map", "recip_rank"}).evaluate(run)
    assert scores["queries"] == len(trec) == 4
    assert scores["map"] == pytest.approx(100 * np.mean([r["map"] for r in trec.values()]))
    assert scores["mrr"] == pytest.approx(100 * np.mean([r["recip_rank"] for r in trec.values()]))
    assert trec["p03"]["map"] == 0 and 0 < trec["p07"]["map"] < 1
