"""Domain evaluation sets: the TSDAE paper's benchmark (USEB: AskUbuntu, CQADupStack, TwitterPara,
SciDocs) and MTEB's versions of them, registered beside the STS sets of sets.py.

Each set is found by its released files' own names anywhere under the data dir (symlinked folders
included); MTEB's versions are also read from the hub (`--data-dir hub`) or from a folder in the
hub's layout (hub_copies.py). Where a set comes from and how to fetch it: docs/data.md.

Each set's name in reports, its paper, release files and hub copy are its `SetInfo` (the rows of
docs/data.md's generated table); MTEB's versions are registered in mteb_sets.py.

Several subsets (TwitterPara's two, SciDocs' four tasks, CQADupStack's twelve forums) are averaged
without weights, as USEB and the TSDAE paper do; `useb_avg` is the mean of the four USEB tasks.

Label rule of the Twitter sets, as USEB and MTEB apply it: the first count of the label (the
annotators of six who say paraphrase in the URL corpus; the expert's 0-5 label in PIT's test; the
yes votes of five in PIT's crowd-labelled train and dev `(yes, no)`) >= 4 is a paraphrase, <= 2
is not, 3 is dropped. For PIT's train and dev this is stricter than the PIT release's own rule
(yes >= 3); it is the rule that gives MTEB's TwitterSemEval2015 counts (3,790 paraphrases, 12,987
not, of train + dev + test).

What a release cannot hold is refused as a `DataFormatError` naming the file (and the line, or the
JSON key) before anything is encoded: more votes than annotators (six in the URL corpus, five in
PIT's crowd), a line short of its columns, a torn or non-gzip `.gz`, torn, non-UTF-8 or wrongly typed
JSON, an id that is not in its corpus. So is a subset that cannot be scored (`TaskKind.unscorable`:
e.g. a CQADupStack forum none of whose test questions has a duplicate left in its pool, as an empty
forum in `corpus.json` leaves it), as STS sets with constant gold are.

Scoring follows USEB's code: SciDocs as pytrec_eval scores it (every titled query; an untitled or
unknown relevant paper stays relevant and is never retrieved; ties by paper id descending: `Judged`
in task_kinds.py); CQADupStack over every test question of a forum, a question whose duplicates are not in
the pool scoring 0 (task_kinds.py's retrieval kind).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from trainables.core.errors import DataFormatError, SweepInputError
from trainables.data._io import find_under, iter_lines, parse_float
from trainables.evaluation.hub_copies import HubCopy, is_hub
from trainables.evaluation.sets import EvalData, EvalSet, SetInfo, check_data_dir, files_digest, register_eval_set
from trainables.evaluation.task_kinds import Judged, Pairs, Rerank, Retrieval, task_kind


def find_release(data_dir, files: tuple[str, ...], set_name: str, hint: str) -> Path:
    """The folder under `data_dir` holding every file of `files` (identical copies: the first)."""
    if is_hub(data_dir):
        raise SweepInputError(f"evaluation set {set_name} has no hub copy; pass --data-dir with its files ({hint})")
    check_data_dir(data_dir, set_name)
    folders = [
        path.parent for path in find_under(data_dir, files[0]) if all((path.parent / f).is_file() for f in files)
    ]
    if not folders:
        raise SweepInputError(
            f"evaluation set {set_name}: no {' with '.join(files)} under {data_dir}. {hint}, or pass --data-dir"
        )
    if len({files_digest(folder / f for f in files) for folder in folders}) > 1:
        raise SweepInputError(
            f"evaluation set {set_name}: {len(folders)} different copies of {files[0]} under {data_dir} "
            f"({', '.join(map(str, folders))}); keep one of them"
        )
    return folders[0]


def release_or_hub_copy(data_dir, files: tuple[str, ...], set_name: str, hint: str, hub: HubCopy) -> Path:
    """`find_release`, its refusal also naming the other ways in: the hub copy's folder in the hub's
    layout, or `--data-dir hub`."""
    try:
        return find_release(data_dir, files, set_name, hint)
    except SweepInputError as missing:
        raise SweepInputError(
            f"{missing}; or put the hub copy {hub.repo_id} there in the hub's layout (a folder {hub.name}), "
            "or pass --data-dir hub where the hub can be reached"
        ) from None


def read_json(path: Path, hint: str):
    """The JSON document of `path`; torn or non-UTF-8 text is a DataFormatError naming its line."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataFormatError(path, f"not valid UTF-8 ({exc.reason} at byte {exc.start}); {hint}", line) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFormatError(path, f"not valid JSON ({exc.msg}, column {exc.colno}); {hint}", exc.lineno) from None


