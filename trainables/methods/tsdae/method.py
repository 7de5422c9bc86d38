"""TSDAE (docs/methods.md M6) and its unsupervised baselines on an unlabelled corpus: one method whose
grid is models x objectives (`--method none,tsdae,mlm,simcse,ct`) x seeds, and the `tsdae` upstream
stage of `--improvement tsdae` (trainables/methods/tmft/improvements.py), both trained by `Training` here.

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
Settings: each objective at its own paper's (settings.py, docs/methods.md M6 "Settings"), or with
`--shared-settings` every objective at TSDAE's; a flag given sets its value for every objective. One
trial "epoch" = `eval_steps` steps followed by STS-B dev Spearman (the best kept as `best/`, a
sentence-transformers folder); at the end the evaluation suite (`--eval-sets`; `in-domain`: each
corpus's own set) is scored with the weights `final_weights` names (`last`, the TSDAE paper's fixed
step budget, or `best-dev`, SimCSE's). Every value a trial ran with is one of its params.
"""

from __future__ import annotations

import math

from trainables.core.errors import SweepInputError
from trainables.core.method import (
    Method,
    MethodPlan,
    MetricContract,
    TrialCost,
    parse_int_list,
    parse_names,
    register_method,
)
from trainables.data.sentences import check_corpus_size
from trainables.encoders.loading import model_list
from trainables.evaluation.sets import eval_set_names, parse_eval_sets
from trainables.methods.tsdae import tsdae_paper
from trainables.methods.tsdae.settings import (
    FINAL_WEIGHTS,
    SIMCSE_SETTINGS,
    check_flags,
    choice,
    flag_value,
    per_objective,
    with_corpus_epochs,
)
from trainables.methods.tsdae.stage import add_noise_flag
from trainables.methods.tsdae.trainable import TSDAEData, TSDAETrainable
from trainables.methods.tsdae.training import (
    CT_KEEP,
    CT_VARIANTS,
    DELETE_RATIOS,
    OBJECTIVES,
    check_corpus,
    check_decoder,
    objective_settings,
    read_corpus,
)


def trial_cost(
    model_path: str, settings: dict, args, sentences: list[str], dev_pairs: int, suite_pairs: int
) -> TrialCost:
    """The encoder cost model (trainables/encoders/cost.py) of one trial: the whole encoder trained
    for `steps` batches of the corpus's mean sentence length (TSDAE: the noisy input, ~40 % of
    the words, plus a decoder pass of the clean sentence; CT official: two models), dev every
    --eval-steps, the suite once."""
    from transformers import AutoConfig

    from trainables.encoders import cost as encoder_cost

    config = AutoConfig.from_pretrained(model_path)
    sample = sentences[:2000]
    words = sum(len(s.split()) for s in sample) / max(1, len(sample))
    limit = int(settings.get("max_length") or 512)
    tokens = min(limit, math.ceil(1.3 * words) + 2)  # ~1.3 WordPiece tokens a word, [CLS] [SEP]
    batch = int(settings.get("batch_size") or 1)
    shape = encoder_cost.shape_from_config(config, config.num_hidden_layers, batch, tokens)
    passes = {"tsdae": 0.4 + 1.5, "ct": 2.0, "simcse": 2.0}.get(
        settings.get("objective", ""), 1.0
    )  # decoder: + cross-attention
    steps, epochs = int(settings.get("steps") or 0), int(settings.get("epochs") or 0)
    train_tokens = int(passes * batch * tokens * steps / max(1, epochs))
    eval_tokens = 2 * tokens * (dev_pairs + suite_pairs / max(1, epochs))
    eval_batches = math.ceil(2 * (dev_pairs + suite_pairs / max(1, epochs)) / 64)
    objective = settings.get("objective")
    memory = encoder_cost.trial_memory_bytes(shape) * (2 if objective == "tsdae" else 1)
    if objective == "ct":  # two copies, each encoding one side of the pairs (benchmarks/contrastive_memory.py)
        memory += encoder_cost.second_copy_bytes(shape)
    seconds = encoder_cost.trial_seconds(
        shape,
        train_tokens,
        int(eval_tokens),
        epochs,
        args.gpu_tflops,
        train_steps=math.ceil(passes * steps / max(1, epochs)),
        eval_batches=eval_batches,
    )
    return TrialCost(memory_bytes=memory, seconds=seconds, weight_bytes=encoder_cost.weight_bytes(shape))


