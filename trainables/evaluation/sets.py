"""Evaluation sets for zero-shot and end-of-trial scoring, in a registry (a new set is one class).

| name          | data                                                                 | pairs  |
|---------------|----------------------------------------------------------------------|--------|
| sts12..sts16  | SemEval STS test sets, SentEval layout: any folder `STS<YY>-en-test` | 3108, 1500, 3750 (12-14 here) |
|               | under the data dir; subsets `STS.input.<s>.txt` + `STS.gs.<s>.txt`   |        |
| stsb          | STS-B test                                                           | 1379   |
| stsb_dev      | STS-B dev                                                            | 1500   |
| sickr         | SICK relatedness, test split (SentEval's)                            | 4927   |
| sickr_all     | SICK relatedness, train + trial + test (MTEB's)                      | 9927   |

SentEval layout rules: a blank gold line is an unscored pair (skipped); a gold file without its
input twin (STS13 `SMT`, STS12 `ALL`) is skipped; input and gold files have as many lines. Files
are read as UTF-8 (undecodable bytes replaced), split on line feeds only, never with csv quoting.
Several copies of a year under the data dir must hold the same files.

Gold is checked when a set is loaded (`DataFormatError` naming the file, and the line where there
is one): every score within the set's scale (`EvalSet.scale`: STS12-16 and STS-B 0-5, SICK
relatedness 1-5), and every subset with two scored pairs or more whose gold is not constant
(`check_scorable`): a correlation is undefined otherwise, and the subset would silently lose its
score and its set's `<set>_spearman_mean`.

`load_suite(names, data_dir)` returns an `EvalSuite`: the sets, their unique sentences in a fixed
order, and `score(embeddings)` (rows aligned with `sentences`) giving, from the cosine of each
pair's embeddings against gold, x100:
- `<set>_spearman`, `<set>_pearson`: over all the set's pairs pooled (MTEB's main score);
- `<set>_spearman_mean`: the mean of the per-subset Spearman (SentEval's "mean");
- `<set>_spearman_wmean`: their mean weighted by pairs per subset (SentEval's "wmean", which the
  meta-embedding paper reports);
- `<set>_<subset>_spearman` for sets of several subsets;
- `mean_spearman`: the mean of `<set>_spearman` over the suite.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainables.core.errors import DataFormatError, SweepInputError
from trainables.core.registry import Registry
from trainables.core.settings import Auto, Names, Setting
from trainables.data._io import find_under, parse_float
from trainables.evaluation.hub_copies import HubCopy, is_hub
from trainables.evaluation.metrics import correlations
from trainables.evaluation.task_kinds import TASK_KINDS, Pairs, Rerank, Retrieval, pair_cosines, task_kind


@dataclass
class EvalData:
    """A loaded set: its task kind (trainables/evaluation/task_kinds.py), its subsets of that kind's data,
    the checksum of what was read, and the metric it is ranked by (`main`: the kind's unless set)."""

    name: str
    subsets: dict[str, Pairs | Rerank | Retrieval]
    checksum: str
    kind: str = "sts"
    main: str = ""

    def __post_init__(self):
        self.main = self.main or TASK_KINDS.get(self.kind).main

    def __len__(self) -> int:
        return sum(len(s) for s in self.subsets.values())


@dataclass(frozen=True)
class SetInfo:
    """What a set is, for people, declared once beside its loader: its name in report columns
    (`display_name`), the paper it comes from (`reference`), the released files to put under the data dir
    (`files`), its copy on the dataset hub (`hub`), and the section of docs/data.md whose generated table
    holds its row (`section`: "sts" or "domain"; `python -m analysis docs` writes the tables)."""

    display_name: str
    reference: str = ""
    files: str = "—"
    hub: str = "—"
    section: str = "domain"

    def row(self, name: str, description: str) -> str:
        """Its row of docs/data.md: name, shown as, what (and the paper), release files, hub copy."""
        what = f"{description} ({self.reference})" if self.reference else description
        return f"| `{name}` | {self.display_name} | {what} | {self.files} | {self.hub} |"


class EvalSet:
    """A registered evaluation set: `load(data_dir)` -> EvalData; `scale`: the gold scores' range;
    `kind`: its task kind; `main`: the metric it is ranked by when not its kind's; `info`: its `SetInfo`."""

    name = ""
    description = ""
    info = SetInfo("")
    scale = (0.0, 5.0)
    kind = "sts"
    main = ""

    def load(self, data_dir) -> EvalData:
        raise NotImplementedError


SET_REGISTRY = Registry("evaluation set", EvalSet)
register_eval_set = SET_REGISTRY.register


def _load_registrations() -> None:
    """Import every `*_sets` module of this package (e.g. domain_sets.py): each registers its sets on
    import, so a new family of sets is a new module here, found with no edit to this one."""
    import importlib
    import pkgutil

    package = __name__.rpartition(".")[0]
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if module.name.endswith("_sets"):
            importlib.import_module(f"{package}.{module.name}")


def eval_set_names() -> list[str]:
    _load_registrations()
    return SET_REGISTRY.names()


def get_eval_set(name: str) -> EvalSet:
    _load_registrations()
    return SET_REGISTRY.get(name)()


def main_metric(name: str) -> str:
    """The key `<set>_<metric>` set `name` is ranked by (e.g. `twitterpara_ap`), known without loading it."""
    found = get_eval_set(name)
    return f"{name}_{found.main or TASK_KINDS.get(found.kind).main}"


def suite_primary(names) -> str:
    """The suite-level metric a sweep over sets `names` ranks by: `mean_spearman` when an STS set is
    among them, else the mean of the first set's kind (e.g. `mean_pair_classification_ap`)."""
    found = [get_eval_set(name) for name in names]
    if not found or any(s.kind == "sts" for s in found):
        return "mean_spearman"
    return f"mean_{found[0].kind}_{found[0].main or TASK_KINDS.get(found[0].kind).main}"


def files_digest(paths) -> str:
    """A checksum of the files' names and bytes (a set's `checksum`)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).name.encode())
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:16]


def check_data_dir(data_dir, set_name: str) -> None:
    """Refuse a data dir that is not a folder, rather than report the set's files missing under it."""
    if not Path(data_dir).is_dir():
        what = "is not a folder" if Path(data_dir).exists() else "does not exist"
        raise SweepInputError(
            f"evaluation set {set_name}: the data folder {data_dir} {what}; pass --data-dir with the folder holding "
            "the set's files (docs/data.md)"
        )


# --- SemEval STS in the SentEval layout ------------------------------------------------------
def _layout_hint(folder: str) -> str:
    return f"the SentEval layout: {folder}/STS.input.<subset>.txt with STS.gs.<subset>.txt"


def subset_files(folder: Path) -> dict[str, tuple[Path, Path]]:
    """{subset: (input file, gold file)}; a gold file without its input twin is left out (STS13
    `SMT`, withheld by its distributor; STS12 `ALL`, an aggregate)."""
    pairs = {}
    for gold_path in sorted(folder.glob("STS.gs.*.txt")):
        subset = gold_path.name[len("STS.gs.") : -len(".txt")]
        input_path = folder / f"STS.input.{subset}.txt"
        if input_path.is_file():
            pairs[subset] = (input_path, gold_path)
    return pairs


def _files_read(folder: Path) -> list[Path]:
    return [path for pair in subset_files(folder).values() for path in pair]


def find_sts_year(data_dir, year: int) -> Path:
    """The folder `STS<YY>-en-test` anywhere under `data_dir` (identical copies: the first)."""
    folder = f"STS{year:02d}-en-test"
    root = Path(data_dir)
    check_data_dir(root, f"sts{year:02d}")
    found = find_under(root, folder, folder=True)
    if not found:
        raise SweepInputError(
            f"evaluation set sts{year:02d}: no folder {folder} under {root}. Put the SemEval "
            f"STS{year:02d} English test set there in {_layout_hint(folder)}, or pass --data-dir"
        )
    if len(found) > 1 and len({files_digest(_files_read(path)) for path in found}) > 1:
        raise SweepInputError(
            f"evaluation set sts{year:02d}: {len(found)} different folders {folder} under {root} "
            f"({', '.join(map(str, found))}); keep one of them"
        )
    return found[0]


def read_lines(path: Path) -> list[str]:
    """The lines of `path`, split on \\n only (a sentence may hold U+2028 or a form feed), decoded
    as UTF-8 with undecodable bytes replaced, a leading byte-order mark and CRs dropped."""
    lines = path.read_bytes().decode("utf-8-sig", errors="replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def check_gold(path, value: float, line_no: int | None, scale: tuple[float, float]) -> float:
    """`value` if it lies within `scale`, else a DataFormatError naming the file, the line and the value."""
    low, high = scale
    if not low <= value <= high:
        raise DataFormatError(path, f"gold score {value:g} is outside the set's scale {low:g}-{high:g}", line_no)
    return value


def check_scorable(gold, where, sample: str = "", remedy: str = "") -> None:
    """Refuse gold that no correlation can be computed against: fewer than two scored pairs, or one
    value throughout. `where`: the file(s) it came from; `sample`: the flag whose sample left it so
    (e.g. "--max-eval-samples 2"), which the message then asks to raise; `remedy`: another way out."""
    gold = np.asarray(gold, dtype=np.float64)
    if len(gold) >= 2 and np.ptp(gold) > 0:
        return
    if len(gold) < 2:
        problem = f"{len(gold)} scored pair{'' if len(gold) == 1 else 's'} (a correlation needs two or more)"
    else:
        problem = f"gold {gold[0]:g} throughout its {len(gold)} pairs (no correlation against constant gold)"
    if sample:
        raise SweepInputError(f"{sample} leaves {where} with {problem}; raise {sample.split()[0]}")
    raise DataFormatError(where, f"{problem}, so it cannot be scored; fix its gold scores{remedy}")


def read_subset(input_path: Path, gold_path: Path, scale: tuple[float, float] = (0.0, 5.0)) -> Pairs:
    """The scored pairs of one subset (a blank gold line is an unscored pair: skipped); gold outside
    `scale`, or gold that cannot be scored (`check_scorable`), is refused."""
    gold_lines, input_lines = read_lines(gold_path), read_lines(input_path)
    if len(gold_lines) != len(input_lines):
        raise DataFormatError(
            gold_path,
            f"{len(gold_lines)} gold lines but {len(input_lines)} sentence pairs "
            f"in {input_path.name}; each line of one must match the same line of the other",
        )
    s1, s2, gold = [], [], []
    for line_no, (score, pair) in enumerate(zip(gold_lines, input_lines), start=1):
        if not score.strip():
            continue
        fields = pair.split("\t")
        if len(fields) < 2:
            raise DataFormatError(input_path, "expected two tab-separated sentences", line_no)
        gold.append(check_gold(gold_path, parse_float(gold_path, score, line_no, "gold score"), line_no, scale))
        s1.append(fields[0])
        s2.append(fields[1])
    check_scorable(
        gold,
        gold_path,
        remedy=f" (a blank line marks an unscored pair), or remove {gold_path.name} to leave the subset out",
    )
    return Pairs(s1, s2, np.asarray(gold, dtype=np.float64))


def read_senteval_folder(folder: Path, scale: tuple[float, float] = (0.0, 5.0)) -> dict[str, Pairs]:
    subsets = {subset: read_subset(*paths, scale) for subset, paths in subset_files(folder).items()}
    if not subsets:
        raise DataFormatError(folder, f"no subset in {_layout_hint(folder.name)}")
    return subsets


class SemEvalSTS(EvalSet):
    """A SemEval year from its SentEval-layout folder; else from MTEB's copy (`mteb/sts<YY>-sts`, one
    pooled subset: it keeps no subset names) on the hub or in the hub's layout under the data dir."""

    year = 0

    def load(self, data_dir) -> EvalData:
        hub = HubCopy(f"mteb/sts{self.year}-sts")
        if is_hub(data_dir) or (
            not find_under(data_dir, f"STS{self.year}-en-test", folder=True) and hub.folder(data_dir)
        ):
            rows, checksum = hub.rows(data_dir)
            return EvalData(self.name, {"all": hub_sts_pairs(rows, hub.describe(), self.scale)}, checksum)
        folder = find_sts_year(data_dir, self.year)
        return EvalData(self.name, read_senteval_folder(folder, self.scale), files_digest(_files_read(folder)))


def hub_sts_pairs(rows: list[dict], where: str, scale: tuple[float, float]) -> Pairs:
    """MTEB's STS layout: `sentence1`, `sentence2`, `score` per row (the gold checked as a release's)."""
    for row in rows[:1]:
        missing = [c for c in ("sentence1", "sentence2", "score") if c not in row]
        if missing:
            raise DataFormatError(where, f"no column(s) {', '.join(missing)} (found {', '.join(row)})")
    gold = [check_gold(f"{where} (pair {n})", float(r["score"]), None, scale) for n, r in enumerate(rows, start=1)]
    check_scorable(gold, where)
    return Pairs([r["sentence1"] for r in rows], [r["sentence2"] for r in rows], np.asarray(gold, dtype=np.float64))


for _year in range(12, 17):
    register_eval_set(f"sts{_year}")(
        type(
            f"STS{_year}",
            (SemEvalSTS,),
            {
                "year": _year,
                "description": f"SemEval STS 20{_year} English test set (SentEval layout)",
                "info": SetInfo(
                    f"STS{_year}",
                    f"Agirre et al. 20{_year}",
                    f"`STS{_year}-en-test/STS.input.<subset>.txt` with `STS.gs.<subset>.txt` (SentEval's "
                    "`data/downstream/get_transfer_data.bash` fetches them)",
                    f"`mteb/sts{_year}-sts` (no subsets: only the pooled score)",
                    "sts",
                ),
            },
        )
    )


# --- STS-B and SICK relatedness ------------------------------------------------------------------
def _pairs(examples, where: str, scale: tuple[float, float]) -> Pairs:
    """The examples' pairs, their gold checked: `check_scorable`, and the range (which the release
    readers check line by line already; this covers the hub copies, a pair named by its position)."""
    for number, example in enumerate(examples, start=1):
        check_gold(f"{where} (pair {number})", example.score, None, scale)
    check_scorable([e.score for e in examples], where)
    return Pairs(
        [e.sentence1 for e in examples],
        [e.sentence2 for e in examples],
        np.asarray([e.score for e in examples], dtype=np.float64),
    )


class StsbSplit(EvalSet):
    split = "test"

    def load(self, data_dir) -> EvalData:
        from trainables.data.stsb import RELEASE, load_stsb, stsb_checksums

        examples = load_stsb(data_dir, splits=(self.split,))[self.split]
        where = RELEASE.hub_id if str(data_dir) == "hub" else str(RELEASE.paths(data_dir)[self.split])
        return EvalData(self.name, {"all": _pairs(examples, where, self.scale)}, stsb_checksums(data_dir)[self.split])


@register_eval_set("stsb")
class StsbTest(StsbSplit):
    split, description = "test", "STS Benchmark test"
    info = SetInfo("STS-B", "Cer et al. 2017", "`stsbenchmark/sts-test.csv`", "`sentence-transformers/stsb`", "sts")


@register_eval_set("stsb_dev")
class StsbDev(StsbSplit):
    split, description = "dev", "STS Benchmark dev"
    info = SetInfo("STS-B dev", "Cer et al. 2017", "`stsbenchmark/sts-dev.csv`", "`sentence-transformers/stsb`", "sts")


class SickRelatedness(EvalSet):
    splits: tuple = ("test",)
    scale = (1.0, 5.0)  # SICK relatedness

    def load(self, data_dir) -> EvalData:
        from trainables.data.sick import RELEASE, load_sick, sick_checksums

        loaded = load_sick(data_dir, splits=self.splits)
        checksums = sick_checksums(data_dir)
        examples = [e for split in self.splits for e in loaded[split]]
        paths = RELEASE.paths(data_dir)
        where = RELEASE.hub_id if str(data_dir) == "hub" else ", ".join(str(paths[s]) for s in self.splits)
        return EvalData(
            self.name,
            {"all": _pairs(examples, where, self.scale)},
            hashlib.sha256("".join(checksums[s] for s in self.splits).encode()).hexdigest()[:16],
        )


@register_eval_set("sickr")
class SickrTest(SickRelatedness):
    splits, description = ("test",), "SICK relatedness, test split (SentEval)"
    info = SetInfo("SICK-R", "Marelli et al. 2014", "`sick/SICK_test_annotated.txt`", "`RobZamp/sick`", "sts")


@register_eval_set("sickr_all")
class SickrAll(SickRelatedness):
    splits, description = ("train", "dev", "test"), "SICK relatedness, all 9,927 pairs (MTEB)"
    info = SetInfo(
        "SICK-R all", "Marelli et al. 2014", "`sick/SICK_{train,trial,test_annotated}.txt`", "`RobZamp/sick`", "sts"
    )


# --- the suite ----------------------------------------------------------------------------------
def metric_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name)


@dataclass
class EvalSuite:
    """Loaded sets and their unique texts; picklable (it is shipped to trials)."""

    sets: dict[str, EvalData]
    sentences: list[str] = field(init=False)
    position: dict[str, int] = field(init=False, repr=False)  # text -> its row in `sentences`

    def __post_init__(self):
        self.position = {}
        for data in self.sets.values():
            kind = task_kind(data.kind)
            for subset in data.subsets.values():
                for text in kind.texts(subset):
                    self.position.setdefault(text, len(self.position))
        self.sentences = list(self.position)

    @property
    def checksums(self) -> dict[str, str]:
        return {name: data.checksum for name, data in self.sets.items()}

    def score(self, embeddings: np.ndarray) -> dict[str, float]:
        embeddings = np.asarray(embeddings, dtype=np.float64)
        if len(embeddings) != len(self.sentences):
            raise ValueError(f"{len(embeddings)} embeddings for {len(self.sentences)} sentences")
        unit = embeddings / np.clip(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12, None)

        def embed(texts: list[str]) -> np.ndarray:
            return unit[[self.position[text] for text in texts]]

        out = {}
        for name, data in self.sets.items():
            scores = _score_sts(data, embed) if data.kind == "sts" else _score_by_subset(data, embed)
            out.update({f"{name}_{metric}": value for metric, value in scores.items()})
        out.update(suite_averages(self.sets, out))
        return out


def _score_sts(data: EvalData, embed) -> dict[str, float]:
    """Spearman and Pearson over the set's pairs pooled (MTEB's), and the per-subset Spearman with
    their mean and their mean weighted by pairs (SentEval's)."""
    cosines, golds, per_subset, out = [], [], [], {}
    for subset, pairs in data.subsets.items():
        cosine = pair_cosines(pairs, embed)
        cosines.append(cosine)
        golds.append(pairs.gold)
        per_subset.append(correlations(cosine, pairs.gold)["spearman"])
        if len(data.subsets) > 1:
            out[f"{metric_safe(subset)}_spearman"] = per_subset[-1]
    out.update(correlations(np.concatenate(cosines), np.concatenate(golds)))
    out["spearman_mean"] = float(np.mean(per_subset))
    out["spearman_wmean"] = float(np.average(per_subset, weights=[len(p) for p in data.subsets.values()]))
    return out


def _score_by_subset(data: EvalData, embed) -> dict[str, float]:
    """Each subset's metrics, and with several subsets each metric's mean over them (USEB's)."""
    kind = task_kind(data.kind)
    per_subset = {subset: kind.score(part, embed) for subset, part in data.subsets.items()}
    if len(per_subset) == 1:
        return next(iter(per_subset.values()))
    out = {f"{metric_safe(s)}_{metric}": value for s, scores in per_subset.items() for metric, value in scores.items()}
    for metric in next(iter(per_subset.values())):
        out[metric] = float(np.mean([scores[metric] for scores in per_subset.values()]))
    return out


USEB_TASKS = ("askubuntu", "cqadupstack", "twitterpara", "scidocs")


def suite_averages(sets: dict[str, EvalData], scores: dict[str, float]) -> dict[str, float]:
    """`mean_spearman` over the STS sets; `mean_<kind>_<main>` over the sets of every other kind;
    `useb_avg` over USEB's four tasks when the suite holds all four (the TSDAE paper's Avg.)."""
    out = {}
    by_kind: dict[str, list[float]] = {}
    for name, data in sets.items():
        by_kind.setdefault(f"{data.kind}_{data.main}", []).append(scores[f"{name}_{data.main}"])
    for key, values in by_kind.items():
        out["mean_spearman" if key == "sts_spearman" else f"mean_{key}"] = float(np.mean(values))
    if all(name in sets for name in USEB_TASKS):
        out["useb_avg"] = float(np.mean([scores[f"{name}_{sets[name].main}"] for name in USEB_TASKS]))
    return out


def load_suite(names: list[str], data_dir) -> EvalSuite:
    """The named sets loaded from `data_dir` (SweepInputError / DataFormatError naming what is missing)."""
    sets = {}
    for name in names:
        found = get_eval_set(name)
        sets[name] = found.load(data_dir)
        sets[name].main = found.main or sets[name].main
    return EvalSuite(sets)


EVAL_SETS = Setting(
    "eval_sets",
    Names(known=lambda: eval_set_names(), empty=True),
    [],
    "evaluation sets scored with the best-dev weights at the end of each trial",
)


PAPER_SETS = ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr")  # the papers' STS suite


SUITE = Setting(
    "sets",
    Auto(Names(known=lambda: eval_set_names()), word="papers"),
    "papers",
    "the evaluation sets: 'papers' (STS12-16, STS-B test, SICK-R test, those found in --data-dir) or named sets",
    group="what to evaluate",
)


def suite_sets(sets, data_dir) -> tuple[list[str], list[str]]:
    """(sets to use, default sets not found) of `SUITE`'s typed value: `papers` = STS12-16, STS-B
    test, SICK-R where found; a list of names as it is."""
    if sets != "papers":
        return list(sets), []
    found, missing = [], []
    for name in PAPER_SETS:
        try:
            load_suite([name], data_dir)
            found.append(name)
        except SweepInputError:
            missing.append(name)
    if not found:
        raise SweepInputError(
            f"--sets papers: none of {', '.join(PAPER_SETS)} was found under {data_dir}; pass --data-dir"
        )
    return found, missing
