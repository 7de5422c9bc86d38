"""The unsupervised attention-based meta-embedding paper by name (Takahashi and Bollegala 2022,
../shared/papers/unsupervised-attention-meta-embeddings.txt): its Tables 1 and 2 as presets of
`sweeps/meta_embeddings.py`, and their published numbers, typed in as printed (the one place they
live; Pearson / Spearman x100).

Table 1: STS-15, STS-16 and STS-B, every source alone (SSE) and CONC and AVG with max (a) and mean
(b) pooling, SVD, GCCA, SUP and UNSUP. Table 2 (§4.6): UNSUP with and without the source weights,
max and mean pooling (its UNSUP w/ max row is Table 1's STS-B number, so the set is STS-B). The
paper aggregates with SentEval's weighted mean over subsets (§4.2: "class-weighted averages"), so
the comparison reads `<set>_spearman_wmean` (for STS-B, one subset, the plain Spearman). Only
Spearman is compared: the suite's Pearson pools a set's pairs, not SentEval's weighted mean.

Matching rows: SSE by source position (`source_index`: the paper's BERT source first, RoBERTa
second), AVG is `zero-pad` (equal source sizes: a plain average), SVD is `train` (top-d
components, §4.3), SVD and GCCA with mean pooling (the paper marks no pooling for them; mean is
their source method's), SUP `mse` and UNSUP `paper` with max pooling (Table 2: UNSUP's Table 1 row
is max-pooled; SUP's pooling unmarked, max assumed, the code's default).
"""

from __future__ import annotations

from trainables.core.method import Estimate, Preset, PublishedColumn, PublishedRow, TrialCost

PAPER = "Takahashi and Bollegala 2022, Unsupervised Attention-based Sentence-Level Meta-Embeddings (UNSUP)"
SOURCES = (
    "sentence-transformers/bert-large-nli-stsb-mean-tokens,sentence-transformers/roberta-large-nli-stsb-mean-tokens"
)
SETS = ("sts15", "sts16", "stsb")
NAMES = {"sts15": "STS-15", "sts16": "STS-16", "stsb": "STS-B"}

# Table 1 as printed: {row: ((Pearson, Spearman) on STS-15, STS-16, STS-B)}; (a) = max pooling, (b) = mean pooling.
TABLE1 = {
    "SSE BERT (a)": ((87.15, 87.34), (81.98, 83.05), (82.40, 82.74)),
    "SSE BERT (b)": ((88.29, 88.22), (83.24, 84.02), (83.66, 84.05)),
    "SSE RoBERTa (a)": ((75.94, 78.69), (72.96, 75.20), (82.46, 83.75)),
    "SSE RoBERTa (b)": ((87.72, 87.88), (84.55, 84.93), (82.46, 83.26)),
    "CONC (a)": ((82.46, 83.86), (78.33, 79.88), (75.12, 76.21)),
    "CONC (b)": ((88.64, 88.59), (84.27, 84.88), (84.69, 85.14)),
    "AVG (a)": ((82.23, 83.72), (77.99, 79.68), (83.89, 84.53)),
    "AVG (b)": ((88.47, 88.45), (83.97, 84.63), (84.21, 84.47)),
    "SVD": ((88.66, 88.65), (84.07, 84.63), (83.98, 84.61)),
    "GCCA": ((88.58, 88.58), (84.00, 84.53), (83.36, 84.14)),
    "SUP": ((89.34, 89.30), (85.11, 85.72), (65.21, 64.79)),
    "UNSUP": ((88.76, 88.85), (85.06, 85.33), (85.33, 86.08)),
}
# Table 2 as printed (STS-B): {(weights, pooling): (Pearson, Spearman)}.
TABLE2 = {
    ("w/", "mean"): (75.08, 75.03),
    ("w/", "max"): (85.33, 86.08),
    ("w/o", "mean"): (80.06, 80.41),
    ("w/o", "max"): (81.98, 83.00),
}

_MATCH = {
    "SSE BERT (a)": (("meta", "sse"), ("source_index", "0"), ("pooling", "max")),
    "SSE BERT (b)": (("meta", "sse"), ("source_index", "0"), ("pooling", "mean")),
    "SSE RoBERTa (a)": (("meta", "sse"), ("source_index", "1"), ("pooling", "max")),
    "SSE RoBERTa (b)": (("meta", "sse"), ("source_index", "1"), ("pooling", "mean")),
    "CONC (a)": (("meta", "conc"), ("pooling", "max")),
    "CONC (b)": (("meta", "conc"), ("pooling", "mean")),
    "AVG (a)": (("meta", "avg"), ("variant", "zero-pad"), ("pooling", "max")),
    "AVG (b)": (("meta", "avg"), ("variant", "zero-pad"), ("pooling", "mean")),
    "SVD": (("meta", "svd"), ("variant", "train"), ("pooling", "mean")),
    "GCCA": (("meta", "gcca"), ("pooling", "mean")),
    "SUP": (("meta", "sup"), ("variant", "mse"), ("pooling", "max")),
    "UNSUP": (("meta", "unsup"), ("variant", "paper"), ("pooling", "max")),
}


