"""TSDAE (docs/methods/tsdae.md M6) and its unsupervised baselines on an unlabelled corpus: one method whose
grid is models x objectives (`--objective none,tsdae,mlm,simcse,ct`; `--method`, its old name, still
works) x seeds, and the `tsdae` upstream stage of `--improvement tsdae` (trainables/methods/tmft/improvements.py),
both trained by `Training` here.

Objectives (sentence-transformers 6.2 losses on a `SentenceTransformer` of Transformer + Pooling):
- `tsdae`: `DenoisingAutoEncoderLoss` with tied decoder weights; deletion noise p = 0.6 by
  `DenoisingAutoEncoderDataset.delete`'s rule (`noisy`, tested identical to theirs), drawn again
  every time a sentence is drawn (`--noise keep`: the v3 examples' variant, each word kept with
  probability 0.6);
- `simcse`: `MultipleNegativesRankingLoss`, scale 20 (temperature 0.05), a sentence paired with
  itself (dropout positives, in-batch negatives);
- `ct` (M5): `--ct-variant official` (default): `ContrastiveTensionLoss` (two independent copies,
  the dot product as logit, BCE), 16 pairs a batch in groups of 8 (the first pair of each group
  positive, as `ContrastiveTensionDataLoader`), dropout off, RMSprop (TF defaults: rho 0.9,
  epsilon 1e-7) with the piecewise lr 1e-5/8e-6/6e-6/4e-6/2e-6 at 500/1000/1500/2000 steps, no
  clipping. Left as sentence-transformers has it: the BCE is summed over the batch, not averaged;
  sentences are drawn with replacement each step rather than 1000 positives and 14000 negatives a
  500-update epoch; the second copy alone is evaluated and kept; max length is `--max-length`
  (official: 75). `--ct-variant in-batch`: `ContrastiveTensionLossInBatchNegatives` with the AdamW
  settings below;
- `mlm`: the DAPT stage's masking (15 %, 80/10/10) and MLM model (trainables/encoders/mlm.py);
- `none`: no training (zero epochs): the encoder as it is, evaluated the same way, one run per
  model; the contract's baseline (`objective=none`) that the report's gains are measured against.
Batches: TSDAE, MLM and SimCSE pass over the corpus in shuffled epochs as their codes' data loaders do
(settings.py `LAST_BATCH`; training.py `Batches`), CT draws with replacement.
Settings: each objective at its own paper's (settings.py, docs/methods/tsdae.md M6 "Settings"), or with
`--shared-settings` every objective at TSDAE's; a per-objective setting given (`--lr`, `--batch-size`,
...: `SETTINGS`, `per=`) sets its value for every objective, or as `OBJECTIVE=VALUE` for some. One
trial "epoch" = `eval_steps` steps followed by STS-B dev Spearman (the best kept as `best/`, a
sentence-transformers folder); at the end the evaluation suite (`--eval-sets`; `in-domain`: each
corpus's own set) is scored with the weights `final_weights` names (`last`, the TSDAE paper's fixed
step budget, or `best-dev`, SimCSE's). Every value a trial ran with is one of its params.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainables.core import settings as shared
from trainables.core.errors import SweepInputError
from trainables.core.method import Method, MethodInfo, MethodPlan, MetricContract, register_method
from trainables.core.setting_conditions import When
from trainables.core.settings import Choice, Flag, Int, Kind, Names, Setting
from trainables.encoders.loading import model_list
from trainables.evaluation.sets import EVAL_SETS, eval_set_names, main_metric
from trainables.methods.tsdae import paper
from trainables.methods.tsdae.checks import CT_KEEP, CT_VARIANTS, OBJECTIVES, check_corpus, check_decoder, read_corpus
from trainables.methods.tsdae.cost import trial_cost
from trainables.methods.tsdae.noise import DEFAULT_RATIOS, NOISES, RATIOS
from trainables.methods.tsdae.settings import FINAL_WEIGHTS, SIMCSE_SETTINGS, TSDAE_B, corpus_settings, flag_value
from trainables.methods.tsdae.stage import NOISE


def trainable_module():
    """trainables/methods/tsdae/trainable.py (torch, Ray Tune), imported when a plan or a trial needs it."""
    import trainables.methods.tsdae.trainable as module

    return module


@dataclass(frozen=True)
class Sizes(Kind):
    """--max-sentences: one corpus size or a comma-separated list of them (the corpus-size figure's
    axis): positive integers, in the order given, once each; None (not given): the whole corpus."""

    def parse(self, value):
        if isinstance(value, bool):
            raise ValueError(f"must be positive integers, got {value!r}")
        if isinstance(value, (list, tuple)):
            parts = list(value)
        elif isinstance(value, int):
            parts = [value]
        else:
            parts = [p.strip() for p in str(value).split(",") if p.strip()]
        if not parts:
            return None
        sizes = []
        for part in parts:
            if isinstance(part, bool) or (isinstance(part, float) and part != int(part)):
                raise ValueError(f"{value!r}: not a comma-separated list of integers")
            try:
                size = int(part)
            except (TypeError, ValueError):
                raise ValueError(f"{value!r}: not a comma-separated list of integers") from None
            if size <= 0:
                raise ValueError(f"must be positive integers, got {size}")
            sizes.append(size)
        return list(dict.fromkeys(sizes))

    def describe(self) -> str:
        return "a positive integer, or comma-separated ones"

    def bad_values(self) -> list[str]:
        return ["x", "0", "16,x"]

    def to_config(self, value):
        return None if value is None else ",".join(map(str, value))


def eval_sets_by_corpus(sets: list[str], corpora: list[str]) -> dict[str, list[str]]:
    """--eval-sets (its typed list) per corpus: the named sets for every corpus, `in-domain` standing
    for each corpus's own evaluation set (its name), refused for a corpus that is no evaluation set."""
    named = [s for s in sets if s != IN_DOMAIN]
    known = set(eval_set_names())
    out = {}
    for corpus in corpora:
        chosen = list(named)
        if IN_DOMAIN in sets:
            if corpus not in known:
                raise SweepInputError(
                    f"--eval-sets {IN_DOMAIN}: --corpus {corpus} has no evaluation set of its name; "
                    f"in-domain works for the corpora of the evaluation sets ({', '.join(sorted(known))})"
                )
            chosen = [corpus, *(s for s in chosen if s != corpus)]
        out[corpus] = chosen
    return out


