"""Display names for models and methods, as the ELECTRA paper writes them.

`google/electra-base-discriminator` -> "ELECTRA-D base", `google/electra-small-generator` ->
"ELECTRA-G small", `bert-base-cased` -> "BERT base", `google/bert_uncased_L-4_H-256_A-4` ->
"BERT mini", `microsoft/deberta-v3-base` -> "DeBERTaV3 base"; anything else (a local directory,
an unknown hub id) -> its last path component. `display_names` keeps names unique. Also the
names of methods, tasks, metrics and evaluation sets (`score_name`: `stsb_spearman` -> "STS-B").
"""

from __future__ import annotations

import functools
import re
from pathlib import PurePosixPath

_BERT_MINIATURES = {(2, 128): "tiny", (4, 256): "mini", (4, 512): "small", (8, 512): "medium", (12, 768): "base"}
_PATTERNS = [
    (
        re.compile(
            r"^(?P<family>\w*electra|electricidad)-(?P<size>small|base|large)(?:-v\d+)?-(?P<kind>discriminator|generator)$",
            re.I,
        ),
        lambda m: f"{_family(m['family'])}-{m['kind'][0].upper()} {m['size'].lower()}",
    ),
    (
        re.compile(r"^(?P<family>gelectra)-(?P<size>small|base|large)$", re.I),
        lambda m: f"{_family(m['family'])}-D {m['size'].lower()}",
    ),
    (
        re.compile(r"^bert-(?P<size>tiny|mini|small|medium|base|large)(?:-cased|-uncased)?$", re.I),
        lambda m: f"BERT {m['size'].lower()}",
    ),
    (
        re.compile(r"^bert_uncased_L-(?P<l>\d+)_H-(?P<h>\d+)_A-\d+$", re.I),
        lambda m: f"BERT {_BERT_MINIATURES.get((int(m['l']), int(m['h'])), 'L' + m['l'] + '-H' + m['h'])}",
    ),
    (re.compile(r"^deberta-v3-(?P<size>xsmall|small|base|large)$", re.I), lambda m: f"DeBERTaV3 {m['size'].lower()}"),
]
ANALYSES = {"cka": "CKA"}  # what the analysis itself labels runs with; methods name themselves (MethodInfo)
TASK_NAMES = {"stsb": "STS-B", "sts-b": "STS-B", "mrpc": "MRPC", "sick": "SICK"}
METRIC_NAMES = {"spearman": "Spearman", "pearson": "Pearson", "f1": "F1", "accuracy": "accuracy"}
# Metrics of the evaluation suite's task kinds (trainables/evaluation/task_kinds.py) as column suffixes.
KIND_METRICS = {
    "spearman_wmean": "Spearman wmean",
    "spearman_mean": "Spearman mean",
    "ap": "AP",
    "map": "MAP",
    "mrr_at_10": "MRR@10",
    "mrr": "MRR",
    "useb_map_at_100": "MAP@100",
    "map_at_100": "MAP@100 (trec)",
    "ndcg_at_10": "nDCG@10",
    "accuracy": "accuracy",
    "f1": "F1",
}
# How each kind of column aggregates, for the note under a table of them.
AGGREGATIONS = {
    "spearman": "<set>: Spearman of all the set's pairs pooled (MTEB's)",
    "spearman_mean": "mean: the mean of the set's per-subset Spearman (SentEval's)",
    "spearman_wmean": "wmean: the per-subset Spearman weighted by pairs (SentEval's)",
    "mean_spearman": "Avg.: the mean of the sets' pooled Spearman",
    "useb_avg": "USEB Avg.: the mean of AskUbuntu MAP, CQADupStack MAP@100, TwitterPara AP and SciDocs MAP",
    "subsets": "a set of several subsets (TwitterPara, SciDocs, CQADupStack): the unweighted mean over them (USEB's)",
}


_FAMILIES = {"electra": "ELECTRA", "koelectra": "KoELECTRA", "gelectra": "GELECTRA", "electricidad": "Electricidad"}


def _family(text: str) -> str:
    return _FAMILIES.get(text.lower(), text)


RANDOM_INIT_SUFFIX = " (random init)"


@functools.cache
def set_names() -> dict[str, str]:
    """{evaluation set: its column head}, as the papers' zero-shot tables head them: each registered set's
    `SetInfo.display_name` (trainables/evaluation/sets.py), and the mean over the sets as "Avg."."""
    from trainables.evaluation.sets import SET_REGISTRY, eval_set_names

    return {**{name: SET_REGISTRY.get(name).info.display_name for name in eval_set_names()}, "mean": "Avg."}