def expect(value, kind: type | tuple, path: Path, key: str, hint: str):
    """`value` if it is a `kind` (bool is never an int here), else a DataFormatError naming the key."""
    if isinstance(value, kind) and not (isinstance(value, bool) and kind is int):
        return value
    names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
    found = "null" if value is None else type(value).__name__
    raise DataFormatError(path, f"{key} should be {names.replace('NoneType', 'null')}, found {found}; {hint}")


def check_scorable(data: EvalData, where, hint: str = "") -> EvalData:
    """`data`, unless one of its subsets cannot be scored (a DataFormatError saying which and why)."""
    kind = task_kind(data.kind)
    for name, subset in data.subsets.items():
        reason = kind.unscorable(subset)
        if reason:
            part = f"{data.name} ({name})" if len(data.subsets) > 1 else data.name
            raise DataFormatError(where, f"{part}: {reason}, so it cannot be scored{'; ' + hint if hint else ''}")
    return data


def binary_label(votes: int, yes: int, no: int) -> int | None:
    """1 when `votes` >= `yes`, 0 when <= `no`, None (dropped) between."""
    return 1 if votes >= yes else 0 if votes <= no else None


def check_labels(labels: list[int], where) -> np.ndarray:
    if len(set(labels)) < 2:
        raise DataFormatError(where, f"{len(labels)} labelled pairs, all of one class: average precision is undefined")
    return np.asarray(labels, dtype=np.int64)


# --- Twitter URL Corpus (Lan et al. 2017) ------------------------------------------------------------
TURL_FILE = "Twitter_URL_Corpus_test.txt"
TURL_HINT = "Put the Twitter News URL Corpus's test file there (sentence, sentence, (n,6) votes, URL per line)"
VOTES = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*\)")
URL_ANNOTATORS, PIT_ANNOTATORS = 6, 5  # per pair: the URL corpus's (Lan et al. 2017), PIT's crowd (Xu et al. 2015)


def read_url_corpus(path: Path) -> Pairs:
    """Pairs of `Twitter_URL_Corpus_*.txt`: tab-separated s1, s2, `(n,6)`, URL; blank lines skipped."""
    s1, s2, labels = [], [], []
    for line_no, line in iter_lines(path, TURL_HINT):
        if not line.strip():
            continue
        fields = line.split("\t")
        match = VOTES.fullmatch(fields[2].strip()) if len(fields) >= 3 else None
        if match is None:
            raise DataFormatError(path, "expected sentence, sentence and (n,6) votes, tab-separated", line_no)
        yes, annotators = int(match.group(1)), int(match.group(2))
        if annotators > URL_ANNOTATORS:
            raise DataFormatError(
                path,
                f"votes {fields[2].strip()}: {annotators} annotators, but the corpus has {URL_ANNOTATORS} a pair",
                line_no,
            )
        if yes > annotators:
            raise DataFormatError(
                path, f"votes {fields[2].strip()}: {yes} yes votes of {annotators} annotators", line_no
            )
        label = binary_label(yes, 4, 2)
        if label is not None:
            s1.append(fields[0].strip())
            s2.append(fields[1].strip())
            labels.append(label)
    return Pairs(s1, s2, check_labels(labels, path))


@register_eval_set("turl")
class TwitterUrlTest(EvalSet):
    kind, description = "pair_classification", "Twitter News URL Corpus, test (USEB's TURL)"
    info = SetInfo(
        "TURL",
        reference="Lan et al. 2017",
        files="`Twitter_URL_Corpus_test.txt`: in the corpus authors' GitHub repository "
        "`lanwuwei/Twitter-URL-Corpus`, at the commit that added it (2018-02-01; later deleted from the tip)",
    )

    def load(self, data_dir) -> EvalData:
        folder = find_release(data_dir, (TURL_FILE,), self.name, TURL_HINT)
        return EvalData(
            self.name, {"turl": read_url_corpus(folder / TURL_FILE)}, files_digest([folder / TURL_FILE]), self.kind
        )


# --- PIT-2015 (Xu et al. 2015) ------------------------------------------------------------------------
PIT_HINT = "Put PIT-2015's test.data with test.label beside it there (the SemEval-PIT2015 release's data/ folder)"
PIT_COLUMNS = 7  # topic id, topic name, sentence 1, sentence 2, label, tags 1, tags 2


