"""SICK loader (Marelli et al. 2014): 4500 / 500 / 4927 sentence pairs with a relatedness score
(1-5) and an entailment label.

Reads the SemEval-2014 Task 1 release files in `sick/`: `SICK_train.txt` (train),
`SICK_trial.txt` (used as dev, as the authors did) and `SICK_test_annotated.txt` (test).
Tab-separated with a header: pair_ID, sentence_A, sentence_B, relatedness_score,
entailment_judgment. Columns are found by header name, so the full `SICK.txt` column layout
(`entailment_label`) is read too. Quirks of the real files: the test file ends its lines with CRLF,
the train/trial files with LF; about 100 sentences carry a trailing space (kept as is).

Labels follow docs/methods/electra.md M1 (the authors' `entailment_AB` of `RobZamp/sick`):
ENTAILMENT = 0, NEUTRAL = 1, CONTRADICTION = 2. With `data_dir == "hub"` that hub copy is read
(its split sizes differ slightly from the release files').
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainables.core.errors import DataFormatError
from trainables.data._io import ReleaseSplits, iter_header_rows, parse_float

SPLIT_FILES = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
LABELS = ("ENTAILMENT", "NEUTRAL", "CONTRADICTION")  # index = label id
LABEL_IDS = {name: i for i, name in enumerate(LABELS)}
HUB_ID = "RobZamp/sick"
_HINT = "pass --data-dir pointing at the folder that holds sick/"
_COLUMNS = {
    "sentence1": ("sentence_A",),
    "sentence2": ("sentence_B",),
    "score": ("relatedness_score",),
    "label": ("entailment_judgment", "entailment_label"),
}


@dataclass(frozen=True)
class LabelledPair:
    sentence1: str
    sentence2: str
    score: float  # SICK relatedness, 1-5
    label: int  # index into LABELS


def _read_release_file(path: Path) -> list[LabelledPair]:
    examples = []
    for line_no, row in iter_header_rows(path, _COLUMNS, _HINT):
        score = parse_float(path, row["score"], line_no, "relatedness score")
        if not 1.0 <= score <= 5.0:
            raise DataFormatError(path, f"relatedness score {score} is outside 1-5", line_no)
        label_name = row["label"].strip()
        if label_name not in LABEL_IDS:
            raise DataFormatError(
                path, f"unknown entailment label {label_name!r}; expected one of {', '.join(LABELS)}", line_no
            )
        examples.append(LabelledPair(row["sentence1"], row["sentence2"], score, LABEL_IDS[label_name]))
    if not examples:
        raise DataFormatError(path, "file holds no pairs")
    return examples


def _hub_label(value) -> int:
    if isinstance(value, int):
        return value
    text = str(value).lower()
    for needle, label in (("entail", 0), ("neutral", 1), ("contradict", 2)):
        if needle in text:
            return label
    raise DataFormatError(HUB_ID, f"unknown entailment_AB value {value!r}")


def _hub_row(row) -> LabelledPair:
    return LabelledPair(
        row["sentence_A"], row["sentence_B"], float(row["relatedness_score"]), _hub_label(row["entailment_AB"])
    )


RELEASE = ReleaseSplits("sick", SPLIT_FILES, HUB_ID, _HINT)


def load_sick(data_dir, splits=("train", "dev", "test")) -> dict[str, list[LabelledPair]]:
    """Return {split: [LabelledPair]}; `data_dir` is the data root, its `sick/`, or "hub"."""
    return RELEASE.load(data_dir, splits, _read_release_file, _hub_row)


def sick_checksums(data_dir) -> dict[str, str]:
    return RELEASE.checksums(data_dir)
