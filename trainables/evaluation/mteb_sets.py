"""MTEB's versions of the domain sets (TwitterURLCorpus, TwitterSemEval2015, AskUbuntuDupQuestions,
SciDocsRR, CQADupstackRetrieval), registered beside the USEB sets of domain_sets.py: each is read from
its copy on the hub (`--data-dir hub`, or a folder in the hub's layout under the data dir: hub_copies.py)
or, where MTEB built it from released files, from those files with domain_sets.py's readers. The label
rule, the refusals and the scoring are domain_sets.py's."""

from __future__ import annotations

import hashlib
from pathlib import Path

from trainables.core.errors import DataFormatError
from trainables.evaluation.domain_sets import (
    ASKUBUNTU_HINT,
    CQA_FORUMS,
    TURL_FILE,
    TURL_HINT,
    check_labels,
    check_scorable,
    joined,
    read_askubuntu_queries,
    read_pit,
    read_titles,
    read_url_corpus,
    release_or_hub_copy,
)
from trainables.evaluation.hub_copies import HubCopy, is_hub
from trainables.evaluation.sets import EvalData, EvalSet, SetInfo, check_data_dir, files_digest, register_eval_set
from trainables.evaluation.task_kinds import Pairs, Rerank, Retrieval


def hub_pairs(rows: list[dict], where: str) -> Pairs:
    """MTEB's pair-classification layout: rows of `sent1`, `sent2`, `labels` lists (or one pair a row)."""
    s1, s2, labels = [], [], []
    for row in rows:
        missing = [c for c in ("sent1", "sent2", "labels") if c not in row]
        if missing:
            raise DataFormatError(where, f"no column(s) {', '.join(missing)} (found {', '.join(row)})")
        many = isinstance(row["labels"], list)
        s1 += row["sent1"] if many else [row["sent1"]]
        s2 += row["sent2"] if many else [row["sent2"]]
        labels += row["labels"] if many else [row["labels"]]
    return Pairs(s1, s2, check_labels([int(v) for v in labels], where))


class HubOrRelease(EvalSet):
    """One of MTEB's sets: its hub copy (`--data-dir hub`, or a folder in the hub's layout), else,
    where MTEB built it from released files (`release_files`, a non-empty tuple), those files
    (`from_release(folder)` -> the subset's data); `from_rows(rows, where)` reads the hub's rows."""

    hub: HubCopy
    release_files: tuple[str, ...] = ()
    hint = ""

    def load(self, data_dir) -> EvalData:
        if not is_hub(data_dir):
            check_data_dir(data_dir, self.name)
        if self.release_files and not is_hub(data_dir) and self.hub.folder(data_dir) is None:
            folder = release_or_hub_copy(data_dir, self.release_files, self.name, self.hint, self.hub)
            checksum = files_digest(folder / f for f in self.release_files)
            data = EvalData(self.name, {"all": self.from_release(folder)}, checksum, self.kind)
            return check_scorable(data, f"{folder} ({', '.join(self.release_files)})")
        rows, checksum = self.hub.rows(data_dir)
        data = EvalData(self.name, {"all": self.from_rows(rows, self.hub.describe())}, checksum, self.kind)
        return check_scorable(data, self.hub.describe())

    def from_release(self, folder: Path):
        raise NotImplementedError

    def from_rows(self, rows: list[dict], where: str):
        return {"pair_classification": hub_pairs, "reranking": hub_rerank}[self.kind](rows, where)


@register_eval_set("twitterurlcorpus")
class TwitterUrlCorpusMteb(HubOrRelease):
    kind, description = "pair_classification", "MTEB's TwitterURLCorpus: the URL corpus's train + test"
    hub = HubCopy("mteb/twitterurlcorpus-pairclassification")
    release_files = ("Twitter_URL_Corpus_train.txt", TURL_FILE)
    hint = TURL_HINT.replace("test file", "train and test files")
    info = SetInfo(
        "TwitterURLCorpus",
        files="`Twitter_URL_Corpus_train.txt` and `..._test.txt` (51,534 pairs)",
        hub="`mteb/twitterurlcorpus-pairclassification`",
    )

    def from_release(self, folder: Path) -> Pairs:
        return joined([read_url_corpus(folder / f) for f in self.release_files])


@register_eval_set("twittersemeval2015")
class TwitterSemEval2015(HubOrRelease):
    kind, description = "pair_classification", "MTEB's TwitterSemEval2015: PIT-2015 train + dev + test"
    hub = HubCopy("mteb/twittersemeval2015-pairclassification")
    release_files = ("train.data", "dev.data", "test.data")
    hint = "Put PIT-2015's train.data, dev.data and test.data there (the SemEval-PIT2015 release's data/ folder)"
    info = SetInfo(
        "TwitterSemEval2015",
        files="`train.data`, `dev.data`, `test.data` (the full release zip in `cocoxu/SemEval-PIT2015`; 16,777 pairs)",
        hub="`mteb/twittersemeval2015-pairclassification`",
    )

    def from_release(self, folder: Path) -> Pairs:
        return joined([read_pit(folder / f) for f in self.release_files])