def pit_rows(path: Path) -> list[tuple[int, str, str, int, bool]]:
    """(line, sentence 1, sentence 2, first count, whether it is an expert label) of each pair of a
    PIT-2015 `.data` file: the expert's 0-5 label (test) or the `(yes, no)` votes of five (train, dev)."""
    rows = []
    for line_no, line in iter_lines(path, PIT_HINT):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != PIT_COLUMNS:
            raise DataFormatError(path, f"expected {PIT_COLUMNS} tab-separated fields, found {len(fields)}", line_no)
        raw = fields[4].strip()
        votes = VOTES.fullmatch(raw)
        if votes:
            yes, no = int(votes.group(1)), int(votes.group(2))
            if yes + no > PIT_ANNOTATORS:
                raise DataFormatError(
                    path,
                    f"votes {raw}: {yes + no} votes, but PIT's crowd has {PIT_ANNOTATORS} annotators a pair",
                    line_no,
                )
            rows.append((line_no, fields[2], fields[3], yes, False))
        elif raw.isdigit() and int(raw) <= 5:
            rows.append((line_no, fields[2], fields[3], int(raw), True))
        else:
            raise DataFormatError(path, f"label {raw!r} is neither an expert 0-5 nor (yes, no) votes", line_no)
    return rows


def read_pit(path: Path, rows: list | None = None) -> Pairs:
    """Pairs of a PIT-2015 `.data` file (its `pit_rows`, if read already) labelled by the module docstring's rule."""
    s1, s2, labels = [], [], []
    for _, first, second, count, _ in pit_rows(path) if rows is None else rows:
        label = binary_label(count, 4, 2)
        if label is not None:
            s1.append(first)
            s2.append(second)
            labels.append(label)
    return Pairs(s1, s2, check_labels(labels, path))


def check_pit_test_labels(data: Path, label: Path) -> list:
    """`test.data`'s rows, which must hold expert labels that `test.label` (true / false / ---- per line)
    agrees with."""
    rows = pit_rows(data)
    crowd = next((row for row in rows if not row[4]), None)
    if crowd:
        raise DataFormatError(data, "(yes, no) votes where the test split has the expert's 0-5 label", crowd[0])
    marks = [(n, line.split("\t")[0].strip()) for n, line in iter_lines(label, PIT_HINT) if line.strip()]
    if len(marks) != len(rows):
        raise DataFormatError(label, f"{len(marks)} labels for the {len(rows)} pairs of {data.name}")
    expected = {0: "false", 1: "false", 2: "false", 3: "----", 4: "true", 5: "true"}
    for (line_no, mark), row in zip(marks, rows):
        if expected[row[3]] != mark:
            raise DataFormatError(label, f"{mark!r} disagrees with {data.name}'s expert label {row[3]}", line_no)
    return rows


def load_pit_test(data_dir, set_name: str) -> tuple[Pairs, list[Path]]:
    folder = find_release(data_dir, ("test.data", "test.label"), set_name, PIT_HINT)
    rows = check_pit_test_labels(folder / "test.data", folder / "test.label")
    return read_pit(folder / "test.data", rows), [folder / "test.data", folder / "test.label"]


@register_eval_set("pit")
class PitTest(EvalSet):
    kind, description = "pair_classification", "PIT-2015 (SemEval-2015 Task 1), test (USEB's PIT)"
    info = SetInfo(
        "PIT",
        reference="Xu et al. 2015",
        files="`test.data` with `test.label` beside it: `cocoxu/SemEval-PIT2015` (`data/`), or the loose "
        "files in `cocoxu/twitterparaphrase` at its first commit (`SemEval-PIT2015/data/`)",
    )

    def load(self, data_dir) -> EvalData:
        pairs, paths = load_pit_test(data_dir, self.name)
        return EvalData(self.name, {"pit": pairs}, files_digest(paths), self.kind)


@register_eval_set("twitterpara")
class TwitterPara(EvalSet):
    kind, description = "pair_classification", "USEB's TwitterPara: TURL and PIT test sets, AP averaged"
    info = SetInfo("TwitterPara", files="both of the above")

    def load(self, data_dir) -> EvalData:
        turl = find_release(data_dir, (TURL_FILE,), "twitterpara (turl)", TURL_HINT) / TURL_FILE
        pit, pit_paths = load_pit_test(data_dir, "twitterpara (pit)")
        subsets = {"turl": read_url_corpus(turl), "pit": pit}
        return EvalData(self.name, subsets, files_digest([turl, *pit_paths]), self.kind)