def parse_corpora(text: str) -> list[str]:
    return parse_names(text, "--corpus")


def parse_sizes(text) -> list[int | None]:
    """--max-sentences: one size, a comma-separated list (the corpus-size figure's axis) or none."""
    if text is None or str(text).strip() == "":
        return [None]
    sizes = []
    for part in str(text).split(","):
        try:
            size = int(part)
        except ValueError:
            raise SweepInputError(f"--max-sentences {text!r}: not a comma-separated list of integers") from None
        if size <= 0:
            raise SweepInputError(f"--max-sentences must be positive integers, got {size}")
        sizes.append(size)
    return list(dict.fromkeys(sizes))


def eval_sets_by_corpus(text: str, corpora: list[str]) -> dict[str, list[str]]:
    """--eval-sets per corpus: the named sets for every corpus, `in-domain` standing for each corpus's
    own evaluation set (its name), refused for a corpus that is no evaluation set."""
    tokens = [] if str(text).strip().lower() in ("", "none") else parse_names(text, "--eval-sets")
    named = parse_eval_sets(",".join(t for t in tokens if t != IN_DOMAIN) or "none")
    known = set(eval_set_names())
    out = {}
    for corpus in corpora:
        sets = list(named)
        if IN_DOMAIN in tokens:
            if corpus not in known:
                raise SweepInputError(
                    f"--eval-sets {IN_DOMAIN}: --corpus {corpus} has no evaluation set of its name; "
                    f"in-domain works for the corpora of the evaluation sets ({', '.join(sorted(known))})"
                )
            sets = [corpus, *(s for s in sets if s != corpus)]
        out[corpus] = sets
    return out


def main_metric(name: str) -> str:
    """`<set>_<the metric the set is ranked by>`, e.g. `stsb_spearman`, `askubuntu_map`."""
    from trainables.evaluation import sets as registry

    found = registry.get_eval_set(name) if hasattr(registry, "get_eval_set") else registry.EVAL_SETS.get(name)()
    main = getattr(found, "main", "")
    if not main:
        from trainables.evaluation.tasks import TASK_KINDS

        main = TASK_KINDS.get(getattr(found, "kind", "sts")).main
    return f"{name}_{main}"


def model_max_length(model_path: str) -> int:
    from transformers import AutoConfig, AutoTokenizer

    from trainables.encoders.loading import max_tokens

    return max_tokens(AutoConfig.from_pretrained(model_path), AutoTokenizer.from_pretrained(model_path))


IN_DOMAIN = "in-domain"