def hub_rerank(rows: list[dict], where: str) -> Rerank:
    """MTEB's reranking layout: `query`, `positive` (list), `negative` (list) per row."""
    for row in rows[:1]:
        missing = [c for c in ("query", "positive", "negative") if c not in row]
        if missing:
            raise DataFormatError(where, f"no column(s) {', '.join(missing)} (found {', '.join(row)})")
    return Rerank([r["query"] for r in rows], [list(r["positive"]) for r in rows], [list(r["negative"]) for r in rows])


@register_eval_set("askubuntudupquestions")
class AskUbuntuDupQuestions(HubOrRelease):
    kind, description = "reranking", "MTEB's AskUbuntuDupQuestions: dev + test queries with a positive"
    hub = HubCopy("mteb/askubuntudupquestions-reranking")
    release_files, hint = ("text_tokenized.txt.gz", "dev.txt", "test.txt"), ASKUBUNTU_HINT
    info = SetInfo(
        "AskUbuntuDupQuestions",
        files="the AskUbuntu files above (with `dev.txt`)",
        hub="`mteb/askubuntudupquestions-reranking`",
    )

    def from_release(self, folder: Path) -> Rerank:
        titles = read_titles(folder / self.release_files[0])
        dev, test = (read_askubuntu_queries(folder / f, titles) for f in self.release_files[1:])
        return Rerank(dev.queries + test.queries, dev.positives + test.positives, dev.negatives + test.negatives)


@register_eval_set("scidocsrr")
class SciDocsRR(HubOrRelease):
    kind, description = "reranking", "MTEB's SciDocsRR (hub copy or a folder in its layout)"
    hub = HubCopy("mteb/scidocs-reranking")
    info = SetInfo("SciDocsRR", files="—", hub="`mteb/scidocs-reranking`")


def hub_retrieval(corpus_rows: list[dict], query_rows: list[dict], qrel_rows: list[dict], where: str) -> Retrieval:
    """BEIR's layout as MTEB reads it: corpus `_id`, `title`, `text` (a document is "title text");
    queries `_id`, `text`; qrels `query-id`, `corpus-id`, `score` (> 0 relevant). Only the queries
    with a relevant document are scored, as MTEB keeps them."""
    for rows, columns in (
        (corpus_rows, ("_id", "text")),
        (query_rows, ("_id", "text")),
        (qrel_rows, ("query-id", "corpus-id")),
    ):
        missing = [c for c in columns if rows and c not in rows[0]]
        if missing:
            raise DataFormatError(where, f"no column(s) {', '.join(missing)} (found {', '.join(rows[0])})")
    relevant: dict[str, set[str]] = {}
    for row in qrel_rows:
        if float(row.get("score", 1)) > 0:
            relevant.setdefault(str(row["query-id"]), set()).add(str(row["corpus-id"]))
    corpus = {str(r["_id"]): f"{r.get('title') or ''} {r['text']}".strip() for r in corpus_rows}
    queries = {str(r["_id"]): r["text"] for r in query_rows if str(r["_id"]) in relevant}
    return Retrieval(queries, corpus, relevant)


@register_eval_set("cqadupstackretrieval")
class CQADupStackRetrieval(EvalSet):
    kind = "retrieval"
    description = "MTEB's CQADupstackRetrieval: 12 forums, title + body documents; nDCG@10 averaged (hub or its layout)"
    info = SetInfo(
        "CQADupStackRetrieval",
        files="—",
        hub="`mteb/cqadupstack-<forum>` (12 repositories; configs corpus, queries and the test qrels)",
    )

    def load(self, data_dir) -> EvalData:
        if not is_hub(data_dir):
            check_data_dir(data_dir, self.name)
        subsets, checksums = {}, []
        for forum in CQA_FORUMS:
            repo = f"mteb/cqadupstack-{forum}"
            parts = [
                HubCopy(repo, "corpus", "corpus"),
                HubCopy(repo, "queries", "queries"),
                HubCopy(repo, None, "test"),
            ]
            (corpus, c1), (queries, c2), (qrels, c3) = (part.rows(data_dir) for part in parts)
            subsets[forum] = hub_retrieval(corpus, queries, qrels, repo)
            checksums += [c1, c2, c3]
        data = EvalData(self.name, subsets, hashlib.sha256("".join(checksums).encode()).hexdigest()[:16], self.kind)
        return check_scorable(data, "mteb/cqadupstack-<forum>")