def model_max_length(model_path: str) -> int:
    from transformers import AutoConfig, AutoTokenizer

    from trainables.encoders.loading import max_tokens

    return max_tokens(AutoConfig.from_pretrained(model_path), AutoTokenizer.from_pretrained(model_path))


IN_DOMAIN = "in-domain"
POOLINGS = ("cls", "mean", "max")
DECODERS = ("tied", "untied")
ABLATION = "TSDAE's configuration (Appendix A: each value a trial of --objective tsdae)"
WHAT = "what to sweep"
TRAIN = "training (each objective's own paper's value unless given; docs/methods/tsdae.md M6)"
TRAINED = tuple(o for o in OBJECTIVES if o != "none")  # the objectives that train
FOR_TSDAE = (When("objectives", ("tsdae",)),)  # Appendix A's settings: TSDAE's objective only
FOR_CT = (When("objectives", ("ct",)),)
OWN = "each objective's own paper's value, settings.py PAPER"  # a per-objective setting left unset
SETTINGS = (
    shared.MODELS,
    Setting(
        "objectives",
        Names(known=lambda: list(OBJECTIVES)),
        ["tsdae"],
        "comma-separated objectives (none: the untrained encoder, one run per model)",
        group=WHAT,
        axis=True,
        flag="--objective",
        aliases=("--method",),
    ),
    shared.SEEDS.but(default=[0], help="comma-separated seeds, or a range like 0-2"),
    Setting(
        "corpus",
        Names(),
        ["wiki"],
        "comma-separated corpora, each a name (wiki: the Wikipedia sample; a domain evaluation set's unlabelled "
        "sentences where the data folder has them) or a text file, one sentence per line",
        group=WHAT,
        axis=True,
    ),
    Setting(
        "max_sentences",
        Sizes(),
        None,
        "use N sentences of each corpus (a seeded random subset, the same for every trial, in corpus order); a "
        "comma-separated list sweeps corpus sizes (none: the whole corpus)",
        group=WHAT,
        axis=True,
    ),
    Setting(
        "shared_settings",
        Flag(),
        False,
        "run every objective at TSDAE's settings (lr 3e-5, batch 8, CLS, constant rate, 100K steps, the model's "
        "length limit, last weights) instead of each at its own paper's; flags still win",
        group=TRAIN,
        config=False,  # trials record it as `settings` (shared or paper)
    ),
    Setting("steps", Int(low=1), None, "optimiser steps (the step budget)", per=TRAINED),
    Setting(
        "corpus_epochs",
        Int(low=1),
        None,
        "train N passes over the corpus, up to 100K steps or --steps (the paper's corpus-size figure: 10, for every "
        "objective)",
        group=TRAIN,
    ),
    shared.BATCH_SIZE.but(default=None, help="sentences a batch", per=TRAINED),
    shared.LR.but(default=None, help="the (peak) learning rate", per=TRAINED),
    shared.POOLING.but(kind=Choice(POOLINGS), default=None, per=OBJECTIVES),
    shared.MAX_LENGTH.but(kind=Int(low=1), default=None, help="training tokens", per=OBJECTIVES),
    Setting(
        "eval_max_length",
        Int(low=1),
        None,
        "tokens a sentence is scored at (STS-B dev and --eval-sets), whatever the training length",
        per=OBJECTIVES,
        source="the model's limit, as the papers' evaluations do",
    ),
    NOISE.but(
        kind=Names(known=lambda: list(NOISES)),
        default=["delete"],
        help="TSDAE's input noise, comma-separated (Appendix A Table 5: delete, swap, mask, replace, add; keep: the "
        "sentence-transformers v3 examples' keep-0.6 variant); each type a trial of --objective tsdae (noise.py)",
        group=ABLATION,
        axis=True,
        applies_when=FOR_TSDAE,
    ),
    Setting(
        "noise_ratio",
        Names(known=lambda: [f"{r:g}" for r in RATIOS]),
        None,
        "the share of words the noise influences, comma-separated (Appendix A Table 6: 0.1 to 0.9); each a trial "
        "of --objective tsdae (none: each type's own, delete 0.6, keep 0.4, the others Table 5's 0.3)",
        group=ABLATION,
        axis=True,
        source="TSDAE paper §3.2, Appendix A Tables 5-6",
        applies_when=FOR_TSDAE,
    ),
    Setting(
        "poolings",
        Names(known=lambda: list(POOLINGS)),
        None,
        "TSDAE's pooling, comma-separated (Appendix A Table 7: cls, mean, max); each a trial of --objective tsdae "
        "(none: --pooling's value for tsdae, else CLS)",
        group=ABLATION,
        axis=True,
        source="TSDAE paper Appendix A Table 7",
        applies_when=FOR_TSDAE,
    ),
    Setting(
        "decoder",
        Names(known=lambda: list(DECODERS)),
        ["tied"],
        "TSDAE's decoder, comma-separated: tied (its weights the encoder's, the paper's choice) or untied (a "
        "separate copy of the checkpoint); each a trial of --objective tsdae (recorded as tied_decoder)",
        group=ABLATION,
        axis=True,
        source="TSDAE paper §3.2, Appendix A (tying: 79.15)",
        applies_when=FOR_TSDAE,
    ),
    Setting("eval_steps", Int(low=1), None, "STS-B dev evaluation every N steps", per=TRAINED),
    Setting(
        "final_weights",
        Choice(FINAL_WEIGHTS),
        None,
        "the weights --eval-sets scores: last (the TSDAE paper's fixed step budget) or best-dev (the best STS-B "
        "dev score, SimCSE's rule)",
        per=TRAINED,
    ),
    Setting(
        "simcse_settings",
        Choice(SIMCSE_SETTINGS),
        SIMCSE_SETTINGS[0],
        "tsdae-paper: SimCSE as the TSDAE paper ran it (Appendix B: batch 512, AdamW lr 5e-5, linear + tanh over "
        "[CLS] kept at test time; SimCSE's script of April 2021); simcse-paper: the SimCSE paper's later settings "
        "(batch 64, lr 3e-5, the layer in training only)",
        group=TRAIN,
        source=TSDAE_B,
        config=False,  # SimCSE's trials record it (`resolve`), the others None
        applies_when=(When("objectives", ("simcse",)),),
    ),
    Setting(
        "ct_variant",
        Choice(CT_VARIANTS),
        "official",
        "official: M5's two copies, 16 pairs in groups of 8 (1 positive), dot-product BCE, RMSprop piecewise lr, "
        "dropout off; in-batch: ContrastiveTensionLossInBatchNegatives with AdamW",
        group=TRAIN,
        source=f"{TSDAE_B}; CT code",
        applies_when=FOR_CT,
    ),
    Setting(
        "ct_keep",
        Choice(CT_KEEP),
        CT_KEEP[0],
        "official CT's copy scored and kept: second (sentence-transformers' rule: the second copy) or better (the "
        "CT code's Top-CT-Eval: after every --eval-steps both copies are scored on STS-B dev and the better one is "
        "the epoch's model; the SED paper's teachers)",
        group=TRAIN,
        applies_when=(*FOR_CT, When("ct_variant", ("official",))),
    ),
    EVAL_SETS.but(
        kind=Names(known=lambda: [*eval_set_names(), IN_DOMAIN], empty=True),
        default=["stsb", "sickr"],
        help=f"sets scored at the end with --final-weights; '{IN_DOMAIN}': each corpus's own evaluation set",
        group=TRAIN,
        config=False,  # each trial records its corpus's sets
    ),
)
# The per-objective settings: None (each objective's own value) unless given; a trial records the
# values `resolve` (settings.py) gives it, not the setting as given.
SETTINGS = tuple(
    s.but(group=TRAIN, source=OWN if s.source == "code" else s.source, config=False) if s.per else s for s in SETTINGS
)
CITATION = """@inproceedings{wang-etal-2021-tsdae-using,
  title = {{TSDAE}: Using Transformer-based Sequential Denoising Auto-Encoder
           for Unsupervised Sentence Embedding Learning},
  author = {Wang, Kexin and Reimers, Nils and Gurevych, Iryna},
  booktitle = {Findings of the Association for Computational Linguistics: EMNLP 2021},
  pages = {671--688},
  year = {2021},
  url = {https://aclanthology.org/2021.findings-emnlp.59/}
}"""


