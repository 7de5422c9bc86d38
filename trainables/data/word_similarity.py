"""Word-pair similarity sets and the combined word-similarity dataset of docs/methods/electra.md M2.

Files (in `word-similarity/`, the wordvectors.org layout): one pair a line, whitespace-separated
`word1 word2 score`. Quirks of the real files, handled here: `EN-SimVerb-3500.txt` has CRLF line
endings and no final newline; `EN-WS-353-SIM.txt` keeps capitals on proper nouns (`Harvard Yale`);
SimLex-999 and SimVerb-3500 each hold one pair twice in swapped order. Native score ranges: RG-65
0-4, SimLex-999, SimVerb-3500 and WordSim-353 0-10; a score outside its set's range is rejected.

`build_ws_dataset` follows the authors' `preprocess_word_sim_data.py` + `training_wordsim.py`:
RG-65 / 4, SimLex-999 / 10, SimVerb-3500 / 10, WordSim353-SIM / 10 concatenated in that order,
duplicate unordered pairs dropped keeping the first (case-sensitive, as their `sorted(pair)`),
then split 70 / 30 and the 30 into 15 / 15 (4561 pairs here -> 3192 / 684 / 685).

The authors split with sklearn's `train_test_split` and no `random_state`, i.e. with the global
NumPy `RandomState` after `np.random.seed(0)`. The default here (`split_method="numpy"`) draws the
same kind of permutations from `np.random.default_rng(seed)` instead, so the split depends on the
seed argument only. `split_method="sklearn-compat"` reproduces sklearn's index selection exactly
with `np.random.RandomState(seed)` (no sklearn needed); it matches the authors' split only if the
rows come in their order too (their CSV copies of the sets may be ordered differently from these
files).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np

from trainables.core.errors import DataFormatError, SweepInputError
from trainables.data._io import iter_lines, parse_float, require_file
from trainables.data.stsb import PairExample, file_checksum

# name -> (file, native maximum score); the order is the concatenation order of M2.
WS_SETS = {
    "rg65": ("EN-RG-65.txt", 4.0),
    "simlex999": ("EN-SIMLEX-999.txt", 10.0),
    "simverb3500": ("EN-SimVerb-3500.txt", 10.0),
    "ws353sim": ("EN-WS-353-SIM.txt", 10.0),
}
SPLIT_METHODS = ("numpy", "sklearn-compat")
_HINT = "pass --data-dir pointing at the folder that holds word-similarity/"


def ws_dir(data_dir) -> Path:
    base = Path(data_dir)
    if (base / "word-similarity").is_dir():
        base = base / "word-similarity"
    return base


def load_word_pairs(path, max_score: float | None = None) -> list[PairExample]:
    """Read one word-similarity file as PairExample(word1, word2, native score)."""
    path = Path(path)
    pairs = []
    for line_no, line in iter_lines(path, _HINT):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 3:
            raise DataFormatError(
                path, f"expected 3 whitespace-separated fields (word1 word2 score), found {len(fields)}", line_no
            )
        score = parse_float(path, fields[2], line_no)
        if score < 0 or (max_score is not None and score > max_score):
            raise DataFormatError(path, f"score {score} is outside 0-{max_score:g}", line_no)
        pairs.append(PairExample(fields[0], fields[1], score))
    if not pairs:
        raise DataFormatError(path, "file holds no word pairs")
    return pairs


def load_ws_set(data_dir, name: str) -> list[PairExample]:
    """One named set (a key of WS_SETS) with its native scores."""
    if name not in WS_SETS:
        raise SweepInputError(f"unknown word-similarity set {name!r}; valid: {', '.join(WS_SETS)}")
    filename, max_score = WS_SETS[name]
    return load_word_pairs(ws_dir(data_dir) / filename, max_score)


def ws_pairs(data_dir) -> list[PairExample]:
    """The M2 word pairs: the four sets normalised to [0, 1], concatenated, unordered duplicates dropped."""
    seen: set[tuple[str, str]] = set()
    pairs = []
    for name, (_, max_score) in WS_SETS.items():
        for pair in load_ws_set(data_dir, name):
            key = tuple(sorted((pair.sentence1, pair.sentence2)))
            if key in seen:
                continue
            seen.add(key)
            pairs.append(PairExample(pair.sentence1, pair.sentence2, pair.score / max_score))
    return pairs


def _shuffle_split(n: int, train_size: float, test_size: float, permutation) -> tuple[np.ndarray, np.ndarray]:
    """sklearn ShuffleSplit's index selection: test = perm[:n_test], train = perm[n_test:n_test+n_train]."""
    n_test = math.ceil(test_size * n)
    n_train = math.floor(train_size * n)
    perm = permutation(n)
    return perm[n_test : n_test + n_train], perm[:n_test]


def split_indices(n: int, seed: int = 0, split_method: str = "numpy") -> dict[str, np.ndarray]:
    """Indices of a 70 / 15 / 15 split of n rows (first 70/30, then the 30 halved into dev/test)."""
    if split_method == "numpy":
        rng = np.random.default_rng(seed)
    elif split_method == "sklearn-compat":
        rng = np.random.RandomState(seed)
    else:
        raise SweepInputError(f"unknown split method {split_method!r}; valid: {', '.join(SPLIT_METHODS)}")
    train, rest = _shuffle_split(n, 0.7, 0.3, rng.permutation)
    dev_pos, test_pos = _shuffle_split(len(rest), 0.5, 0.5, rng.permutation)
    return {"train": train, "dev": rest[dev_pos], "test": rest[test_pos]}


def build_ws_dataset(data_dir, seed: int = 0, split_method: str = "numpy") -> dict[str, list[PairExample]]:
    """{train, dev, test: [PairExample(word1, word2, score in [0, 1])]} per docs/methods/electra.md M2."""
    pairs = ws_pairs(data_dir)
    indices = split_indices(len(pairs), seed, split_method)
    return {split: [pairs[i] for i in idx] for split, idx in indices.items()}


def ws_checksum(data_dir) -> str:
    """One checksum over the four files (for stage keys)."""
    digest = hashlib.sha256()
    for name, (filename, _) in WS_SETS.items():
        path = require_file(ws_dir(data_dir) / filename, _HINT)
        digest.update(f"{name}:{file_checksum(path)}\n".encode())
    return digest.hexdigest()[:16]
