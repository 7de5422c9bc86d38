"""Task kinds of the evaluation suite: what a set's data holds, which texts it encodes, and how it
is scored from cosine similarities (a new kind is one class registered here).

| kind                  | subset data                                          | metrics x100 (main first)        |
|-----------------------|------------------------------------------------------|----------------------------------|
| `sts`                 | `Pairs`: two sentences, a gold score                 | spearman, pearson (see EvalSuite |
|                       |                                                      | for pooling)                     |
| `pair_classification` | `Pairs`: two texts and a 0/1 label                   | ap, accuracy, f1, precision,     |
|                       |                                                      | recall (+ thresholds, cosine)    |
| `reranking`           | `Rerank`: a query, positives, negatives; or          | map, mrr_at_10, mrr              |
|                       | `Judged`: a query, ranked candidates, relevant counts |                                 |
| `retrieval`           | `Retrieval`: queries, corpus, relevance              | ndcg_at_10, map_at_100,          |
|                       |                                                      | useb_map_at_100, ...             |

How each is computed (MTEB's evaluators, and USEB's where the TSDAE paper's sets follow it):
- pair classification: cosine of the two texts; `ap` = scikit-learn's `average_precision_score`
  (labels against cosine); the best accuracy and the best F1 over thresholds, with the threshold,
  by sentence-transformers' `BinaryClassificationEvaluator` searches.
- reranking, `Rerank` (MTEB's sets, USEB's AskUbuntu): per query, the cosine of the query with each
  candidate; `map` = the mean over queries of `average_precision_score` (is-positive against cosine),
  `mrr_at_10` = the mean of 1/rank of the first positive within the top ten (0 when none; MTEB's),
  `mrr` the same without a cutoff (USEB's). A query without a positive or without a negative is left
  out (MTEB's rule), and the count scored is reported as `queries`.
- reranking, `Judged` (USEB's SciDocs, scored there by pytrec_eval): trec_eval's rule. Every query
  counts; its candidates are ranked by cosine, ties in the order given (the reader gives trec_eval's:
  document id descending); `map` = the sum of precision at the rank of each relevant candidate over
  all the query's relevant documents, those that could not be ranked included (0 when none is
  ranked); `mrr_at_10`, `mrr` as above.
- retrieval: every query against the whole corpus by cosine, ties broken by corpus order; every
  query counts, a relevant document missing from the corpus counts as relevant and never retrieved
  (trec_eval's and USEB's qrels). `map_at_100` = the sum of precision@k at each relevant document in
  the top 100 over the query's relevant documents (trec_eval's `map_cut_100`, MTEB's);
  `useb_map_at_100` = scikit-learn's average precision of the top 100 (so over the relevant
  documents found there), 0 when none is (USEB's CQADupStack); `mrr_at_10` as above; these are
  averaged over every query, 0 for a query with nothing relevant. `ndcg_at_10` (linear gains, the
  ideal from all the query's relevant documents: trec_eval's `ndcg_cut_10`, USEB's) and
  `recall_at_100` are averaged over the queries with a relevant document (USEB's nDCG skips the
  others; MTEB's sets keep only those).

`unscorable(subset)` says why a subset cannot be scored (every query would score 0 whatever the
model, or nothing would be averaged), "" when it can: the set readers refuse such a subset.

A set of several subsets (e.g. TwitterPara's `turl` and `pit`) reports each subset's metrics as
`<subset>_<metric>` and, as USEB averages sub-datasets, each metric's mean over its subsets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from trainables.core.registry import Registry
from trainables.evaluation.metrics import correlations

Embed = Callable[[list[str]], np.ndarray]  # texts -> unit-norm float64 rows


@dataclass
class Pairs:
    """Two texts per row and a gold value: an STS score, or a 0/1 label for pair classification."""

    s1: list[str]
    s2: list[str]
    gold: np.ndarray

    def __len__(self) -> int:
        return len(self.gold)


@dataclass
class Rerank:
    """Per query: its positive and negative candidates (texts)."""

    queries: list[str]
    positives: list[list[str]]
    negatives: list[list[str]]

    def __len__(self) -> int:
        return len(self.queries)


@dataclass
class Judged:
    """Per query: its candidates in the order that breaks ties, which of them are relevant
    (`relevance`), and how many relevant documents it has in all (`relevant`, counting those that
    could not be ranked): trec_eval's input."""

    queries: list[str]
    candidates: list[list[str]]
    relevance: list[list[bool]]
    relevant: list[int]

    def __len__(self) -> int:
        return len(self.queries)