def joined(parts: list[Pairs]) -> Pairs:
    return Pairs(
        [s for p in parts for s in p.s1], [s for p in parts for s in p.s2], np.concatenate([p.gold for p in parts])
    )


# --- MTEB's pair-classification copies ----------------------------------------------------------------


# --- AskUbuntu (Lei et al. 2016) ----------------------------------------------------------------------
ASKUBUNTU_HINT = (
    "Put the AskUbuntu release's text_tokenized.txt.gz (id, title, body per line) with test.txt and dev.txt "
    "(query id, similar ids, 20 candidate ids, BM25 scores) there"
)


def read_titles(path: Path) -> dict[str, str]:
    titles = {}
    for line_no, line in iter_lines(path, ASKUBUNTU_HINT):
        fields = line.split("\t")
        if len(fields) != 3:
            raise DataFormatError(
                path, f"expected id, title and body, tab-separated; found {len(fields)} fields", line_no
            )
        titles[fields[0].strip()] = fields[1].strip()
    return titles


def read_askubuntu_queries(path: Path, titles: dict[str, str]) -> Rerank:
    """Queries with a similar question among their candidates: its title against the candidates'."""
    queries, positives, negatives = [], [], []
    for line_no, line in iter_lines(path, ASKUBUNTU_HINT):
        fields = line.split("\t")
        if len(fields) != 4:
            raise DataFormatError(
                path,
                f"expected query id, similar ids, candidate ids and BM25 scores, tab-separated; found {len(fields)} "
                "fields",
                line_no,
            )
        for score in fields[3].split():
            parse_float(path, score, line_no, "BM25 score")
        query, similar, candidates = fields[0].strip(), set(fields[1].split()), fields[2].split()
        unknown = [i for i in (query, *candidates) if i not in titles]
        if unknown:
            raise DataFormatError(path, f"question {unknown[0]} is not in text_tokenized.txt.gz", line_no)
        if not similar & set(candidates):
            continue
        queries.append(titles[query])
        positives.append([titles[c] for c in candidates if c in similar])
        negatives.append([titles[c] for c in candidates if c not in similar])
    return Rerank(queries, positives, negatives)


@register_eval_set("askubuntu")
class AskUbuntu(EvalSet):
    kind, description = "reranking", "AskUbuntu test (Lei et al. 2016; USEB's): titles, 20 BM25 candidates each"
    info = SetInfo("AskUbuntu", files="`text_tokenized.txt.gz` with `dev.txt` and `test.txt` (`taolei87/askubuntu`)")

    def load(self, data_dir) -> EvalData:
        files = ("text_tokenized.txt.gz", "test.txt")
        folder = find_release(data_dir, files, self.name, ASKUBUNTU_HINT)
        titles = read_titles(folder / files[0])
        data = read_askubuntu_queries(folder / "test.txt", titles)
        checksum = files_digest(folder / f for f in files)
        return check_scorable(EvalData(self.name, {"test": data}, checksum, self.kind), folder / "test.txt")


# --- SciDocs (Cohan et al. 2020), as USEB builds it ----------------------------------------------------
SCIDOCS_TASKS = ("cite", "cocite", "coread", "coview")
SCIDOCS_HINT = (
    "Put USEB's scidocs/data.json there ({corpus: {id: {title}}, test: {task: {query: {paper: 0/1}}}}), or SciDocs' "
    "paper_metadata_view_cite_read.json with cite/, cocite/, coread/ and coview/ test.qrel files beside it"
)


