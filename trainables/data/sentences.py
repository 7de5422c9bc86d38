"""Sentence corpora for MLM domain-adaptive pre-training (DAPT, docs/methods/electra.md M3).

The paper used the unique sentence1 and sentence2 of sbert's `AllNLI.tsv.gz` (SNLI + MultiNLI,
all splits). That file is not obtainable offline here, so the default corpus is the sentences of
SICK (all splits), the STS-B train split and the Wikipedia sample (`wiki-sentences/
wiki1m-prefix.txt`). Users who have the NLI data can ask for it by source name:

- `allnli`: `AllNLI.tsv.gz` (or `AllNLI.tsv`) in the data dir or its `allnli/` folder;
  tab-separated with a header (split, dataset, filename, sentence1, sentence2, label), read with
  no quote handling; every split is used, as the authors did.
- `snli` / `multinli`: the original jsonl releases (`snli_1.0/snli_1.0_{train,dev,test}.jsonl`,
  `multinli_1.0/multinli_1.0_{train,dev_matched,dev_mismatched}.jsonl`), fields `sentence1`,
  `sentence2`.

Domain corpora (`twitterpara`, `askubuntu`, `cqadupstack`, `scidocs`): the unlabelled in-domain
sentences of an evaluation set's domain, never its labels nor its evaluation texts, for TSDAE,
MLM, SimCSE, CT and DAPT, as the TSDAE paper trains "on the sentences from the training split":
USEB's `<task>/unsupervised/train.txt` (task folder `twitter` for TwitterPara) where it is under the
data dir; else, from the released files found there, TwitterPara's training splits (the URL
corpus's `Twitter_URL_Corpus_train.txt`, PIT-2015's `train.data` and `dev.data`) and AskUbuntu's
titles of `text_tokenized.txt.gz` outside its dev and test questions.

`dapt_corpus` returns the unique sentences (whitespace-stripped, empty ones dropped, first
occurrence kept, in source order and within a file in row order, sentence1 before sentence2) and a
string naming the sources, e.g. "sick+stsb-train+wiki", for the run's params.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trainables.core.errors import DataFormatError, SweepInputError
from trainables.data._io import find_under, iter_header_rows, iter_lines, require_file
from trainables.data.sick import RELEASE as SICK_RELEASE
from trainables.data.sick import load_sick
from trainables.data.stsb import RELEASE as STSB_RELEASE
from trainables.data.stsb import file_checksum, load_stsb

DOMAIN_CORPORA = {
    "twitterpara": "twitter",
    "askubuntu": "askubuntu",
    "cqadupstack": "cqadupstack",
    "scidocs": "scidocs",
}
DAPT_SOURCES = ("sick", "stsb-train", "wiki", "allnli", "snli", "multinli", *DOMAIN_CORPORA)
DEFAULT_DAPT_SOURCES = ("sick", "stsb-train", "wiki")
WIKI_FILE = Path("wiki-sentences") / "wiki1m-prefix.txt"
_JSONL_FILES = {
    "snli": ("snli_1.0", ("snli_1.0_train.jsonl", "snli_1.0_dev.jsonl", "snli_1.0_test.jsonl")),
    "multinli": (
        "multinli_1.0",
        ("multinli_1.0_train.jsonl", "multinli_1.0_dev_matched.jsonl", "multinli_1.0_dev_mismatched.jsonl"),
    ),
}


def read_allnli_sentences(path) -> list[str]:
    """sentence1, sentence2 of every row of an sbert AllNLI tsv (gzipped or not), all splits."""
    columns = {"sentence1": ("sentence1",), "sentence2": ("sentence2",)}
    rows = iter_header_rows(Path(path), columns, "put AllNLI.tsv.gz in the data dir or its allnli/ folder")
    return [sentence for _, row in rows for sentence in (row["sentence1"], row["sentence2"])]


def read_nli_jsonl_sentences(path) -> list[str]:
    """sentence1, sentence2 of every line of an SNLI / MultiNLI jsonl file (gzipped or not)."""
    path = Path(path)
    sentences = []
    for line_no, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataFormatError(path, f"not a JSON object ({exc.msg})", line_no) from None
        if not isinstance(record, dict):
            raise DataFormatError(path, "not a JSON object", line_no)
        for field in ("sentence1", "sentence2"):
            if not isinstance(record.get(field), str):
                raise DataFormatError(path, f"missing string field {field!r}", line_no)
            sentences.append(record[field])
    return sentences


def read_sentence_lines(path) -> list[str]:
    """One sentence a line (the Wikipedia sample)."""
    return [
        line for _, line in iter_lines(path, f"pass --data-dir pointing at the folder that holds {WIKI_FILE.parent}/")
    ]


def read_text_corpus(path, flag: str = "--corpus") -> list[str]:
    """The sentences of a corpus file given by `flag`, one a line, whitespace-stripped. Blank lines are
    dropped (their count is printed). A file that is not UTF-8 text (a byte that does not decode, or a
    NUL character: a binary file) or that holds no sentence is refused with a `SweepInputError`
    naming the file."""
    path = Path(path).expanduser()
    hint = "pass a UTF-8 text file, one sentence a line"
    sentences, blank = [], 0
    try:
        for line_no, line in iter_lines(path, hint):
            if "\x00" in line:
                raise DataFormatError(path, "not text (a NUL byte: a binary file?)", line_no)
            if line.strip():
                sentences.append(line.strip())
            else:
                blank += 1
    except DataFormatError as error:
        message = str(error) if str(error).endswith(hint) else f"{error}; {hint}"
        raise SweepInputError(f"{flag}: {message}") from None
    if not sentences:
        raise SweepInputError(
            f"{flag} {path}: no sentence in its {blank} line(s) (every line is blank); {hint}"
            if blank
            else f"{flag} {path}: the file is empty; {hint}"
        )
    if blank:
        print(f"{flag} {path}: {blank} blank line(s) dropped, {len(sentences)} sentences kept", flush=True)
    return sentences


def check_corpus_size(sentences: list[str], needed: int, flag: str, corpus, why: str) -> None:
    """Refuse a corpus of fewer sentences than `needed` (e.g. one batch), saying `why` it needs them."""
    if len(sentences) < needed:
        raise SweepInputError(
            f"{flag} {corpus}: {len(sentences)} sentence(s), but {why} needs {needed}; "
            "pass a larger corpus (or a larger --max-sentences) or a smaller batch size"
        )


def parse_sources(sources) -> tuple[str, ...]:
    """Normalise a sources argument ("sick,wiki", "sick+wiki" or a sequence) and validate the names."""
    if isinstance(sources, str):
        sources = sources.replace("+", ",").split(",")
    names = tuple(dict.fromkeys(s.strip() for s in sources if s and s.strip()))
    if not names:
        raise SweepInputError(f"no DAPT corpus source given; valid sources: {', '.join(DAPT_SOURCES)}")
    unknown = [s for s in names if s not in DAPT_SOURCES]
    if unknown:
        raise SweepInputError(
            f"unknown DAPT corpus source(s) {', '.join(map(repr, unknown))}; valid sources: {', '.join(DAPT_SOURCES)}"
        )
    return names


def _allnli_file(data_dir: Path) -> Path:
    candidates = [data_dir / d / n for d in ("", "allnli", "AllNLI") for n in ("AllNLI.tsv.gz", "AllNLI.tsv")]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return candidates[0]  # reported as missing by the reader


def _useb_train_file(data_dir, source: str) -> Path | None:
    for path in find_under(data_dir, "train.txt"):
        if path.parent.name == "unsupervised" and path.parent.parent.name == DOMAIN_CORPORA[source]:
            return path
    return None


def domain_files(data_dir, source: str) -> list[Path]:
    """The files the domain corpus `source` reads (see the module docstring), or a SweepInputError
    naming what to put under the data dir."""
    useb = _useb_train_file(data_dir, source)
    if useb:
        return [useb]
    found = []
    if source == "twitterpara":
        for name in ("Twitter_URL_Corpus_train.txt", "train.data", "dev.data"):
            found += find_under(data_dir, name)[:1]
    elif source == "askubuntu":
        for path in find_under(data_dir, "text_tokenized.txt.gz"):
            if (path.parent / "dev.txt").is_file() and (path.parent / "test.txt").is_file():
                found = [path, path.parent / "dev.txt", path.parent / "test.txt"]
                break
    if not found:
        release = {
            "twitterpara": ", or the URL corpus's Twitter_URL_Corpus_train.txt or PIT-2015's train.data / dev.data",
            "askubuntu": ", or AskUbuntu's text_tokenized.txt.gz with dev.txt and test.txt",
        }.get(source, "")
        raise SweepInputError(
            f"corpus {source}: no unlabelled training sentences under {data_dir}; put USEB's "
            f"{DOMAIN_CORPORA[source]}/unsupervised/train.txt there{release}"
        )
    return found


def _domain_sentences(data_dir, source: str) -> list[str]:
    files = domain_files(data_dir, source)
    if files[0].name == "train.txt":
        return read_sentence_lines(files[0])
    if source == "askubuntu":
        held_out = {
            i for path in files[1:] for _, line in iter_lines(path) for f in line.split("\t")[:3] for i in f.split()
        }
        rows = (line.split("\t") for _, line in iter_lines(files[0]))
        return [row[1] for row in rows if len(row) > 1 and row[0] not in held_out]
    sentences = []
    for path in files:
        for _, line in iter_lines(path):
            fields = line.split("\t")
            if path.name.endswith(".data") and len(fields) > 3:
                sentences += fields[2:4]
            elif path.name.startswith("Twitter_URL") and len(fields) > 1:
                sentences += fields[:2]
    return sentences


def source_files(data_dir, source: str) -> list[Path]:
    """The files a source reads (for checksums)."""
    data_dir = Path(data_dir)
    if source in DOMAIN_CORPORA:
        return domain_files(data_dir, source)
    if source == "sick":
        return list(SICK_RELEASE.paths(data_dir).values())
    if source == "stsb-train":
        return [STSB_RELEASE.paths(data_dir)["train"]]
    if source == "wiki":
        return [data_dir / WIKI_FILE]
    if source == "allnli":
        return [_allnli_file(data_dir)]
    if source in _JSONL_FILES:
        folder, names = _JSONL_FILES[source]
        base = data_dir / folder if (data_dir / folder).is_dir() else data_dir
        return [base / n for n in names]
    raise SweepInputError(f"unknown DAPT corpus source {source!r}; valid sources: {', '.join(DAPT_SOURCES)}")


def _source_sentences(data_dir: Path, source: str) -> list[str]:
    if source == "sick":
        return [s for split in load_sick(data_dir).values() for ex in split for s in (ex.sentence1, ex.sentence2)]
    if source == "stsb-train":
        return [s for ex in load_stsb(data_dir, splits=("train",))["train"] for s in (ex.sentence1, ex.sentence2)]
    if source == "wiki":
        return read_sentence_lines(data_dir / WIKI_FILE)
    if source == "allnli":
        return read_allnli_sentences(_allnli_file(data_dir))
    if source in DOMAIN_CORPORA:
        return _domain_sentences(data_dir, source)
    return [s for path in source_files(data_dir, source) for s in read_nli_jsonl_sentences(path)]


def dapt_corpus(data_dir, sources=DEFAULT_DAPT_SOURCES) -> tuple[list[str], str]:
    """(unique sentences in a stable order, "src1+src2+..." naming the sources)."""
    names = parse_sources(sources)
    unique: dict[str, None] = {}
    for source in names:
        for sentence in _source_sentences(Path(data_dir), source):
            sentence = sentence.strip()
            if sentence:
                unique.setdefault(sentence, None)
    return list(unique), "+".join(names)


def dapt_corpus_checksum(data_dir, sources=DEFAULT_DAPT_SOURCES) -> str:
    """One checksum over the files the sources read (for stage keys)."""
    digest = hashlib.sha256()
    for source in parse_sources(sources):
        for path in source_files(data_dir, source):
            digest.update(f"{source}:{path.name}:{file_checksum(require_file(path))}\n".encode())
    return digest.hexdigest()[:16]
