"""Microsoft Research Paraphrase Corpus loader: 3576 / 500 / 1725 labelled sentence pairs.

Reads the release copy in `mrpc/msr-para-{train,val,test}.tsv`: tab-separated with a header
(Quality, #1 ID, #2 ID, #1 String, #2 String; Quality 1 = paraphrase). Quirks of the real files,
all handled here: the train and test files start with a UTF-8 byte-order mark (the val file does
not), lines end in CRLF, and the strings contain unescaped double quotes (so the files are split
on tabs with no quote handling).

With `data_dir == "hub"` the hub copy `SetFit/mrpc` is read instead (the authors' source, docs/methods/electra.md
M1). Its split is GLUE's (3668 / 408 / 1725): the same test set, but GLUE carved its dev set out
of the original training file differently, so train/dev differ from the release files'.

Each pair is a `PairExample(sentence1, sentence2, score)` whose score is the label as a float
(1.0 paraphrase, 0.0 not), ready for BCE on the cosine.
"""

from __future__ import annotations

from pathlib import Path

from trainables.core.errors import DataFormatError
from trainables.data._io import ReleaseSplits, iter_lines
from trainables.data.stsb import PairExample

SPLIT_FILES = {"train": "msr-para-train.tsv", "dev": "msr-para-val.tsv", "test": "msr-para-test.tsv"}
HEADER = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")
HUB_ID = "SetFit/mrpc"
_HINT = "pass --data-dir pointing at the folder that holds mrpc/"


def _read_release_file(path: Path) -> list[PairExample]:
    examples = []
    for line_no, line in iter_lines(path, _HINT):
        fields = line.split("\t")
        if line_no == 1:
            if [f.strip() for f in fields] != list(HEADER):
                raise DataFormatError(path, f"expected the header {'<TAB>'.join(HEADER)!r}, found {line[:80]!r}", 1)
            continue
        if not line.strip():
            continue
        if len(fields) != len(HEADER):
            raise DataFormatError(
                path,
                f"expected {len(HEADER)} tab-separated fields (Quality, #1 ID, #2 ID, #1 String, #2 String), "
                f"found {len(fields)}",
                line_no,
            )
        quality = fields[0].strip()
        if quality not in ("0", "1"):
            raise DataFormatError(path, f"unknown label (Quality) {fields[0]!r}; expected 0 or 1", line_no)
        examples.append(PairExample(fields[3], fields[4], float(quality)))
    if not examples:
        raise DataFormatError(path, "file holds no pairs")
    return examples


def _hub_row(row) -> PairExample:
    return PairExample(row["text1"], row["text2"], float(row["label"]))


RELEASE = ReleaseSplits("mrpc", SPLIT_FILES, HUB_ID, _HINT)


def load_mrpc(data_dir, splits=("train", "dev", "test")) -> dict[str, list[PairExample]]:
    """Return {split: [PairExample(s1, s2, 0.0|1.0)]}; `data_dir` is the data root, its `mrpc/`, or "hub"."""
    return RELEASE.load(data_dir, splits, _read_release_file, _hub_row)


def mrpc_checksums(data_dir) -> dict[str, str]:
    return RELEASE.checksums(data_dir)