def _scidocs_source(data_dir) -> tuple[dict, dict[str, dict], list[Path]]:
    """(corpus {id: {title}}, {task: qrels {query: {paper: relevance}}}, files read) from USEB's data.json
    or from the SciDocs release (metadata json + TREC qrel files `query 0 paper relevance`), checked."""
    check_data_dir(data_dir, "scidocs")
    useb = [p for p in find_under(data_dir, "data.json") if p.parent.name == "scidocs"]
    if useb:
        data = expect(read_json(useb[0], SCIDOCS_HINT), dict, useb[0], "the document", SCIDOCS_HINT)
        missing = [key for key in ("corpus", "test") if key not in data]
        if missing:
            raise DataFormatError(useb[0], f"no key(s) {', '.join(missing)}; {SCIDOCS_HINT}")
        test = expect(data["test"], dict, useb[0], "'test'", SCIDOCS_HINT)
        for task, qrels in test.items():
            for query, papers in expect(qrels, dict, useb[0], f"test.{task}", SCIDOCS_HINT).items():
                for paper, relevance in expect(papers, dict, useb[0], f"test.{task}.{query}", SCIDOCS_HINT).items():
                    expect(relevance, int, useb[0], f"test.{task}.{query}.{paper}", SCIDOCS_HINT)
        return check_scidocs_corpus(data["corpus"], useb[0], "corpus"), test, useb
    files = ("paper_metadata_view_cite_read.json", *(f"{task}/test.qrel" for task in SCIDOCS_TASKS))
    folder = find_release(data_dir, files[:1], "scidocs", SCIDOCS_HINT)
    if not all((folder / f).is_file() for f in files):
        raise SweepInputError(f"evaluation set scidocs: {folder} lacks one of {', '.join(files[1:])}. {SCIDOCS_HINT}")
    qrels = {}
    for task in SCIDOCS_TASKS:
        qrels[task] = {}
        for line_no, line in iter_lines(folder / task / "test.qrel"):
            fields = line.split()
            if len(fields) != 4 or not fields[3].lstrip("-").isdigit():
                raise DataFormatError(folder / task / "test.qrel", "expected: query 0 paper relevance", line_no)
            qrels[task].setdefault(fields[0], {})[fields[2]] = int(fields[3])
    corpus = check_scidocs_corpus(read_json(folder / files[0], SCIDOCS_HINT), folder / files[0], "the document")
    return corpus, qrels, [folder / f for f in files]


def check_scidocs_corpus(corpus, path: Path, key: str) -> dict:
    """`corpus` if it maps ids to records whose title, where there is one, is text or null."""
    for paper, record in expect(corpus, dict, path, key, SCIDOCS_HINT).items():
        expect(expect(record, dict, path, f"{key}.{paper}", SCIDOCS_HINT).get("title"), (str, type(None)), path,
               f"{key}.{paper}.title", SCIDOCS_HINT)  # fmt: skip
    return corpus


def scidocs_task(corpus: dict, qrels: dict) -> Judged:
    """One task as USEB gives it to pytrec_eval: each query with a title against its candidates with
    a title (an untitled or unknown paper is skipped as USEB's `_get_sent` skips it), candidates in
    trec_eval's tie order (paper id descending); relevance >= 1 relevant (trec_eval's level), every
    relevant paper counted, ranked or not."""

    def title(paper) -> str:
        return (corpus.get(paper) or {}).get("title") or ""

    queries, candidates, relevance, relevant = [], [], [], []
    for query, papers in qrels.items():
        if not title(query):
            continue
        ranked = sorted((p for p in papers if title(p)), reverse=True)
        queries.append(title(query))
        candidates.append([title(p) for p in ranked])
        relevance.append([papers[p] >= 1 for p in ranked])
        relevant.append(sum(value >= 1 for value in papers.values()))
    return Judged(queries, candidates, relevance, relevant)


@register_eval_set("scidocs")
class SciDocs(EvalSet):
    kind, description = "reranking", "SciDocs (USEB's): cite, co-cite, co-read, co-view; titles; MAP averaged"
    info = SetInfo(
        "SciDocs",
        reference="Cohan et al. 2020",
        files="USEB's `scidocs/data.json`, or SciDocs' `paper_metadata_view_cite_read.json` with "
        "`{cite,cocite,coread,coview}/test.qrel` (the `allenai/scidocs` data download)",
    )

    def load(self, data_dir) -> EvalData:
        if is_hub(data_dir):
            raise SweepInputError("evaluation set scidocs has no hub copy (scidocsrr is MTEB's); pass --data-dir")
        corpus, qrels, files = _scidocs_source(data_dir)
        missing = [task for task in SCIDOCS_TASKS if task not in qrels]
        if missing:
            raise DataFormatError(files[0], f"no test qrels of {', '.join(missing)}; {SCIDOCS_HINT}")
        subsets = {task: scidocs_task(corpus, qrels[task]) for task in SCIDOCS_TASKS}
        where = files[0] if len(files) == 1 else files[0].parent
        return check_scorable(EvalData(self.name, subsets, files_digest(files), self.kind), where, SCIDOCS_HINT)