@register_method("tsdae")
class TSDAE(Method):
    trainable = TSDAETrainable
    description = "TSDAE and its unsupervised baselines (MLM, SimCSE, CT) on an unlabelled corpus"
    presets = tsdae_paper.PRESETS
    smoke = {
        "steps": 4,
        "eval_steps": 2,
        "batch_size": 8,
        "method": "none,tsdae,mlm,simcse,ct",
        "seeds": "0",
        "eval_sets": "none",
        "max_sentences": "64",
    }
    cost_axes = ("model", "corpus", "max_sentences", "objective")

    @classmethod
    def estimate(cls, args):
        return tsdae_paper.estimate(args)

    @classmethod
    def add_arguments(cls, parser, defaults: dict) -> None:
        d = {"models": "sentence-transformers/all-MiniLM-L6-v2", **defaults}
        what = parser.add_argument_group("what to sweep")
        what.add_argument("--models", default=d["models"], help="comma-separated hub ids or local model directories")
        what.add_argument(
            "--method",
            default="tsdae",
            help=f"comma-separated objectives: {', '.join(OBJECTIVES)} (none: the untrained encoder, one run "
            "per model)",
        )
        what.add_argument("--seeds", default="0", help="comma-separated seeds, or a range like 0-2")
        what.add_argument(
            "--corpus",
            default="wiki",
            help="comma-separated corpora, each a name (wiki: the Wikipedia sample; a domain evaluation set's "
            "unlabelled sentences where the data folder has them) or a text file, one sentence per line",
        )
        what.add_argument(
            "--max-sentences",
            default=None,
            help="use N sentences of each corpus (a seeded random subset, the same for every trial, in corpus "
            "order); a comma-separated list sweeps corpus sizes",
        )
        train = parser.add_argument_group(
            "training (each objective's own paper's value unless given; docs/methods.md M6)"
        )
        train.add_argument(
            "--shared-settings",
            action="store_true",
            help="run every objective at TSDAE's settings (lr 3e-5, batch 8, CLS, constant rate, 100K steps, "
            "the model's length limit, last weights) instead of each at its own paper's; flags still win",
        )
        each = per_objective_help = " (VALUE for every objective, or OBJECTIVE=VALUE, comma-separated, for some)"
        objectives = tuple(o for o in OBJECTIVES if o != "none")
        train.add_argument(
            "--steps",
            type=per_objective(int, objectives),
            default=None,
            help="optimiser steps (the step budget)" + each,
        )
        train.add_argument(
            "--corpus-epochs",
            type=int,
            default=None,
            help="train N passes over the corpus, up to 100K steps or --steps (the paper's corpus-size figure: "
            "10, for every objective)",
        )
        train.add_argument("--batch-size", type=per_objective(int, objectives), default=None, help="sentences" + each)
        train.add_argument(
            "--lr", type=per_objective(float, objectives), default=None, help="the (peak) learning rate" + each
        )
        train.add_argument(
            "--pooling", type=per_objective(choice(("cls", "mean")), OBJECTIVES), default=None, help="cls, mean" + each
        )
        train.add_argument(
            "--max-length", type=per_objective(int, OBJECTIVES), default=None, help="training tokens" + each
        )
        train.add_argument(
            "--eval-max-length",
            type=per_objective(int, OBJECTIVES),
            default=None,
            help="tokens a sentence is scored at (STS-B dev and --eval-sets; default: the model's limit, as the "
            "papers' evaluations do, whatever the training length)" + each,
        )
        add_noise_flag(train, "")
        train.add_argument(
            "--eval-steps",
            type=per_objective(int, objectives),
            default=None,
            help="STS-B dev evaluation every N steps" + each,
        )
        train.add_argument(
            "--final-weights",
            type=per_objective(choice(FINAL_WEIGHTS), objectives),
            default=None,
            help="the weights --eval-sets scores: last (the TSDAE paper's fixed step budget) or best-dev "
            "(the best STS-B dev score, SimCSE's rule)" + per_objective_help,
        )
        train.add_argument(
            "--simcse-settings",
            default=SIMCSE_SETTINGS[0],
            choices=SIMCSE_SETTINGS,
            help="tsdae-paper: SimCSE as the TSDAE paper ran it (Appendix B: batch 512, AdamW lr 5e-5, linear + tanh "
            "over [CLS] kept at test time; SimCSE's script of April 2021); simcse-paper: the SimCSE paper's later "
            "settings (batch 64, lr 3e-5, the layer in training only)",
        )
        train.add_argument(
            "--ct-variant",
            default="official",
            choices=CT_VARIANTS,
            help="official: M5's two copies, 16 pairs in groups of 8 (1 positive), dot-product BCE, RMSprop "
            "piecewise lr, dropout off; in-batch: ContrastiveTensionLossInBatchNegatives with AdamW",
        )
        train.add_argument(
            "--ct-keep",
            default=CT_KEEP[0],
            choices=CT_KEEP,
            help="official CT's copy scored and kept: second (sentence-transformers' rule: the second copy) or "
            "better (the CT code's Top-CT-Eval: after every --eval-steps both copies are scored on STS-B dev and "
            "the better one is the epoch's model; the SED paper's teachers)",
        )
        train.add_argument(
            "--eval-sets",
            default="stsb,sickr",
            help=f"sets scored at the end with --final-weights, or 'none'; '{IN_DOMAIN}': each corpus's own "
            "evaluation set",
        )

    @classmethod
    def check(cls, args) -> None:
        objectives = parse_names(args.method, "--method", list(OBJECTIVES))
        parse_int_list(args.seeds, "--seeds")
        check_flags(args)
        for flag in ("steps", "batch_size", "lr", "pooling", "max_length", "eval_max_length", "eval_steps"):
            value = getattr(args, flag, None)
            unused = [o for o in value if o != "*" and o not in objectives] if isinstance(value, dict) else []
            if unused:
                raise SweepInputError(
                    f"--{flag.replace('_', '-')} gives a value for {', '.join(unused)}, which --method "
                    f"{args.method} does not run; drop it or add the objective to --method"
                )
        if args.corpus_epochs is not None and args.corpus_epochs <= 0:
            raise SweepInputError(f"--corpus-epochs must be a positive integer, got {args.corpus_epochs}")
        in_batch = [o for o in objectives if o == "simcse" or (o == "ct" and args.ct_variant == "in-batch")]
        in_batch = [o for o in in_batch if (flag_value(args, "batch_size", o) or 2) < 2]
        if in_batch:
            variant = " (--ct-variant in-batch)" if "ct" in in_batch else ""
            raise SweepInputError(
                f"--batch-size {flag_value(args, 'batch_size', in_batch[0])} is too small for --method "
                f"{','.join(in_batch)}{variant}: its loss "
                "takes the other sentences of a batch as negatives, and a batch of one has none, so the loss is 0 "
                "at every step and nothing is learned; pass --batch-size 2 or more (the paper: 8)"
            )
        parse_sizes(args.max_sentences)
        corpora = parse_corpora(args.corpus)
        for corpus in corpora:
            check_corpus(corpus)
        eval_sets_by_corpus(args.eval_sets, corpora)

    @classmethod
    def metrics(cls, args) -> MetricContract:
        by_corpus = eval_sets_by_corpus(args.eval_sets, parse_corpora(getattr(args, "corpus", "wiki")))
        sets = dict.fromkeys(s for names in by_corpus.values() for s in names)
        sizes = parse_sizes(getattr(args, "max_sentences", None))
        return MetricContract(
            primary="best_dev_spearman",
            report="best_dev_spearman",
            epoch="dev_spearman",
            axes=("corpus", *(("max_sentences",) if len(sizes) > 1 else ()), "model", "objective", "seed"),
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

        objectives = parse_names(args.method, "--method", list(OBJECTIVES))
        seeds = parse_int_list(args.seeds, "--seeds")
        models = model_list(args, context)
        paths = {m: str(resolve_model(m, context.mlflow_uri)) for m in models}
        if "tsdae" in objectives:
            for model in models:
                check_decoder(paths[model], model)
        limits = {m: model_max_length(paths[m]) for m in models}
        corpora, checksums, names = {}, {}, {}
        for corpus in parse_corpora(args.corpus):
            for size in parse_sizes(args.max_sentences):
                sentences, name, checksum = read_corpus(corpus, args.data_dir, size)
                corpora[(name, size)] = sentences
                checksums[f"corpus_{name}"] = checksum
                names[corpus] = name
        per_corpus = eval_sets_by_corpus(args.eval_sets, list(names))
        dev = load_suite(["stsb_dev"], args.data_dir)
        suites = {names[c]: load_suite(sets, args.data_dir) if sets else None for c, sets in per_corpus.items()}
        base = {
            "method": cls.name,
            "noise": args.noise,
            "delete_ratio": DELETE_RATIOS[args.noise],
            "tied_decoder": True,
            "ct_variant": args.ct_variant,
            "ct_keep": args.ct_keep,
            "corpus_epochs": args.corpus_epochs,
        }
        configs, costs = [], {}
        for (corpus, size), sentences in corpora.items():
            for m in models:
                for o in objectives:
                    settings = objective_settings(o, args, len(sentences), limits[m])
                    if args.corpus_epochs is not None and o != "none":
                        cap = flag_value(args, "steps", o)
                        settings = with_corpus_epochs(settings, args.corpus_epochs, len(sentences), cap)
                    given = next(c for c, n in names.items() if n == corpus)  # as the command line has it
                    if settings.get("batch_size"):  # one batch draws that many sentences
                        check_corpus_size(
                            sentences, settings["batch_size"], "--corpus", given, f"one batch of --method {o}"
                        )
                    eval_sets = per_corpus[given]
                    common = {**base, **settings, "corpus": corpus, "max_sentences": size, "model": m}
                    common.update(objective=o, eval_sets=",".join(eval_sets) or "none", _model_path=paths[m])
                    # the untrained encoder is the same whatever the seed: one run per model
                    for s in seeds[:1] if o == "none" else seeds:
                        configs.append({**common, "seed": s})
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
            data=TSDAEData(corpora, dev, suites),
            costs=costs,
            checksums=checksums,
            static_params={
                "corpora": ",".join(names.values()),
                "settings": "shared" if args.shared_settings else "paper",
            },
        )
