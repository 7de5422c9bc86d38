"""Sentence meta-embeddings of frozen sources (the unsupervised attention-based meta-embedding
paper; docs/methods.md M4): UNSUP, trained without labels on the STS-B train sentences, and the
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
  components, on every cached sentence (evaluation sentences included; docs/methods.md ambiguity 7:
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

from trainables.core.errors import SweepInputError
from trainables.core.method import (
    Method,
    MethodPlan,
    MetricContract,
    TrialCost,
    add_seeds_argument,
    parse_int_list,
    parse_names,
    register_method,
)
from trainables.methods.meta_embeddings import paper, token_embeddings
from trainables.methods.meta_embeddings.models import (
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
from trainables.methods.meta_embeddings.trainable import MetaData, MetaEmbeddingTrainable

DEFAULT_SOURCES = "sentence-transformers/all-MiniLM-L6-v2,sentence-transformers/all-mpnet-base-v2"


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


def parse_variants(text: str) -> list[str] | None:
    """--variants: None for `all`; `main` (the default): every variant but UNSUP's ablations; or names."""
    text = str(text).strip()
    known = sorted({v for vs in VARIANTS.values() for v in vs if v != "-"})
    if text == "all":
        return None
    if text == "main":
        return [v for v in known if v not in ABLATIONS]
    return parse_names(text, "--variants", known)


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