def short_name(model: str) -> str:
    """The paper-style name of a model id or directory (see the module docstring); a model the
    loader marked as randomly initialised keeps its " (random init)" suffix."""
    if str(model).endswith(RANDOM_INIT_SUFFIX):
        return short_name(str(model)[: -len(RANDOM_INIT_SUFFIX)]) + RANDOM_INIT_SUFFIX
    last = PurePosixPath(str(model).rstrip("/")).name or str(model)
    for pattern, render in _PATTERNS:
        match = pattern.match(last)
        if match:
            return render(match)
    return last


def display_names(models) -> dict[str, str]:
    """{model: unique display name}; clashing short names fall back to the full id or path."""
    models = list(dict.fromkeys(str(m) for m in models))
    names = {m: short_name(m) for m in models}
    counts: dict[str, int] = {}
    for name in names.values():
        counts[name] = counts.get(name, 0) + 1
    return {m: (n if counts[n] == 1 else m) for m, n in names.items()}


def _method_labels() -> dict[str, tuple[int, int, str]]:
    """Every label a registered method's runs record -> (the method's place, the label's place in it,
    its display name), from each method's `MethodInfo`: its own name, then its `labels`."""
    from trainables.core.method import METHODS
    from trainables.methods import load

    load()
    out: dict[str, tuple[int, int, str]] = {}
    for rank, key in enumerate(sorted(METHODS.names())):
        info = METHODS.get(key).info
        for place, (label, shown) in enumerate({key: info.display_name, **info.labels}.items()):
            out.setdefault(label, (rank, place, shown))
    return out


def method_info(method: str):
    """The `MethodInfo` of the registered method whose runs record the label `method` (None: no such method)."""
    from trainables.core.method import METHODS

    found = _method_labels().get(str(method).lower())
    return METHODS.get(sorted(METHODS.names())[found[0]]).info if found else None


def method_name(method: str) -> str:
    """A method label as reports show it: the display name its method declares (a label its runs
    record, e.g. `ws+tmft`, included); an analysis's own label; else as recorded."""
    label = str(method).lower()
    found = _method_labels().get(label)
    return found[2] if found else ANALYSES.get(label, str(method))


def task_name(task: str) -> str:
    return TASK_NAMES.get(str(task).lower(), str(task))


def metric_name(metric: str) -> str:
    return METRIC_NAMES.get(str(metric).lower(), str(metric))


def score_name(metric: str) -> str:
    """A final metric as a table header: an evaluation set's Spearman by the set's name
    (`stsb_spearman` -> "STS-B"), the mean over the sets as "Avg."; another metric of a set by the
    set and the metric (`twitterpara_ap` -> "TwitterPara AP", `twitterpara_turl_ap` -> "TwitterPara
    TURL AP", `sts12_spearman_wmean` -> "STS12 Spearman wmean"); USEB's average as "USEB Avg.",
    a kind's average by what it averages; any other as logged."""
    metric = str(metric)
    if metric == "useb_avg":
        return "USEB Avg."
    if metric.startswith("mean_") and metric != "mean_spearman":
        for suffix, label in KIND_METRICS.items():
            if metric.endswith(f"_{suffix}"):
                kind = metric.removeprefix("mean_").removesuffix(f"_{suffix}").replace("_", " ")
                return f"Avg. {kind} {label}"
    name = metric.removesuffix("_spearman")
    if name != metric:
        return set_names().get(name, metric)
    for suffix, label in KIND_METRICS.items():
        if metric.endswith(f"_{suffix}"):
            parts = metric.removesuffix(f"_{suffix}").split("_")
            for cut in range(len(parts), 0, -1):
                head, rest = "_".join(parts[:cut]), parts[cut:]
                if head in set_names():
                    return " ".join([set_names()[head], *(set_names().get(p, p) for p in rest), label])
    return metric


def aggregation_note(metrics) -> str:
    """One line saying how the columns `metrics` aggregate, or "" when none needs saying."""
    metrics = [str(m) for m in metrics]
    said = []
    if any(m.endswith("_spearman") and m != "mean_spearman" for m in metrics):
        said.append(AGGREGATIONS["spearman"])
    for key in ("spearman_mean", "spearman_wmean"):
        if any(m.endswith(f"_{key}") for m in metrics):
            said.append(AGGREGATIONS[key])
    for key in ("mean_spearman", "useb_avg"):
        if key in metrics:
            said.append(AGGREGATIONS[key])
    if any(m.split("_")[0] in ("twitterpara", "scidocs", "cqadupstack") for m in metrics):
        said.append(AGGREGATIONS["subsets"])
    return ("Columns: " + "; ".join(said) + ".") if said else ""


def method_sort_key(method: str):
    """Methods by name, each followed by the labels it declares in its order (TMFT, WS+TMFT,
    DAPT+TMFT); any other label after them, alphabetically."""
    label = str(method).lower()
    found = _method_labels().get(label)
    return (found[0], found[1], "") if found else (len(_method_labels()), 0, label)
