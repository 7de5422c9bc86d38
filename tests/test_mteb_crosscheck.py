"""The suite's metrics held against mteb's evaluators and pytrec_eval (the `test` extra) on the same
embeddings: the tiny BERT through the mteb adapter (trainables/evaluation/mteb_encoder.py), local
STS-B and MRPC pairs, and re-ranking and retrieval sets built from STS-B sentences.

Where the definitions agree the scores agree within 1e-4 (mteb's fractions; the suite's x100 are
divided by 100). Where they do not, a test shows the documented difference:
- pair classification: MTEB 2's main score `max_ap` is the best AP over cosine, dot, Euclidean and
  Manhattan; the suite's `ap` (MTEB 1's main score) is the cosine's alone;
- re-ranking: MTEB 2 scores a query with no negative candidate (AP 1); the suite leaves it out, as
  MTEB 1's evaluator did;
- retrieval: USEB's `useb_map_at_100` divides by the relevant documents found in the top 100, trec_eval's
  `map_cut_100` (the suite's `map_at_100`) by all of the query's relevant documents.
Run with `pytest -m slow tests/test_mteb_crosscheck.py`.
"""

from __future__ import annotations

import numpy as np
import pytest

mteb = pytest.importorskip("mteb")
pytest.importorskip("pytrec_eval")

from mteb.timing import TimingStack  # noqa: E402

from trainables.evaluation.task_kinds import Pairs, Rerank, Retrieval, task_kind  # noqa: E402

# importing mteb alone takes seconds; its evaluators run several per test
pytestmark = [pytest.mark.slow, pytest.mark.mteb]
ENCODE = {"batch_size": 64}


@pytest.fixture(scope="module")
def encoder(tiny_models):
    from trainables.evaluation.mteb_encoder import from_reference

    encoder = from_reference(tiny_models["bert"])
    encode, cache = encoder.embed, {}

    def embed(texts):  # each text once: the same rows for both sides, and fast
        missing = [t for t in dict.fromkeys(texts) if t not in cache]
        if missing:
            cache.update(zip(missing, encode(missing)))
        return np.stack([cache[t] for t in texts])

    encoder.embed = embed
    return encoder


@pytest.fixture(scope="module")
def unit(encoder):
    """The suite's embed: the adapter's rows, unit-normed (float64), as the suite scores them."""

    def embed(texts):
        rows = np.asarray(encoder.embed(list(texts)), dtype=np.float64)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    return embed


@pytest.fixture(scope="module")
def sentences(stsb_sentences):
    return list(dict.fromkeys(stsb_sentences))[:400]  # unique: equal texts would tie


def mteb_subset(task_name: str, rows: dict, encoder):
    from datasets import Dataset

    task = mteb.get_task(task_name)
    return task._evaluate_subset(
        encoder,
        Dataset.from_dict(rows),
        hf_split="test",
        hf_subset="default",
        encode_kwargs=ENCODE,
        timer=TimingStack(),
    )


def test_sts_spearman_and_pearson_equal_mtebs_sts_evaluator(encoder, unit, data_dir):
    from trainables.data.stsb import load_stsb

    test = load_stsb(data_dir, splits=("test",))["test"][:200]
    pairs = Pairs([e.sentence1 for e in test], [e.sentence2 for e in test], np.array([e.score for e in test]))
    ours = task_kind("sts").score(pairs, unit)
    theirs = mteb_subset(
        "STSBenchmark", {"sentence1": pairs.s1, "sentence2": pairs.s2, "score": list(pairs.gold)}, encoder
    )
    assert ours["spearman"] / 100 == pytest.approx(theirs["cosine_spearman"], abs=1e-4)
    assert ours["pearson"] / 100 == pytest.approx(theirs["cosine_pearson"], abs=1e-4)


@pytest.fixture(scope="module")
def mrpc_scores(encoder, unit, data_dir):
    from trainables.data.mrpc import load_mrpc

    test = load_mrpc(data_dir, splits=("test",))["test"][:200]
    pairs = Pairs([e.sentence1 for e in test], [e.sentence2 for e in test], np.array([e.score for e in test]))
    ours = task_kind("pair_classification").score(pairs, unit)
    rows = {"sentence1": pairs.s1, "sentence2": pairs.s2, "labels": [int(v) for v in pairs.gold]}
    return ours, mteb_subset("TwitterSemEval2015", rows, encoder)


def test_pair_classification_ap_accuracy_f1_equal_mtebs_cosine_scores(mrpc_scores):
    ours, theirs = mrpc_scores
    for metric in ("ap", "accuracy", "f1", "precision", "recall"):
        assert ours[metric] / 100 == pytest.approx(theirs[f"cosine_{metric}"], abs=1e-4), metric


def test_pair_classification_mteb2_main_score_is_the_best_ap_over_similarity_functions_not_the_cosine(mrpc_scores):
    ours, theirs = mrpc_scores
    functions = {name: theirs[f"{name}_ap"] for name in ("cosine", "dot", "euclidean", "manhattan")}
    assert theirs["max_ap"] == max(functions.values())
    assert max(functions, key=functions.get) != "cosine"  # on this model another function wins...
    assert theirs["max_ap"] - ours["ap"] / 100 > 1e-4  # ...so MTEB 2's main score is above the suite's


@pytest.fixture(scope="module")
def rerank(sentences):
    rng = np.random.default_rng(0)
    texts = iter(rng.permutation(sentences).tolist())
    queries, positives, negatives = [], [], []
    for _ in range(20):
        queries.append(next(texts))
        positives.append([next(texts) for _ in range(rng.integers(1, 4))])
        negatives.append([next(texts) for _ in range(rng.integers(3, 8))])
    return Rerank(queries, positives, negatives)