@register_method("meta-embeddings")
class MetaEmbeddings(Method):
    """UNSUP and the baselines over cached frozen sources (module docstring)."""

    trainable = MetaEmbeddingTrainable
    description = (
        "sentence meta-embeddings: UNSUP (paper, authors_code), SSE, CONC, AVG, SVD, GCCA, SUP of frozen sources"
    )
    smoke = {"sets": "stsb", "epochs": 2, "seeds": "0", "max_train_samples": 256, "width": 16}
    cost_axes = ("meta",)
    presets = paper.PRESETS

    @classmethod
    def estimate(cls, args):
        return paper.estimate(args, trial_grid, parse_variants)

    @classmethod
    def add_arguments(cls, parser, defaults: dict) -> None:

        what = parser.add_argument_group("meta-embeddings")
        what.add_argument(
            "--sources",
            default=defaults.get("sources", DEFAULT_SOURCES),
            help="two or more comma-separated source encoders (hub ids installed locally, folders, runs:/<id>)",
        )
        what.add_argument("--methods", default=",".join(VARIANTS), help=f"comma-separated: {', '.join(VARIANTS)}")
        what.add_argument(
            "--variants",
            default="main",
            help="'main' (all but UNSUP's ablations), 'all', or the variants to run: "
            + "; ".join(f"{m}: {', '.join(v)}" for m, v in VARIANTS.items() if len(v) > 1)
            + " (ablations of the paper's model: no-weights = paper Table 2's w/o, no-c1..no-c4, no-ortho = one "
            "loss term left out)",
        )
        add_seeds_argument(what, "0,1,2")
        what.add_argument(
            "--sets",
            default="sts12,sts13,sts14,stsb",
            help="evaluation sets scored at the end ('papers': STS12-16, STS-B, SICK-R where found)",
        )
        train = parser.add_argument_group("UNSUP and SUP training (the authors' defaults)")
        train.add_argument("--epochs", type=int, default=20, help="cap on epochs")
        train.add_argument(
            "--patience", type=int, default=5, help="epochs without a better STS-B dev Pearson before stopping"
        )
        train.add_argument("--batch-size", type=int, default=512, help="pairs per update")
        train.add_argument(
            "--optimizer",
            choices=OPTIMIZERS,
            default=None,
            help="default: sgd (paper §4.4) for the paper's model, its ablations and SUP mse; adamw (the released "
            "code) for UNSUP authors_code and SUP signed",
        )
        train.add_argument(
            "--lr", type=float, default=1e-2, help="learning rate (the authors' 1e-2; SUP signed: 1e-4, the authors')"
        )
        train.add_argument("--weight-decay", type=float, default=1e-4, help="the authors' 1e-4")
        train.add_argument(
            "--width", type=int, default=1024, help="meta-embedding size per source (also SVD's and GCCA's d, capped)"
        )
        train.add_argument(
            "--pooling",
            default="max,mean",
            help="word-to-sentence pooling, comma-separated (max, mean): every method runs under each "
            "(paper Table 1's max and mean rows)",
        )
        train.add_argument(
            "--paper-loss",
            choices=PAPER_LOSSES,
            default="literal",
            help="the paper variant's loss: literal (eq. 10, trained coefficients, |.| as the code) or hinge "
            "(the project's reading: unit coefficients, hinge on criteria 2-4 with --margin)",
        )
        train.add_argument(
            "--margin", type=float, default=1.0, help="hinge margin of --paper-loss hinge (not in the paper)"
        )
        train.add_argument(
            "--max-train-samples", type=int, default=None, help="the first N STS-B train pairs (default: all)"
        )
        what.add_argument(
            "--baseline-inputs",
            choices=BASELINE_INPUTS,
            default="raw",
            help="what CONC, AVG, SVD and GCCA combine: raw (the paper's eq. 11-14: each source's pooled vectors as "
            "they are) or l2 (each source's pooled sentence vector l2-normalised first)",
        )

    @classmethod
    def check(cls, args) -> None:
        sources = [s.strip() for s in str(args.sources).split(",") if s.strip()]
        identities = [source_identity(s) for s in sources]
        if len(set(identities)) < 2 and not args.smoke_test:
            got = (
                f"{sources[0]!r} and {sources[1]!r} are both {identities[0]}"
                if len(sources) > 1
                else f"got {len(sources)} ({args.sources!r})"
            )
            raise SweepInputError(
                f"--sources needs two or more different encoders to combine; {got}; e.g. --sources {DEFAULT_SOURCES}"
            )
        refuse_repeated_sources(sources, identities)
        methods = parse_names(args.methods, "--methods", list(VARIANTS))
        trial_grid(methods, parse_variants(args.variants), sources or ["a", "b"])
        parse_names(args.pooling, "--pooling", list(POOLINGS))
        parse_int_list(args.seeds, "--seeds")
        for flag in ("epochs", "patience", "batch_size", "width", "max_train_samples"):
            value = getattr(args, flag)
            if value is not None and value <= 0:
                raise SweepInputError(f"--{flag.replace('_', '-')} must be a positive integer, got {value}")
        if not args.lr > 0 or args.weight_decay < 0 or args.margin < 0:
            raise SweepInputError("--lr must be positive, --weight-decay and --margin not negative")

    @staticmethod
    def sets(args) -> list[str]:
        from trainables.evaluation.sets import suite_sets

        return suite_sets(args.sets, args.data_dir)[0]

    @classmethod
    def metrics(cls, args) -> MetricContract:
        from trainables.evaluation.sets import PAPER_SETS, main_metric, suite_primary

        text = str(args.sets).strip()
        sets = list(PAPER_SETS) if text.lower() == "papers" else [n.strip() for n in text.split(",") if n.strip()]
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

        sets = cls.sets(args)
        args.sets = ",".join(sets)
        names = [s.strip() for s in str(args.sources).split(",") if s.strip()]
        if context.smoke_test and args.sources == DEFAULT_SOURCES:
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

        data = MetaData(
            pairs(splits["train"]),
            pairs(splits["dev"]),
            np.asarray([row[s] for s in suite.sentences]),
            suite,
            len(sentences),
        )
        variants = parse_variants(args.variants)
        grid = trial_grid(parse_names(args.methods, "--methods", list(VARIANTS)), variants, labels)
        dims = [int(getattr(load_config(p), "hidden_size", 0) or 0) for p in paths]
        train_sentences = len({s for e in splits["train"] for s in (e.sentence1, e.sentence2)})
        for trial in grid if all(dims) else []:
            check_fit_sentences(trial["meta"], trial["variant"], train_sentences, args.width, dims)
        base = {
            "method": cls.name,
            "sources": ",".join(labels),
            "sets": args.sets,
            "epochs": args.epochs,
            "patience": args.patience,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "weight_decay": args.weight_decay,
            "width": args.width,
            "max_train_samples": args.max_train_samples,
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
            for seed in parse_int_list(args.seeds, "--seeds")
            for pooling in parse_names(args.pooling, "--pooling", list(POOLINGS))
            for trial in grid
        ]
        identity = hashlib.sha256("\n".join(sentences).encode()).hexdigest()[:16]
        costs = {
            (meta,): TrialCost(memory_bytes=2e9, seconds=60.0 if meta in TRAINED else 5.0, gpu=meta in TRAINED)
            for meta in VARIANTS
        }
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