@dataclass
class Retrieval:
    """Queries and a corpus by id, and the corpus ids relevant to each query (`relevant`)."""

    queries: dict[str, str]
    corpus: dict[str, str]
    relevant: dict[str, set[str]]

    def __len__(self) -> int:
        return len(self.queries)


class TaskKind:
    """`texts(subset)`: what to encode; `score(subset, embed)`: metric -> value x100; `main`: the
    metric the set is ranked by."""

    name = ""
    main = ""

    def texts(self, subset) -> Iterable[str]:
        raise NotImplementedError

    def score(self, subset, embed: Embed) -> dict[str, float]:
        raise NotImplementedError

    def unscorable(self, subset) -> str:
        return ""


TASK_KINDS = Registry("task kind", TaskKind)


def pair_cosines(pairs: Pairs, embed: Embed) -> np.ndarray:
    return np.sum(embed(pairs.s1) * embed(pairs.s2), axis=1)


@TASK_KINDS.register("sts")
class STS(TaskKind):
    main = "spearman"

    def texts(self, subset: Pairs):
        return [*subset.s1, *subset.s2]

    def score(self, subset: Pairs, embed: Embed) -> dict[str, float]:
        return correlations(pair_cosines(subset, embed), subset.gold)


def best_thresholds(cosines: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Best accuracy and best F1 over cosine thresholds (sentence-transformers' searches), x100."""
    from sentence_transformers.sentence_transformer.evaluation import BinaryClassificationEvaluator as Search

    accuracy, accuracy_threshold = Search.find_best_acc_and_threshold(cosines, labels, True)
    f1, precision, recall, f1_threshold = Search.find_best_f1_and_threshold(cosines, labels, True)
    return {
        "accuracy": 100.0 * accuracy,
        "accuracy_threshold": float(accuracy_threshold),
        "f1": 100.0 * f1,
        "precision": 100.0 * precision,
        "recall": 100.0 * recall,
        "f1_threshold": float(f1_threshold),
    }


@TASK_KINDS.register("pair_classification")
class PairClassification(TaskKind):
    main = "ap"

    def texts(self, subset: Pairs):
        return [*subset.s1, *subset.s2]

    def score(self, subset: Pairs, embed: Embed) -> dict[str, float]:
        from sklearn.metrics import average_precision_score

        cosines, labels = pair_cosines(subset, embed), subset.gold.astype(np.int64)
        return {"ap": 100.0 * float(average_precision_score(labels, cosines)), **best_thresholds(cosines, labels)}


def reciprocal_rank(relevant_in_order: np.ndarray, cutoff: int) -> float:
    hits = np.flatnonzero(relevant_in_order[:cutoff])
    return 1.0 / (hits[0] + 1) if len(hits) else 0.0


def ranking_means(aps: list[float], rrs: list[tuple[float, float]]) -> dict[str, float]:
    """Reranking's metrics from each query's average precision and (reciprocal rank at ten, without a cutoff)."""
    return {
        "map": 100.0 * float(np.mean(aps)),
        "mrr_at_10": 100.0 * float(np.mean([at_10 for at_10, _ in rrs])),
        "mrr": 100.0 * float(np.mean([whole for _, whole in rrs])),
        "queries": float(len(aps)),
    }


@TASK_KINDS.register("reranking")
class Reranking(TaskKind):
    main = "map"

    def texts(self, subset: Rerank | Judged):
        if isinstance(subset, Judged):
            return [*subset.queries, *(t for ts in subset.candidates for t in ts)]
        return [
            *subset.queries,
            *(t for ts in subset.positives for t in ts),
            *(t for ts in subset.negatives for t in ts),
        ]

    def score(self, subset: Rerank | Judged, embed: Embed) -> dict[str, float]:
        if isinstance(subset, Judged):
            return self.score_judged(subset, embed)
        from sklearn.metrics import average_precision_score

        aps, rrs = [], []
        for query, positives, negatives in zip(subset.queries, subset.positives, subset.negatives):
            if not positives or not negatives:
                continue
            cosines = embed([*positives, *negatives]) @ embed([query])[0]
            relevant = np.array([1] * len(positives) + [0] * len(negatives))
            ranked = relevant[np.argsort(-cosines, kind="stable")]
            aps.append(average_precision_score(relevant, cosines))
            rrs.append((reciprocal_rank(ranked, 10), reciprocal_rank(ranked, len(ranked))))
        return ranking_means(aps, rrs)

    @staticmethod
    def score_judged(subset: Judged, embed: Embed) -> dict[str, float]:
        aps, rrs = [], []
        for query, candidates, relevance, n_relevant in zip(
            subset.queries, subset.candidates, subset.relevance, subset.relevant
        ):
            cosines = embed(candidates) @ embed([query])[0] if candidates else np.zeros(0)
            ranked = np.asarray(relevance, dtype=bool)[np.argsort(-cosines, kind="stable")]
            hits = np.flatnonzero(ranked)
            aps.append(float(np.sum(np.arange(1, len(hits) + 1) / (hits + 1)) / n_relevant) if n_relevant else 0.0)
            rrs.append((reciprocal_rank(ranked, 10), reciprocal_rank(ranked, len(ranked))))
        return ranking_means(aps, rrs)

    def unscorable(self, subset: Rerank | Judged) -> str:
        if isinstance(subset, Judged):
            if not any(any(relevance) for relevance in subset.relevance):
                return f"none of its {len(subset)} queries has a relevant candidate that can be ranked"
        elif not any(positives and negatives for positives, negatives in zip(subset.positives, subset.negatives)):
            return f"none of its {len(subset)} queries has both a positive and a negative candidate"
        return ""


def ranked_metrics(top: np.ndarray, cosines: np.ndarray, n_relevant: int) -> dict[str, float]:
    """The measures of one query from the relevance (0/1) of its top 100 documents, ranked, and their
    cosines; `n_relevant`: its relevant documents in all."""
    from sklearn.metrics import average_precision_score

    hits = np.flatnonzero(top)
    precisions = np.arange(1, len(hits) + 1) / (hits + 1)
    scores = {
        "map_at_100": float(np.sum(precisions) / n_relevant) if n_relevant else 0.0,
        "useb_map_at_100": float(average_precision_score(top, cosines)) if len(hits) else 0.0,
        "mrr_at_10": reciprocal_rank(top, 10),
    }
    if n_relevant:
        gains = top[:10] / np.log2(np.arange(2, min(10, len(top)) + 2))
        ideal = np.sum(1.0 / np.log2(np.arange(2, min(10, n_relevant) + 2)))
        scores.update({"ndcg_at_10": float(np.sum(gains) / ideal), "recall_at_100": len(hits) / n_relevant})
    return scores


@TASK_KINDS.register("retrieval")
class RetrievalTask(TaskKind):
    main = "ndcg_at_10"

    def texts(self, subset: Retrieval):
        return [*subset.queries.values(), *subset.corpus.values()]

    def score(self, subset: Retrieval, embed: Embed) -> dict[str, float]:
        ids = list(subset.corpus)
        documents = embed([subset.corpus[i] for i in ids])
        per_query = []
        for query_id, text in subset.queries.items():
            relevant = subset.relevant.get(query_id, set())
            cosines = documents @ embed([text])[0]
            top = np.argsort(-cosines, kind="stable")[:100]
            per_query.append(
                ranked_metrics(
                    np.array([ids[i] in relevant for i in top], dtype=np.float64), cosines[top], len(relevant)
                )
            )
        names = ("ndcg_at_10", "map_at_100", "useb_map_at_100", "mrr_at_10", "recall_at_100")
        return {name: 100.0 * float(np.mean([q[name] for q in per_query if name in q])) for name in names}

    def unscorable(self, subset: Retrieval) -> str:
        if not any(subset.relevant.get(q, set()) & subset.corpus.keys() for q in subset.queries):
            return f"none of its {len(subset)} queries has a relevant document in the corpus"
        return ""


def task_kind(name: str) -> TaskKind:
    """The registered kind `name` (SweepInputError naming the known ones otherwise)."""
    return TASK_KINDS.get(name)()
