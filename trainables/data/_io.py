"""Line reading shared by the loaders: UTF-8 decoded per line (so a bad byte is reported with its
line number), a leading byte-order mark dropped, CR/LF stripped, `.gz` files read transparently (a
torn or non-gzip one reported with the line reached), and a missing file reported as a
`DataFormatError` that says how to point the project at its data.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from trainables.core.errors import DataFormatError

BOM = "\ufeff"


def require_file(path: Path, hint: str = "") -> Path:
    path = Path(path)
    if not path.is_file():
        message = "file not found"
        if hint:
            message += f"; {hint}"
        raise DataFormatError(path, message)
    return path


def iter_lines(path: Path, hint: str = "") -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text without the line ending) for every line of `path`."""
    path = require_file(path, hint)
    opener = gzip.open if path.name.endswith(".gz") else open
    line_no = 0
    with opener(path, "rb") as handle:
        try:
            for line_no, raw in enumerate(handle, start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DataFormatError(
                        path, f"not valid UTF-8 ({exc.reason} at byte {exc.start})", line_no
                    ) from None
                if line_no == 1 and text.startswith(BOM):
                    text = text[1:]
                yield line_no, text.rstrip("\n").rstrip("\r")
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:  # a torn download, or not gzip at all
            raise DataFormatError(path, f"not a whole gzip file ({exc}); fetch it again", line_no + 1) from None


def parse_float(path: Path, value: str, line_no: int, what: str = "score") -> float:
    try:
        number = float(value)
    except ValueError:
        raise DataFormatError(path, f"{what} {value!r} is not a number", line_no) from None
    if number != number or number in (float("inf"), float("-inf")):
        raise DataFormatError(path, f"{what} {value!r} is not a finite number", line_no)
    return number


def header_index(path: Path, header: list[str], wanted: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Map each logical column to its position in `header`, accepting any of its alternative names."""
    positions = {}
    stripped = [cell.strip() for cell in header]
    for column, names in wanted.items():
        for name in names:
            if name in stripped:
                positions[column] = stripped.index(name)
                break
        else:
            raise DataFormatError(
                path, f"header has no column {' or '.join(repr(n) for n in names)} (found {stripped})", 1
            )
    return positions


def iter_header_rows(path: Path, wanted: dict[str, tuple[str, ...]], hint: str = "") -> Iterator[tuple[int, dict]]:
    """Yield (line number, {column: field}) for every non-blank row of a tab-separated file whose first
    line is its header (columns found as `header_index` finds them); every row has the header's fields."""
    columns = n_fields = None
    for line_no, line in iter_lines(path, hint):
        fields = line.split("\t")
        if line_no == 1:
            columns, n_fields = header_index(path, fields, wanted), len(fields)
        elif line.strip():
            if len(fields) != n_fields:
                raise DataFormatError(
                    path, f"expected {n_fields} tab-separated fields like the header, found {len(fields)}", line_no
                )
            yield line_no, {column: fields[index] for column, index in columns.items()}


def file_checksum(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


HUB_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


@dataclass(frozen=True)
class ReleaseSplits:
    """A data set released as one file per split in a folder of the data root (`files`: split ->
    file name), with a copy on the hub (`hub_id`); `data_dir` may be the root, the folder, or "hub"."""

    folder: str
    files: dict
    hub_id: str
    hint: str = ""

    def paths(self, data_dir) -> dict[str, Path]:
        base = Path(data_dir)
        if (base / self.folder).is_dir():
            base = base / self.folder
        return {split: base / name for split, name in self.files.items()}

    def load(self, data_dir, splits, read_file, hub_row) -> dict:
        """{split: read_file(path)} for the release, or {split: [hub_row(row)]} for the hub copy
        (its splits train / validation / test)."""
        if str(data_dir) == "hub":
            from datasets import load_dataset

            try:
                dataset = load_dataset(self.hub_id)
            except Exception as error:  # offline, renamed, gated: the same for every trial
                from trainables.core.errors import SweepInputError
                from trainables.core.paths import default_data_dir

                raise SweepInputError(
                    f"--data-dir hub: the hub copy {self.hub_id} cannot be loaded ({type(error).__name__}: "
                    f"{str(error).splitlines()[0][:160]}); pass --data-dir with the local release instead "
                    f"(default {default_data_dir()})"
                ) from None
            return {split: [hub_row(row) for row in dataset[HUB_SPLITS[split]]] for split in splits}
        paths = self.paths(data_dir)
        return {split: read_file(paths[split]) for split in splits}

    def checksums(self, data_dir) -> dict[str, str]:
        if str(data_dir) == "hub":
            return {"hub": self.hub_id}
        return {split: file_checksum(require_file(path, self.hint)) for split, path in self.paths(data_dir).items()}


def find_under(root, name: str, *, folder: bool = False) -> list[Path]:
    """Every file (or folder, with `folder`) called `name` under `root`, symlinked folders followed
    (each real folder walked once, so a link cycle ends), sorted. [] when `root` is not a folder."""
    import os

    root = Path(root)
    if not root.is_dir():
        return []
    found, seen = [], set()
    for current, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(current)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        if name in (dirs if folder else files):
            found.append(Path(current) / name)
    return sorted(found)
