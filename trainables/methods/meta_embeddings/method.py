"""Sentence meta-embeddings of frozen sources (the unsupervised attention-based meta-embedding
paper; docs/methods/meta-embeddings.md M4): UNSUP, trained without labels on the STS-B train sentences, and the
baselines SSE, CONC, AVG, SVD, GCCA and SUP.

Inputs: `--sources` (two or more encoders, of any sizes), `--methods`, `--variants`, `--seeds`,
`--sets`. Each source's word vectors come from the `token-embeddings` stage
(trainables/methods/meta_embeddings/token_embeddings.py), encoded once per (source, sentences) into the stage store;
trials read them memory-mapped and never load an encoder. Grid: methods x variants x seeds.

Methods (`meta`) and their variants (`variant`):
- `unsup` `paper` / `authors_code`: the attention model trained on the four criteria (below);
- `sup` `mse`: the paper's model trained on STS-B train scores, squared error between the
  cosine and the score, both mapped to [0, 1] ((cos + 1) / 2, y / 5); `signed`: the authors'
  model and loss, mean(||m(s1) - m(s2)|| - y / 5) at lr 1e-4;
- `sse` (variant = the source's label, `source_labels`: its folder name, or the shortest path suffix
  that tells two sources apart, e.g. `a/tiny` and `b/tiny`): each source alone;
- `conc`: the sources' sentence vectors concatenated;
- `avg` `zero-pad`: averaged after zero-padding to the largest size; `projected`: averaged after
  a random isometry of each source into the largest size (seeded by the trial's seed);
- `svd` `train`: per-source centring, concatenation, the top d = min(--width, the sources' summed
  size) right singular vectors, fitted on the STS-B train sentences only (refused with fewer
  than d + 1 of them, as GCCA is: `models.check_fit_sentences`); `full`: the authors' fit, all
  components, on every cached sentence (evaluation sentences included; docs/methods/index.md ambiguity 7:
  a rotation of centred CONC, so it scores as centred CONC);
- `gcca`: MAXVAR generalised CCA (cca-zoo's `GCCA`; each view's covariance plus the authors' ridge
  0.1 x its mean feature std, `gcca_shrinkage`) fitted on the STS-B train
  sentences, d = min(--width, smallest source size); a sentence is the mean of its views' scores.
Every trial runs under each `--pooling` (max, mean: an axis; paper Table 1 has both rows for the
baselines); the baselines pool each source's raw word vectors (`--baseline-inputs raw`, the
default: the paper's eq. 11-14, and the authors' sources had no `Normalize`), or each pooled
sentence vector l2-normalised per source first (`l2`: what SBERT sources with a `Normalize` module,
such as all-MiniLM-L6-v2 and all-mpnet-base-v2, output, and what keeps one source's scale from
deciding CONC, AVG and SVD: all-MiniLM-L6-v2's word vectors are ~2.4x longer than
all-mpnet-base-v2's). Every baseline run records `baseline_inputs`; SSE is unaffected (cosine).
UNSUP and SUP use `--pooling` (max, the authors' default and the paper's best); note that the
sources above were trained with mean pooling, and max-pooling their own word vectors costs them
3-7 points (mpnet STS-B test 80.28 max vs 83.04 mean), so compare UNSUP/SUP with SSE at
`--pooling mean` too.

Model (both variants): per source a projection P_i (width x d_i, no bias, torch's default
initialisation) and a scalar weight a_i ~ U(-1, 1); word vectors w_{i,t} = a_i P_i x_{i,t}.
- `authors_code` (M4): a_i used as they are (no softmax, may be negative); the sentence vector
  is the concatenation of each source's pooled w_i. Loss, with plain Euclidean distances over
  the sides of the pairs (each side zero-padded to its longest sentence; pads take part, also in
  the pooling) and the source pairs i < j, each mean taken over all of them at once:
  mean ||w_it - w_jt|| + |mean_{t != t'} (-alpha ||w_it - w_jt'||)|
  + |mean(-beta ||m(s1) - m(s2)||)| + |lambda mean_i ||P_i^T P_i - I||_F|, with alpha, beta,
  lambda trainable scalars, U(-1, 1) at start (the code's Linear(1, 1) weights). Not reproduced:
  the code encodes its sources in train mode, so its word vectors carry dropout noise, in
  training and evaluation; the cache holds deterministic (eval-mode) vectors.
- `paper`: attention weights normalised over the sources (softmax of the a_i); the word
  meta-vector is sum_i softmax(a)_i P_i x_it and the sentence vector its pooling over the
  sentence's words (pads excluded). Choices where the paper is vague (its formulas are lost in
  the text we have):
  * the criteria compare the weighted projections softmax(a)_i P_i x (on P_i x alone the weights
    would get no gradient from any term);
  * criterion 1 (same word, same sentence, sources i != j) is the squared distance, pulled in;
  * criteria 2-4 (different words of one sentence; the same word of two sentences; different
    words of two sentences; always across sources) and the orthogonality term: `--paper-loss
    literal` (default) as the paper writes them, squared distances times coefficients trained
    with the model (paper §3), each product in |.| as the released code does (bounded; the
    coefficients may shrink to 0, ambiguity 3); `--paper-loss hinge` (a project reading): a hinge
    max(0, margin - squared distance) (`--margin`, default 1) with unit coefficients;
  * "the same word of two sentences": the cache keeps no word identities, so it is the word at
    the same position (as the code aligns positions);
  * the orthogonality term is the paper's cross-correlation sum_{i<j} ||P_i^T P_j||_F
    (not the code's per-source ||P_i^T P_i - I||_F, ambiguity 2);
  * ablations (variants, with `--variants all` or by name): `no-weights` (the paper's Table 2
    "w/o": each source weighted 1/k), `no-c1` .. `no-c4`, `no-ortho` (one term left out);
  * only positions holding words count (masks); the training pairs are the STS-B train pairs
    (the paper allows any two training sentences).
Training: SGD (paper §4.4; no momentum, the research repository's commented-out SGD line) for
`paper`, its ablations and SUP `mse`, AdamW (the released code) for `authors_code` and SUP
`signed` (`--optimizer` overrides); lr 1e-2 (SUP signed 1e-4), weight decay 1e-4, 512 pairs a batch, an epoch
per step, early stopping on STS-B dev Pearson of the cosine (patience 5, cap 20 epochs), the
best epoch's weights scored on the suite. Evaluation pools each sentence's own words (no padding;
the per-pair path, ambiguity 6).

Metrics: `dev_pearson` per epoch, `best_dev_pearson`, and at the end every set's
`<set>_spearman`, `mean_spearman` and `test_spearman_at_best_dev` (STS-B test). The contract's
`reference` is the `sse` rows: the report puts every method beside the best single source.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from trainables.core import settings as shared
from trainables.core.errors import SweepInputError
from trainables.core.method import Method, MethodInfo, MethodPlan, MetricContract, register_method
from trainables.core.setting_conditions import When
from trainables.core.settings import Choice, Float, Int, Kind, Names, Setting
from trainables.evaluation.sets import SUITE
from trainables.methods.meta_embeddings import paper, token_embeddings
from trainables.methods.meta_embeddings.variants import (
    ABLATIONS,
    BASELINE_INPUTS,
    BASELINES,
    OPTIMIZERS,
    PAPER_LOSSES,
    POOLINGS,
    TRAINED,
    VARIANTS,
    check_fit_sentences,
    default_optimizer,
)


def trainable_module():
    """trainables/methods/meta_embeddings/trainable.py (torch, Ray Tune), imported when a plan or a trial needs it."""
    import trainables.methods.meta_embeddings.trainable as module

    return module


DEFAULT_SOURCES = "sentence-transformers/all-MiniLM-L6-v2,sentence-transformers/all-mpnet-base-v2"
DEFAULT_SOURCE_LIST = DEFAULT_SOURCES.split(",")


# --- the method ---------------------------------------------------------------------------------
def _is_local(name: str) -> bool:
    """Whether a --sources entry names a folder (as `resolve_model` decides), not a hub id or run reference."""
    return not name.startswith("runs:/") and (Path(name).expanduser().exists() or name.startswith((".", "/", "~")))


def source_identity(name: str) -> str:
    """What tells two --sources entries apart: a folder's absolute path (symlinks resolved), a hub
    id or run reference without surrounding slashes (a hub id compared case-insensitively, as the
    hub resolves it)."""
    if _is_local(name):
        return str(Path(name).expanduser().resolve())
    return name.strip("/") if name.startswith("runs:/") else name.strip("/").lower()


def refuse_repeated_sources(names: list[str], identities: list[str], what: str = "") -> None:
    """SweepInputError naming both spellings when two --sources entries are one encoder."""
    seen: dict[str, str] = {}
    for name, identity in zip(names, identities):
        if identity in seen:
            raise SweepInputError(
                f"--sources names one encoder twice: {seen[identity]!r} and {name!r} are both {identity}{what}; "
                "a meta-embedding combines different encoders: drop one of them"
            )
        seen[identity] = name


def source_labels(names: list[str]) -> list[str]:
    """A unique, stable label per source, for the configs, run names and report rows: the folder's
    (or hub id's) last part, or, where two sources share it, the shortest suffix of their
    absolute paths (hub ids: the id) that tells them apart, e.g. `a/tiny` and `b/tiny`."""
    parts = [
        list(Path(source_identity(n)).parts[1:]) if _is_local(n) else n.strip("/").split("/") or [n] for n in names
    ]

    def suffix(i: int, k: int) -> str:
        return "/".join(parts[i][-k:])

    labels = []
    for i in range(len(names)):
        k = 1
        while k < len(parts[i]) and any(suffix(i, k) == suffix(j, k) for j in range(len(names)) if j != i):
            k += 1
        labels.append(suffix(i, k))
    return labels if len(set(labels)) == len(labels) else [source_identity(n) for n in names]


class Variants(Kind):
    """--variants: `all` -> None (every variant); `main` -> every variant but UNSUP's ablations; or
    comma-separated variant names (a list)."""

    def known(self) -> list[str]:
        return sorted({v for vs in VARIANTS.values() for v in vs if v != "-"})

    def parse(self, value):
        if value is None or (isinstance(value, str) and value.strip() == "all"):
            return None
        if isinstance(value, str) and value.strip() == "main":
            return [v for v in self.known() if v not in ABLATIONS]
        return Names(known=self.known).parse(value)

    def describe(self) -> str:
        return "main, all, or comma-separated, of " + ", ".join(self.known())

    def bad_values(self) -> list[str]:
        return ["no-such-variant"]

    def to_config(self, value):
        return "all" if value is None else ",".join(value)


def _paper_loss_runs(trial: dict) -> bool:
    """Whether a trial trains with the paper's loss (--paper-loss): UNSUP's paper model and its ablations."""
    return trial["meta"] == "unsup" and trial["variant"] != "authors_code"


def trial_grid(methods: list[str], variants: list[str] | None, sources: list[str]) -> list[dict]:
    """(meta, variant[, source_index]) of every trial of one seed; `variants` None: all; `sources`:
    the sources' labels (`source_labels`), each SSE trial's variant."""
    out = []
    for meta in methods:
        if meta == "sse":
            out += [{"meta": "sse", "variant": label, "source_index": i} for i, label in enumerate(sources)]
            continue
        chosen = [v for v in VARIANTS[meta] if variants is None or v in variants or v == "-"]
        if not chosen:
            raise SweepInputError(
                f"--variants {','.join(variants)} leaves no variant of {meta!r}; "
                f"its variants: {', '.join(VARIANTS[meta])}"
            )
        out += [{"meta": meta, "variant": v} for v in chosen]
    return out


def smoke_sources(storage_path: str, data_dir) -> list[str]:
    """`--smoke-test` sources: a tiny BERT (32-d) and a tiny MPNet (48-d), built once beside the storage
    (beside the smoke-test BERT when the storage path is a URI)."""
    from trainables.data.stsb import load_stsb
    from trainables.encoders.tiny import build_tiny_model, smoke_models_dir

    folders = []
    for kind, hidden in (("bert", 32), ("mpnet", 48)):
        target = smoke_models_dir(storage_path) / f"tiny-{kind}-{hidden}"
        if not (target / "config.json").is_file():
            sentences = [e.sentence1 for e in load_stsb(data_dir, ("train",))["train"][:2000]]
            build_tiny_model(kind, target, layers=2, hidden=hidden, sentences=sentences)
        folders.append(str(target))
    return folders


WHAT = "meta-embeddings"
TRAIN = "UNSUP and SUP training (the authors' defaults)"
CODE = "the authors' code"
SETTINGS = (
    Setting(
        "sources",
        Names(),
        DEFAULT_SOURCE_LIST,
        "two or more comma-separated source encoders (hub ids installed locally, folders, runs:/<id>)",
        group=WHAT,
        source="project (paper §4.1: SBERT's bert-large-nli-stsb-mean-tokens and roberta-large-nli-stsb-mean-tokens)",
    ),
    Setting(
        "methods",
        Names(known=lambda: list(VARIANTS)),
        list(VARIANTS),
        "the methods to run, comma-separated",
        group=WHAT,
        axis=True,
    ),
    Setting(
        "variants",
        Variants(),
        "main",
        "'main' (all but UNSUP's ablations), 'all', or the variants to run: "
        + "; ".join(f"{m}: {', '.join(v)}" for m, v in VARIANTS.items() if len(v) > 1)
        + " (ablations of the paper's model: no-weights = paper Table 2's w/o, no-c1..no-c4, no-ortho = one "
        "loss term left out)",
        group=WHAT,
        axis=True,
    ),
    shared.SEEDS.but(default=[0, 1, 2], group=WHAT),
    SUITE.but(
        default=["sts12", "sts13", "sts14", "stsb"],
        help="evaluation sets scored at the end: 'papers' (STS12-16, STS-B, SICK-R where found) or named sets",
        group=WHAT,
    ),
    shared.EPOCHS.but(kind=Int(low=1), default=20, help="cap on epochs", group=TRAIN, source=CODE),
    Setting(
        "patience",
        Int(low=1),
        5,
        "epochs without a better STS-B dev Pearson before stopping",
        group=TRAIN,
        source="paper §4.4",
    ),
    shared.BATCH_SIZE.but(default=512, help="pairs per update", group=TRAIN, source="paper §4.4"),
    Setting(
        "optimizer",
        Choice(OPTIMIZERS),
        None,
        "unset: sgd (paper §4.4) for the paper's model, its ablations and SUP mse; adamw (the released code) for "
        "UNSUP authors_code and SUP signed",
        group=TRAIN,
        config=False,  # each trial records the optimiser it trains with (none for the baselines)
    ),
    shared.LR.but(
        default=1e-2,
        help="learning rate (SUP signed: always the authors' 1e-4)",
        group=TRAIN,
        source="the authors' research code",
    ),
    shared.WEIGHT_DECAY.but(default=1e-4, help="weight decay", group=TRAIN, source="the authors' research code"),
    Setting(
        "width",
        Int(low=1),
        1024,
        "meta-embedding size per source (also SVD's and GCCA's d, capped)",
        group=TRAIN,
        source="paper §4.5",
    ),
    Setting(
        "pooling",
        Names(known=lambda: list(POOLINGS)),
        list(POOLINGS),
        "word-to-sentence pooling, comma-separated: every method runs under each",
        group=TRAIN,
        source="paper Table 1's max and mean rows",
        axis=True,
    ),
    Setting(
        "paper_loss",
        Choice(PAPER_LOSSES),
        "literal",
        "the paper variant's loss: literal (eq. 10, trained coefficients, |.| as the code) or hinge (the project's "
        "reading: unit coefficients, hinge on criteria 2-4 with --margin)",
        group=TRAIN,
        source="paper §3",
        config=False,  # recorded only on the trials that train with it
        applies_when=(When("methods", ("unsup",)),),
    ),
    Setting(
        "margin",
        Float(low=0),
        1.0,
        "hinge margin of --paper-loss hinge (not in the paper)",
        group=TRAIN,
        config=False,  # recorded only on the trials that train with the hinge
        applies_when=(When("methods", ("unsup",)), When("paper_loss", ("hinge",))),
    ),
    shared.MAX_TRAIN_SAMPLES.but(help="the first N STS-B train pairs (unset: all)", group=TRAIN),
    Setting(
        "baseline_inputs",
        Choice(BASELINE_INPUTS),
        "raw",
        "what CONC, AVG, SVD and GCCA combine: raw (each source's pooled vectors as they are) or l2 (each source's "
        "pooled sentence vector l2-normalised first)",
        group=WHAT,
        source="paper eq. 11-14",
        config=False,  # recorded only on the baselines' trials
        applies_when=(When("methods", ("conc", "avg", "svd", "gcca")),),
    ),
)
CITATION = """@inproceedings{takahashi-bollegala-2022-unsupervised,
  title = {Unsupervised Attention-based Sentence-Level Meta-Embeddings from Contextualised Language Models},
  author = {Takahashi, Keigo and Bollegala, Danushka},
  booktitle = {Proceedings of the Thirteenth Language Resources and Evaluation Conference},
  pages = {7155--7163},
  year = {2022},
  address = {Marseille, France},
  publisher = {European Language Resources Association},
  url = {https://aclanthology.org/2022.lrec-1.775/}
}"""


@register_method("meta-embeddings")
class MetaEmbeddings(Method):
    """UNSUP and the baselines over cached frozen sources (module docstring)."""

    trainable = "trainables.methods.meta_embeddings.trainable:MetaEmbeddingTrainable"  # imported when needed
    info = MethodInfo(
        display_name="UNSUP meta-embeddings",
        description="sentence meta-embeddings: UNSUP (paper, authors_code), SSE, CONC, AVG, SVD, GCCA, SUP of "
        "frozen sources",
        citation=CITATION,
        main_metric="best STS-B dev Pearson (selection); test Spearman at the best dev epoch (report)",
    )
    settings = SETTINGS
    smoke = {"sets": ["stsb"], "epochs": 2, "seeds": [0], "max_train_samples": 256, "width": 16}
    cost_axes = ("meta",)
    presets = paper.PRESETS

    @classmethod
    def estimate(cls, args):
        return paper.estimate(args, trial_grid)

    @classmethod
    def check(cls, args) -> None:
        sources = list(args.sources)
        identities = [source_identity(s) for s in sources]
        if len(set(identities)) < 2 and not args.smoke_test:
            got = (
                f"{sources[0]!r} and {sources[1]!r} are both {identities[0]}"
                if len(sources) > 1
                else f"got {len(sources)} ({','.join(sources)!r})"
            )
            raise SweepInputError(
                f"--sources needs two or more different encoders to combine; {got}; e.g. --sources {DEFAULT_SOURCES}"
            )
        refuse_repeated_sources(sources, identities)
        trial_grid(args.methods, args.variants, sources or ["a", "b"])

    @classmethod
    def base_config(cls, args) -> dict:
        """The declared settings' entries as runs have always recorded them: `sets` comma-separated (the
        suite `plan` resolved), `sources` as each source's label (`source_labels`)."""
        config = super().base_config(args)
        config["sets"] = ",".join(args.sets) if isinstance(args.sets, list) else args.sets
        config["sources"] = ",".join(source_labels(list(args.sources)))
        return config

    @staticmethod
    def sets(args) -> list[str]:
        from trainables.evaluation.sets import suite_sets

        return suite_sets(args.sets, args.data_dir)[0]

    @classmethod
    def metrics(cls, args) -> MetricContract:
        from trainables.evaluation.sets import PAPER_SETS, main_metric, suite_primary

        sets = list(PAPER_SETS) if args.sets == "papers" else list(args.sets)
        return MetricContract(
            primary="best_dev_pearson",
            report="test_spearman_at_best_dev" if "stsb" in sets else suite_primary(sets),
            companion="dev_spearman_at_best_dev",
            epoch="dev_pearson",
            axes=("meta", "variant", "pooling", "seed"),
            select=None,
            seed="seed",
            columns=(*(main_metric(n) for n in sets), suite_primary(sets)),
            label="Pearson",
            short={"meta": "", "variant": "", "pooling": "", "seed": "s"},
            reference=("meta", "sse"),
        )

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.core import object_storage
        from trainables.data.stsb import load_stsb, stsb_checksums
        from trainables.encoders.loading import load_config, resolve_model
        from trainables.evaluation.sets import load_suite
        from trainables.stages.store import stage_root

        sets = args.sets = cls.sets(args)  # `papers`: the sets found
        names = list(args.sources)
        if context.smoke_test and names == DEFAULT_SOURCE_LIST:
            names = smoke_sources(context.storage_path, args.data_dir)
        paths = [resolve_model(name, context.mlflow_uri) for name in names]
        refuse_repeated_sources(names, [str(Path(p).resolve()) for p in paths], " once resolved")
        labels = source_labels(names)
        root = stage_root(None, context.storage_path)
        suite = load_suite(sets, args.data_dir)
        checksum = ",".join(f"{k}={v}" for k, v in sorted({**stsb_checksums(args.data_dir), **suite.checksums}.items()))
        specs = [
            token_embeddings.stage_spec(n, p, sets, args.max_train_samples, checksum, root, args.data_dir)
            for n, p in zip(names, paths)
        ]
        sentences = token_embeddings.stage_sentences(sets, args.data_dir, args.max_train_samples)
        row = {s: i for i, s in enumerate(sentences)}
        splits = load_stsb(args.data_dir, ("train", "dev"))
        splits["train"] = splits["train"][: args.max_train_samples]

        def pairs(examples):
            return (
                np.asarray([row[e.sentence1] for e in examples]),
                np.asarray([row[e.sentence2] for e in examples]),
                np.asarray([e.score for e in examples], dtype=np.float32),
            )

        data = trainable_module().MetaData(
            pairs(splits["train"]),
            pairs(splits["dev"]),
            np.asarray([row[s] for s in suite.sentences]),
            suite,
            len(sentences),
        )
        grid = trial_grid(args.methods, args.variants, labels)
        dims = [int(getattr(load_config(p), "hidden_size", 0) or 0) for p in paths]
        train_sentences = len({s for e in splits["train"] for s in (e.sentence1, e.sentence2)})
        for trial in grid if all(dims) else []:
            check_fit_sentences(trial["meta"], trial["variant"], train_sentences, args.width, dims)
        base = {
            **cls.base_config(args),
            "sources": ",".join(labels),  # the sources that run (a smoke test's tiny ones)
            "upstream_method": "token-embeddings",
            "stage_key": [spec["key"] for spec in specs],
            "upstream_run_id": None,
            "_source_paths": [object_storage.join(root, spec["key"]) for spec in specs],
        }
        configs = [
            {
                **base,
                "source_index": -1,
                **trial,
                "pooling": pooling,
                "optimizer": (args.optimizer or default_optimizer(trial["variant"]))
                if trial["meta"] in TRAINED
                else "",
                "baseline_inputs": args.baseline_inputs if trial["meta"] in BASELINES else None,
                # the paper's loss, and its margin, only where they run (not recorded on other trials)
                "paper_loss": args.paper_loss if _paper_loss_runs(trial) else "",
                "margin": args.margin if _paper_loss_runs(trial) and args.paper_loss == "hinge" else "",
                "seed": seed,
            }
            for seed in args.seeds
            for pooling in args.pooling
            for trial in grid
        ]
        identity = hashlib.sha256("\n".join(sentences).encode()).hexdigest()[:16]
        costs = {(meta,): paper.trial_cost(meta) for meta in VARIANTS}
        return MethodPlan(
            configs=configs,
            data=data,
            costs=costs,
            stages={spec["key"]: spec for spec in specs},
            static_params={
                "source_paths": " | ".join(map(str, paths))[:5000],
                "stage_sentences": len(sentences),
                "stage_sentences_sha": identity,
            },
            checksums={"data": checksum},
            method_label=cls.name,
        )
