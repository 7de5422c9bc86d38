"""The translated STS Benchmarks of the ELECTRA paper's Appendix B (Figures 7-9): Korean, German
and Spanish, each 5749 / 1500 / 1379 pairs with STS-B's gold scores (0-5).

- KorSTS (kakaobrain/KorNLUDatasets): `KorSTS/sts-{train,dev,test}.tsv` under the data dir,
  tab-separated with a header row (genre, filename, year, id, score, sentence1, sentence2).
- German and Spanish: `stsb_multi_mt` (PhilipMay/stsb_multi_mt on the hub) in the hub's layout,
  `stsb_multi_mt/<language>/<split>-00000-of-00001.parquet` (any `<split>*.parquet`) with columns
  sentence1, sentence2, similarity_score; with `data_dir == "hub"` read from the hub (online).

`load_translated(language, data_dir)` returns ({split: [PairExample]}, checksums).
"""

from __future__ import annotations

from pathlib import Path

from trainables.core.errors import DataFormatError, SweepInputError
from trainables.data._io import file_checksum, header_index, iter_lines, parse_float, require_file
from trainables.data.stsb import PairExample

SPLITS = ("train", "dev", "test")
KORSTS_FILES = {split: f"sts-{split}.tsv" for split in SPLITS}
MULTI_MT_HUB = "PhilipMay/stsb_multi_mt"
LANGUAGES = {"ko": "KorSTS", "de": "stsb_multi_mt", "es": "stsb_multi_mt"}
# The paper's models per language (docs/methods/electra.md M1).
PAPER_MODELS = {
    "ko": "klue/bert-base,monologg/koelectra-base-v3-discriminator,monologg/koelectra-base-v3-generator",
    "de": "google-bert/bert-base-german-cased,deepset/gelectra-base,deepset/gelectra-base-generator",
    "es": "dccuchile/bert-base-spanish-wwm-cased,mrm8488/electricidad-base-discriminator,"
    "mrm8488/electricidad-base-generator",
}


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


def load_translated(language: str, data_dir) -> tuple[dict[str, list[PairExample]], dict[str, str]]:
    if language not in LANGUAGES:
        raise SweepInputError(f"no translated STS-B for {language!r}; known: {', '.join(LANGUAGES)}")
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
    folder = _folder(data_dir, "stsb_multi_mt") / language
    paths = {split: _parquet_file(folder, split) for split in SPLITS}
    return {s: read_multi_mt(p) for s, p in paths.items()}, {s: file_checksum(p) for s, p in paths.items()}