def mteb_ranking(encoder, queries: dict, corpus: dict, candidates: dict, qrels: dict, k_values):
    """mteb 2's retrieval scoring (pytrec_eval underneath) of the cosines the adapter's encoder gives."""
    from mteb._evaluators.retrieval_metrics import calculate_retrieval_scores

    embed = lambda texts: encoder.embed(list(texts))
    results = {}
    for query_id, text in queries.items():
        ids = candidates[query_id]
        cosines = encoder.similarity(embed([text]), embed([corpus[i] for i in ids]))[0]
        results[query_id] = {doc: float(c) for doc, c in zip(ids, np.asarray(cosines))}
    return calculate_retrieval_scores(results, qrels, k_values)


def rerank_as_retrieval(subset: Rerank):
    """MTEB 2's layout of a re-ranking set: every candidate a corpus document, top_ranked per query."""
    queries, corpus, candidates, qrels = {}, {}, {}, {}
    for q, (query, pos, neg) in enumerate(zip(subset.queries, subset.positives, subset.negatives)):
        queries[f"q{q}"] = query
        ids = [f"q{q}-d{i}" for i in range(len(pos) + len(neg))]
        corpus.update(zip(ids, [*pos, *neg]))
        candidates[f"q{q}"] = ids
        qrels[f"q{q}"] = {doc: int(i < len(pos)) for i, doc in enumerate(ids)}
    return queries, corpus, candidates, qrels


def test_reranking_map_and_mrr_at_10_equal_mteb2s_map_at_1000_and_mrr_at_10(encoder, unit, rerank):
    ours = task_kind("reranking").score(rerank, unit)
    theirs = mteb_ranking(encoder, *rerank_as_retrieval(rerank), k_values=[10, 1000])
    assert ours["queries"] == 20
    assert ours["map"] / 100 == pytest.approx(theirs.map["MAP@1000"], abs=1e-4)
    assert ours["mrr_at_10"] / 100 == pytest.approx(theirs.mrr["MRR@10"], abs=1e-4)
    per_query = [theirs.all_scores[f"q{q}"]["map_cut_1000"] for q in range(20)]
    assert ours["map"] / 100 == pytest.approx(np.mean(per_query), abs=1e-9)  # pytrec_eval's own values, unrounded


def test_reranking_a_query_without_negatives_counts_in_mteb2_but_not_in_the_suite(encoder, unit, rerank):
    lopsided = Rerank(
        [*rerank.queries, "a query"], [*rerank.positives, ["its only candidate"]], [*rerank.negatives, []]
    )
    ours = task_kind("reranking").score(lopsided, unit)
    theirs = mteb_ranking(encoder, *rerank_as_retrieval(lopsided), k_values=[1000])
    kept = [theirs.all_scores[f"q{q}"]["map_cut_1000"] for q in range(20)]
    assert ours["queries"] == 20 and ours["map"] / 100 == pytest.approx(np.mean(kept), abs=1e-9)
    assert theirs.all_scores["q20"]["map_cut_1000"] == 1.0
    assert theirs.map["MAP@1000"] == pytest.approx((sum(kept) + 1.0) / 21, abs=1e-5)


@pytest.fixture(scope="module")
def retrieval(sentences):
    rng = np.random.default_rng(1)
    texts = rng.permutation(sentences).tolist()
    queries = {f"q{i}": texts[i] for i in range(15)}
    corpus = {f"d{i}": text for i, text in enumerate(texts[15:215])}
    relevant = {q: {f"d{i}" for i in rng.choice(200, size=rng.integers(1, 5), replace=False)} for q in queries}
    return Retrieval(queries, corpus, relevant)


@pytest.fixture(scope="module")
def retrieval_scores(encoder, unit, retrieval):
    ours = task_kind("retrieval").score(retrieval, unit)
    qrels = {q: {d: 1 for d in docs} for q, docs in retrieval.relevant.items()}
    everything = {q: list(retrieval.corpus) for q in retrieval.queries}
    return ours, mteb_ranking(encoder, retrieval.queries, retrieval.corpus, everything, qrels, [10, 100])


def test_retrieval_ndcg_at_10_map_at_100_and_mrr_equal_pytrec_eval(retrieval_scores):
    ours, theirs = retrieval_scores
    assert ours["ndcg_at_10"] / 100 == pytest.approx(theirs.ndcg["NDCG@10"], abs=1e-4)
    assert ours["map_at_100"] / 100 == pytest.approx(theirs.map["MAP@100"], abs=1e-4)
    assert ours["mrr_at_10"] / 100 == pytest.approx(theirs.mrr["MRR@10"], abs=1e-4)
    assert ours["recall_at_100"] / 100 == pytest.approx(theirs.recall["Recall@100"], abs=1e-4)
    ndcg = [scores["ndcg_cut_10"] for scores in theirs.all_scores.values()]
    assert ours["ndcg_at_10"] / 100 == pytest.approx(np.mean(ndcg), abs=1e-4)  # unrounded, float32 cosines


def test_useb_map_at_100_divides_by_the_relevant_documents_found_not_by_all_of_them(retrieval_scores):
    ours, theirs = retrieval_scores
    per_query = theirs.all_scores.values()
    assert any(0 < q["recall_100"] < 1 for q in per_query)  # a query with relevant documents beyond the top 100
    useb = [q["map_cut_100"] / q["recall_100"] if q["recall_100"] else 0.0 for q in per_query]
    assert ours["useb_map_at_100"] / 100 == pytest.approx(np.mean(useb), abs=1e-4)
    assert ours["useb_map_at_100"] - ours["map_at_100"] > 0.1  # x100: the two definitions differ here
