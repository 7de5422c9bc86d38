"""The translated STS Benchmarks of the ELECTRA paper's Appendix B (Figures 7-9): Korean, German
and Spanish, each 5749 / 1500 / 1379 pairs with STS-B's gold scores (0-5).

- KorSTS (kakaobrain/KorNLUDatasets): `KorSTS/sts-{train,dev,test}.tsv` under the data dir,
  tab-separated with a header row (genre, filename, year, id, score, sentence1, sentence2).
- stsb-multi-mt (the translators' release, PhilipMay/stsb-multi-mt): `stsb-multi-mt/stsb-<language>-<split>.csv`
  under the data dir, comma-separated, quoted where needed, no header: sentence1, sentence2, score. Every
  language it holds is read (`release_languages`: de, es, fr, it, nl, pl, pt, ru, zh, ja and en in the release).
- The same in the hub's layout (PhilipMay/stsb_multi_mt), read when the release files are not there:
  `stsb_multi_mt/<language>/<split>-00000-of-00001.parquet` (any `<split>*.parquet`) with columns
  sentence1, sentence2, similarity_score; with `data_dir == "hub"` read from the hub (online).

Every file is checked as STS-B's loader checks its own: a torn line (not three fields, or an unclosed
quote), a score outside 0-5 and a missing split each stop the sweep in one line naming the file and line.

`load_translated(language, data_dir)` returns ({split: [PairExample]}, checksums).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from trainables.core.errors import DataFormatError, SweepInputError
from trainables.data._io import file_checksum, header_index, iter_lines, parse_float, require_file
from trainables.data.stsb import PairExample

SPLITS = ("train", "dev", "test")
KORSTS_FILES = {split: f"sts-{split}.tsv" for split in SPLITS}
MULTI_MT_HUB = "PhilipMay/stsb_multi_mt"
RELEASE = "stsb-multi-mt"  # the translators' release: stsb-<language>-<split>.csv
HUB_LAYOUT = "stsb_multi_mt"  # the hub's: <language>/<split>-*.parquet
RELEASE_FILE = re.compile(r"stsb-([a-z]{2,3})-(train|dev|test)\.csv")
LANGUAGE_NAMES = {  # the release's languages, for --help
    "de": "German", "en": "English", "es": "Spanish", "fr": "French", "it": "Italian", "ja": "Japanese",
    "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ru": "Russian", "zh": "Chinese",
}  # fmt: skip
PAPER_LANGUAGES = ("ko", "de", "es")  # the paper's Appendix B
# The paper's models per language (docs/methods/electra.md M1).
PAPER_MODELS = {
    "ko": "klue/bert-base,monologg/koelectra-base-v3-discriminator,monologg/koelectra-base-v3-generator",
    "de": "google-bert/bert-base-german-cased,deepset/gelectra-base,deepset/gelectra-base-generator",
    "es": "dccuchile/bert-base-spanish-wwm-cased,mrm8488/electricidad-base-discriminator,"
    "mrm8488/electricidad-base-generator",
}


def release_languages(data_dir) -> list[str]:
    """The languages the stsb-multi-mt release under `data_dir` holds (any of its split files), sorted."""
    if str(data_dir) == "hub":
        return []
    folder = _folder(data_dir, RELEASE)
    found = (RELEASE_FILE.fullmatch(p.name) for p in folder.glob("stsb-*-*.csv")) if folder.is_dir() else ()
    return sorted({match.group(1) for match in found if match})


def languages(data_dir) -> list[str]:
    """Every language a translated STS-B is read for: the paper's (ko, de, es), then those of the release."""
    return [*PAPER_LANGUAGES, *(lang for lang in release_languages(data_dir) if lang not in PAPER_LANGUAGES)]


def _folder(data_dir, name: str) -> Path:
    base = Path(data_dir)
    return base if base.name == name else base / name


def _score(path: Path, value, line_no: int) -> float:
    score = parse_float(path, str(value), line_no)
    if not 0.0 <= score <= 5.0:
        raise DataFormatError(path, f"score {score} is outside 0-5", line_no)
    return score


def read_korsts(path: Path) -> list[PairExample]:
    hint = "put kakaobrain's KorSTS folder (sts-train.tsv, sts-dev.tsv, sts-test.tsv) under --data-dir"
    rows, columns = [], None
    for line_no, line in iter_lines(path, hint):
        fields = line.split("\t")
        if columns is None:
            columns = header_index(path, fields, {"score": ("score",), "s1": ("sentence1",), "s2": ("sentence2",)})
            continue
        if not line.strip():
            continue
        if len(fields) <= max(columns.values()):
            raise DataFormatError(
                path, f"expected {max(columns.values()) + 1} tab-separated fields, found {len(fields)}", line_no
            )
        rows.append(
            PairExample(fields[columns["s1"]], fields[columns["s2"]], _score(path, fields[columns["score"]], line_no))
        )
    if not rows:
        raise DataFormatError(path, "file holds no pairs")
    return rows