# --- CQADupStack (Hoogeveen et al. 2015), as USEB builds it ---------------------------------------------
CQA_FORUMS = ("android", "english", "gaming", "gis", "mathematica", "physics", "programmers", "stats", "tex", "unix",
              "webmasters", "wordpress")  # fmt: skip
CQA_HINT = (
    "Put USEB's cqadupstack/corpus.json ({forum: {id: title}}) with retrieval_split.json "
    "({test: {forum: {id: [duplicate ids]}}}) there"
)


def cqadupstack_forum(
    forum: str, titles: dict[str, str], split: dict[str, list], paths: tuple[Path, Path]
) -> Retrieval:
    """One forum as USEB builds it: its split's questions (each must be in corpus.json) as queries
    against every other question of the forum (USEB takes the split's queries out of the pool), the
    listed duplicates relevant, those not in the pool included (never retrieved: such a query scores 0)."""
    corpus_path, split_path = paths
    if not titles:
        raise DataFormatError(
            corpus_path, f"forum {forum} is empty, so its {len(split)} test questions have no text (a partial "
            f"extraction?); {CQA_HINT}",
        )  # fmt: skip
    unknown = [q for q in split if q not in titles]
    if unknown:
        raise DataFormatError(
            split_path, f"test.{forum}: question {unknown[0]} (and {len(unknown) - 1} more) is not in corpus.json's "
            f"{forum}; {CQA_HINT}",
        )  # fmt: skip
    queries = {q: titles[q] for q in split}
    corpus = {i: text for i, text in titles.items() if i not in split}
    return Retrieval(queries, corpus, {q: set(duplicates) for q, duplicates in split.items()})


def read_cqadupstack(corpus_path: Path, split_path: Path) -> dict[str, Retrieval]:
    """The twelve forums of USEB's corpus.json and retrieval_split.json, their types checked."""
    corpus = expect(read_json(corpus_path, CQA_HINT), dict, corpus_path, "the document", CQA_HINT)
    document = expect(read_json(split_path, CQA_HINT), dict, split_path, "the document", CQA_HINT)
    if "test" not in document:
        raise DataFormatError(split_path, f"no 'test' split; {CQA_HINT}")
    split = expect(document["test"], dict, split_path, "'test'", CQA_HINT)
    missing = [forum for forum in CQA_FORUMS if forum not in corpus or forum not in split]
    if missing:
        raise DataFormatError(
            corpus_path.parent, f"no forum(s) {', '.join(missing)} in corpus.json or retrieval_split.json; {CQA_HINT}"
        )
    for forum in CQA_FORUMS:
        for question, title in expect(corpus[forum], dict, corpus_path, forum, CQA_HINT).items():
            expect(title, str, corpus_path, f"{forum}.{question}", CQA_HINT)
        for question, duplicates in expect(split[forum], dict, split_path, f"test.{forum}", CQA_HINT).items():
            for duplicate in expect(duplicates, list, split_path, f"test.{forum}.{question}", CQA_HINT):
                expect(duplicate, str, split_path, f"a duplicate of test.{forum}.{question}", CQA_HINT)
    paths = (corpus_path, split_path)
    return {forum: cqadupstack_forum(forum, corpus[forum], split[forum], paths) for forum in CQA_FORUMS}


@register_eval_set("cqadupstack")
class CQADupStack(EvalSet):
    kind, main = "retrieval", "useb_map_at_100"
    description = "CQADupStack (USEB's): 12 forums, titles, every question retrieves its duplicates; MAP@100"
    info = SetInfo(
        "CQADupStack",
        reference="Hoogeveen et al. 2015",
        files="USEB's `cqadupstack/corpus.json` with `retrieval_split.json`",
    )

    def load(self, data_dir) -> EvalData:
        files = ("corpus.json", "retrieval_split.json")
        folder = find_release(data_dir, files[1:], self.name, CQA_HINT)
        if not (folder / files[0]).is_file():
            raise SweepInputError(f"evaluation set cqadupstack: no corpus.json beside {folder / files[1]}. {CQA_HINT}")
        subsets = read_cqadupstack(folder / files[0], folder / files[1])
        data = EvalData(self.name, subsets, files_digest(folder / f for f in files), self.kind, self.main)
        return check_scorable(
            data, folder / files[1], f"corpus.json lacks their duplicates (a partial extraction?). {CQA_HINT}"
        )


# --- MTEB's CQADupstack<Forum>Retrieval (BEIR's layout: corpus, queries, qrels) --------------------------
