"""STS Benchmark loader (Cer et al. 2017): 5749 / 1500 / 1379 scored sentence pairs.

Reads the original release (`stsbenchmark/sts-{train,dev,test}.csv`: tab-separated, no header,
columns genre, file, year, id, score 0-5, sentence1, sentence2, sometimes extra trailing fields,
unescaped double quotes), or, when `data_dir == "hub"`, the hub copy `sentence-transformers/stsb`
(scores in [0, 1], rescaled to [0, 5] here so both sources agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainables.core.errors import DataFormatError
from trainables.data._io import ReleaseSplits, file_checksum  # noqa: F401  (file_checksum: re-exported)

SPLIT_FILES = {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}
HUB_ID = "sentence-transformers/stsb"


@dataclass(frozen=True)
class PairExample:
    sentence1: str
    sentence2: str
    score: float  # the dataset's native scale; STS-B: 0-5


def _read_release_file(path: Path) -> list[PairExample]:
    if not path.is_file():
        raise DataFormatError(path, "file not found; pass --data-dir pointing at the folder that holds stsbenchmark/")
    examples = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < 7:
                raise DataFormatError(path, f"expected at least 7 tab-separated fields, found {len(fields)}", line_no)
            try:
                score = float(fields[4])
            except ValueError:
                raise DataFormatError(path, f"score {fields[4]!r} is not a number", line_no) from None
            if not 0.0 <= score <= 5.0:
                raise DataFormatError(path, f"score {score} is outside 0-5", line_no)
            examples.append(PairExample(fields[5], fields[6], score))
    if not examples:
        raise DataFormatError(path, "file holds no pairs")
    return examples


def _hub_row(row) -> PairExample:
    return PairExample(row["sentence1"], row["sentence2"], float(row["score"]) * 5.0)


RELEASE = ReleaseSplits(
    "stsbenchmark", SPLIT_FILES, HUB_ID, "pass --data-dir pointing at the folder that holds stsbenchmark/"
)


def load_stsb(data_dir, splits=("train", "dev", "test")) -> dict[str, list[PairExample]]:
    """Return {split: [PairExample]}; `data_dir` is the data root, its `stsbenchmark/`, or "hub"."""
    return RELEASE.load(data_dir, splits, _read_release_file, _hub_row)


def stsb_checksums(data_dir) -> dict[str, str]:
    return RELEASE.checksums(data_dir)