@register_method("tsdae")
class TSDAE(Method):
    trainable = "trainables.methods.tsdae.trainable:TSDAETrainable"  # imported when a trial or a plan needs it
    info = MethodInfo(
        display_name="TSDAE",
        description="TSDAE and its unsupervised baselines (MLM, SimCSE, CT) on an unlabelled corpus",
        citation=CITATION,
        main_metric="STS-B dev Spearman (the best over training); each evaluation set's own metric beside it",
    )
    settings = SETTINGS
    renamed = {"method": "objectives"}  # a sweep recorded before the rename (--method) resumes
    presets = paper.PRESETS
    smoke = {
        "steps": 4,
        "eval_steps": 2,
        "batch_size": 8,
        "objectives": "none,tsdae,mlm,simcse,ct",
        "seeds": "0",
        "eval_sets": "none",
        "max_sentences": "64",
    }
    cost_axes = ("model", "corpus", "max_sentences", "objective")

    @classmethod
    def estimate(cls, args):
        return paper.estimate(args)

    @classmethod
    def check(cls, args) -> None:
        objectives = args.objectives
        for setting in (s for s in cls.settings if s.per):
            value = getattr(args, setting.name, None)
            unused = [o for o in value if o != shared.ALL and o not in objectives] if isinstance(value, dict) else []
            if unused:
                raise SweepInputError(
                    f"{setting.option} gives a value for {', '.join(unused)}, which --objective "
                    f"{','.join(objectives)} does not run; drop it or add the objective to --objective"
                )
        in_batch = [o for o in objectives if o == "simcse" or (o == "ct" and args.ct_variant == "in-batch")]
        in_batch = [o for o in in_batch if (flag_value(args, "batch_size", o) or 2) < 2]
        if in_batch:
            variant = " (--ct-variant in-batch)" if "ct" in in_batch else ""
            raise SweepInputError(
                f"--batch-size {flag_value(args, 'batch_size', in_batch[0])} is too small for --objective "
                f"{','.join(in_batch)}{variant}: its loss "
                "takes the other sentences of a batch as negatives, and a batch of one has none, so the loss is 0 "
                "at every step and nothing is learned; pass --batch-size 2 or more (the paper: 8)"
            )
        for corpus in args.corpus:
            check_corpus(corpus)
        for size in args.max_sentences or []:  # the sizes asked for; the plan checks each corpus's own
            for o in objectives:
                corpus_settings(o, args, size, 512, f"--max-sentences {size}")
        eval_sets_by_corpus(args.eval_sets, args.corpus)

    @staticmethod
    def configurations(args, objective: str, pooling: str) -> list[dict]:
        """TSDAE's configurations the grid holds (Appendix A): noise type x ratio x pooling x decoder, as
        trial params (`noise`, `noise_ratio`, `pooling`, `tied_decoder`); one of None for any other objective."""
        if objective != "tsdae":
            return [{"noise": None, "noise_ratio": None, "tied_decoder": None}]
        ratios = [float(r) for r in args.noise_ratio] if args.noise_ratio else [None]
        return [
            {
                "noise": n,
                "noise_ratio": DEFAULT_RATIOS[n] if r is None else r,
                "pooling": p,
                "tied_decoder": d == "tied",
            }
            for n in args.noise
            for r in ratios
            for p in args.poolings or [pooling]
            for d in args.decoder
        ]

    @classmethod
    def metrics(cls, args) -> MetricContract:
        by_corpus = eval_sets_by_corpus(args.eval_sets, getattr(args, "corpus", None) or ["wiki"])
        sets = dict.fromkeys(s for names in by_corpus.values() for s in names)
        sizes = getattr(args, "max_sentences", None) or [None]
        swept = tuple(
            param
            for param, flag in (("noise", "noise"), ("noise_ratio", "noise_ratio"), ("pooling", "poolings"))
            + (("tied_decoder", "decoder"),)
            if len(getattr(args, flag, None) or []) > 1
        )
        return MetricContract(
            primary="best_dev_spearman",
            report="best_dev_spearman",
            epoch="dev_spearman",
            axes=("corpus", *(("max_sentences",) if len(sizes) > 1 else ()), "model", "objective", *swept, "seed"),
            select=None,
            seed="seed",
            label="Spearman",
            columns=tuple(main_metric(n) for n in sets),
            short={"seed": "s", "objective": "", "corpus": "", "max_sentences": "n"},
            reference=("objective", "none"),
            reference_by=("corpus", *(("max_sentences",) if len(sizes) > 1 else ()), "model"),
        )

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.encoders.loading import resolve_model
        from trainables.evaluation.sets import load_suite

        objectives, seeds = args.objectives, args.seeds
        models = model_list(args, context)
        paths = {m: str(resolve_model(m, context.mlflow_uri)) for m in models}
        if "tsdae" in objectives:
            for model in models:
                check_decoder(paths[model], model)
        limits = {m: model_max_length(paths[m]) for m in models}
        corpora, checksums, names = {}, {}, {}
        for corpus in args.corpus:
            for size in args.max_sentences or [None]:
                sentences, name, checksum = read_corpus(corpus, args.data_dir, size)
                if size is not None and len(sentences) < size:  # a run named by a size it did not train on
                    raise SweepInputError(
                        f"--max-sentences {size}: --corpus {corpus} holds {len(sentences):,} sentences; pass sizes "
                        f"up to {len(sentences):,}, or a larger corpus"
                    )
                corpora[(name, size)] = sentences
                checksums[f"corpus_{name}"] = checksum
                names[corpus] = name
        per_corpus = eval_sets_by_corpus(args.eval_sets, list(names))
        dev = load_suite(["stsb_dev"], args.data_dir)
        suites = {names[c]: load_suite(sets, args.data_dir) if sets else None for c, sets in per_corpus.items()}
        base = cls.base_config(args)
        configs, costs = [], {}
        for (corpus, size), sentences in corpora.items():
            for m in models:
                for o in objectives:
                    given = next(c for c, n in names.items() if n == corpus)  # as the command line has it
                    settings = corpus_settings(o, args, len(sentences), limits[m], f"--corpus {given}")
                    eval_sets = per_corpus[given]
                    common = {**base, **settings, "corpus": corpus, "max_sentences": size, "model": m}
                    common.update(objective=o, eval_sets=",".join(eval_sets) or "none", _model_path=paths[m])
                    # the untrained encoder is the same whatever the seed: one run per model
                    for configuration in cls.configurations(args, o, settings["pooling"]):
                        for s in seeds[:1] if o == "none" else seeds:
                            configs.append({**common, **configuration, "seed": s})
                    suite = suites[corpus]
                    costs[(m, corpus, size, o)] = trial_cost(
                        paths[m],
                        {**settings, "objective": o},
                        args,
                        sentences,
                        len(dev.sentences) // 2,
                        len(suite.sentences) // 2 if suite else 0,
                    )
        checksums.update({f"eval_{k}": v for k, v in dev.checksums.items()})
        return MethodPlan(
            configs=configs,
            data=trainable_module().TSDAEData(corpora, dev, suites),
            costs=costs,
            checksums=checksums,
            static_params={
                "corpora": ",".join(names.values()),
                "settings": "shared" if args.shared_settings else "paper",
            },
        )