def _parquet_file(folder: Path, split: str) -> Path:
    found = sorted(folder.glob(f"{split}*.parquet"))
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise DataFormatError(
            folder,
            f"{what} {split}*.parquet file(s); expected one per split in the hub's layout "
            f"(stsb_multi_mt/<language>/{split}-00000-of-00001.parquet)",
        )
    return found[0]


def read_multi_mt(path: Path) -> list[PairExample]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(require_file(path)).to_pydict()
    except (OSError, ValueError) as error:
        raise DataFormatError(path, f"not a readable parquet file ({error})") from None
    missing = [c for c in ("sentence1", "sentence2", "similarity_score") if c not in table]
    if missing:
        raise DataFormatError(path, f"no column(s) {', '.join(missing)} (found {', '.join(table)})")
    return [
        PairExample(a, b, _score(path, score, row))
        for row, (a, b, score) in enumerate(
            zip(table["sentence1"], table["sentence2"], table["similarity_score"]), start=1
        )
    ]


def read_release_csv(path: Path) -> list[PairExample]:
    """One split of the stsb-multi-mt release: one `sentence1,sentence2,score` row a line, quoted where needed,
    no header. A row that is not three fields, or whose quote is not closed on its own line, is a torn line."""
    hint = f"put the stsb-multi-mt release files (stsb-<language>-<split>.csv) in {RELEASE}/ under --data-dir"
    require_file(path, hint)
    rows, line_no = [], 1
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, strict=True)
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error as error:  # the file ends inside a quoted field
                raise DataFormatError(path, f"torn line: a quote is not closed ({error})", line_no) from None
            except UnicodeDecodeError as error:
                raise DataFormatError(path, f"not valid UTF-8 ({error.reason})", line_no) from None
            if reader.line_num > line_no:  # a quoted field ran on over the line's end
                raise DataFormatError(path, "torn line: a quote opened on this line is not closed on it", line_no)
            if fields and fields != [""]:
                if len(fields) != 3:
                    found = f"found {len(fields)}"
                    raise DataFormatError(
                        path, f"expected 3 comma-separated fields (sentence1, sentence2, score), {found}", line_no
                    )
                rows.append(PairExample(fields[0], fields[1], _score(path, fields[2], line_no)))
            line_no = reader.line_num + 1
    if not rows:
        raise DataFormatError(path, "file holds no pairs")
    return rows


def load_translated(language: str, data_dir) -> tuple[dict[str, list[PairExample]], dict[str, str]]:
    known = languages(data_dir)
    if language not in known:
        raise SweepInputError(f"no translated STS-B for {language!r}; known: {', '.join(known)}")
    if language == "ko":
        if str(data_dir) == "hub":
            raise SweepInputError("KorSTS has no hub copy here: put kakaobrain's KorSTS folder under --data-dir")
        folder = _folder(data_dir, "KorSTS")
        paths = {split: folder / KORSTS_FILES[split] for split in SPLITS}
        return {s: read_korsts(p) for s, p in paths.items()}, {s: file_checksum(p) for s, p in paths.items()}
    if str(data_dir) == "hub":
        from datasets import load_dataset

        try:
            dataset = load_dataset(MULTI_MT_HUB, language)
        except Exception as error:  # offline or renamed: the same for every trial
            raise SweepInputError(
                f"--data-dir hub: {MULTI_MT_HUB} ({language}) cannot be loaded ({type(error).__name__}); "
                "put its files under --data-dir in the hub's layout"
            ) from None
        examples = {
            s: [PairExample(r["sentence1"], r["sentence2"], float(r["similarity_score"])) for r in dataset[s]]
            for s in SPLITS
        }
        return examples, {"hub": f"{MULTI_MT_HUB}/{language}"}
    if language in release_languages(data_dir):  # the release's files; a missing split is named
        release = _folder(data_dir, RELEASE)
        paths = {split: release / f"stsb-{language}-{split}.csv" for split in SPLITS}
        return {s: read_release_csv(p) for s, p in paths.items()}, {s: file_checksum(p) for s, p in paths.items()}
    folder = _folder(data_dir, HUB_LAYOUT) / language
    if not folder.is_dir():
        raise DataFormatError(
            _folder(data_dir, RELEASE) / f"stsb-{language}-train.csv",
            f"file not found; put the stsb-multi-mt release files (stsb-{language}-{{train,dev,test}}.csv) in "
            f"{RELEASE}/ under --data-dir, or the hub's parquet files in {HUB_LAYOUT}/{language}/",
        )
    paths = {split: _parquet_file(folder, split) for split in SPLITS}
    return {s: read_multi_mt(p) for s, p in paths.items()}, {s: file_checksum(p) for s, p in paths.items()}