def _group(label: str) -> str:
    return "SSE" if label.startswith("SSE") else "meta"


TABLE1_ROWS = tuple(
    PublishedRow(label, _MATCH[label], tuple((NAMES[s], v[1]) for s, v in zip(SETS, values)), _group(label))
    for label, values in ((label, TABLE1[label]) for label in TABLE1)
)
TABLE2_ROWS = tuple(
    PublishedRow(
        f"UNSUP {weights} weights, {pooling}",
        (("meta", "unsup"), ("variant", "paper" if weights == "w/" else "no-weights"), ("pooling", pooling)),
        (("STS-B", values[1]),),
        "UNSUP",
    )
    for (weights, pooling), values in TABLE2.items()
)
COLUMNS1 = tuple(PublishedColumn(NAMES[s], (f"{s}_spearman_wmean",)) for s in SETS)
COLUMNS2 = (PublishedColumn("STS-B", ("stsb_spearman_wmean",)),)
SOURCE1 = "the meta-embedding paper, Table 1: Spearman x100, SentEval's weighted mean over subsets"
SOURCE2 = "the meta-embedding paper, Table 2 (§4.6): STS-B Spearman x100"

NOTE = (
    "What differs: the paper's sources are SBERT's bert-large-nli-stsb-mean-tokens and "
    "roberta-large-nli-stsb-mean-tokens (the preset's --sources; the project's default sources, all-MiniLM-L6-v2 "
    "and all-mpnet-base-v2, are other models, so with them no row is comparable with the paper's; SSE rows match "
    "by source position). The authors encoded their sources in training mode (dropout noise); the cache holds "
    "deterministic vectors. Their SentEval run's padding and STS-B variant are unclear (docs/methods/index.md "
    "ambiguity 6); here each sentence is pooled over its own words and scored by the cosine. The paper's SGD "
    "settings and seeds are lost from its text: lr 1e-2 and weight decay 1e-4 come from the authors' code, "
    "seeds are run params."
)


def _preset(name, reproduces, flags, rows, columns, source) -> Preset:
    return Preset(
        name,
        "meta-embeddings",
        "sweeps/meta_embeddings.py",
        reproduces,
        {"sources": SOURCES, "pooling": "max,mean", "baseline_inputs": "raw", **flags},
        source,
        rows,
        NOTE,
        paper=PAPER,
        columns=columns,
        shown=(("baseline_inputs", "baselines' inputs (the paper's: raw)"),),
    )


PRESETS = {
    p.name: p
    for p in (
        _preset(
            "unsup-table1",
            "UNSUP Table 1: sources alone, CONC, AVG (max and mean pooling), SVD, GCCA, SUP and UNSUP on STS-15, "
            "STS-16, STS-B",
            {
                "methods": "sse,conc,avg,svd,gcca,sup,unsup",
                "variants": "paper,mse,zero-pad,train",
                "sets": ",".join(SETS),
            },
            TABLE1_ROWS,
            COLUMNS1,
            SOURCE1,
        ),
        _preset(
            "unsup-table2",
            "UNSUP Table 2: UNSUP with and without source weights, max and mean pooling, on STS-B",
            {"methods": "unsup", "variants": "paper,no-weights", "sets": "stsb"},
            TABLE2_ROWS,
            COLUMNS2,
            SOURCE2,
        ),
    )
}

# The plan's flat per-trial figures (trainables/methods/meta_embeddings/method.py `costs`): GPU memory
# and seconds of a trained (UNSUP, SUP) trial and of a baseline's (on the CPU).
TRIAL_MEMORY, TRAINED_SECONDS, BASELINE_SECONDS = 2e9, 60.0, 5.0


def trial_cost(meta: str) -> TrialCost:
    """The plan's flat cost of one trial of `meta` (UNSUP and SUP train on a GPU; the baselines do not)."""
    from trainables.methods.meta_embeddings.variants import TRAINED

    trained = meta in TRAINED
    return TrialCost(memory_bytes=TRIAL_MEMORY, seconds=TRAINED_SECONDS if trained else BASELINE_SECONDS, gpu=trained)


def estimate(args, trial_grid) -> Estimate:
    """Trials of the grid (methods x variants x poolings x seeds, one SSE trial per source), each at
    the plan's flat cost (`trial_cost`), and the GPU-hours of its trained trials (UNSUP, SUP) at 60 s
    each; the baselines run on the CPU and the sources' token-embeddings stages (one per source,
    listed) are not priced. `trial_grid`: method.py's (args typed, as the sweep's parser gives them)."""
    grid = trial_grid(args.methods, args.variants, list(args.sources))
    repeats = len(args.seeds) * len(args.pooling)
    costs = tuple(trial_cost(t["meta"]) for _ in range(repeats) for t in grid)
    sets = args.sets if args.sets == "papers" else ",".join(args.sets)
    return Estimate(
        len(costs),
        sum(c.seconds for c in costs if c.gpu) / 3600,
        "source encoding stages not priced",
        "meta-embeddings: the plan's flat 60 s per UNSUP/SUP trial; baselines on the CPU",
        costs=costs,
        stages=tuple(f"token-embeddings: {source} over STS-B train/dev and --sets {sets}" for source in args.sources),
    )
