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
Training: AdamW lr 3e-5 constant, weight decay 0, batch 8, clipping 1, `--steps` optimiser steps;
one trial "epoch" = `--eval-steps` steps followed by STS-B dev Spearman (best kept as `best/`, a
sentence-transformers folder); the evaluation suite (`--eval-sets`) is scored with the best weights
at the end. Each objective's optimizer, schedule, batch, clipping and dropout are trial params.
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
from trainables.evaluation.sets import parse_eval_sets
from trainables.methods.tsdae.stage import add_training_flags, check_training_flags
from trainables.methods.tsdae.trainable import TSDAEData, TSDAETrainable
from trainables.methods.tsdae.training import (
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
    tokens = min(int(args.max_length), math.ceil(1.3 * words) + 2)  # ~1.3 WordPiece tokens a word, [CLS] [SEP]
    batch = int(settings.get("batch_size", args.batch_size))
    shape = encoder_cost.shape_from_config(config, config.num_hidden_layers, batch, tokens)
    passes = {"tsdae": 0.4 + 1.5, "ct": 2.0, "simcse": 2.0}.get(
        settings.get("objective", ""), 1.0
    )  # decoder: + cross-attention
    steps, epochs = int(settings["steps"]), int(settings["epochs"])
    train_tokens = int(passes * batch * tokens * steps / max(1, epochs))
    eval_tokens = 2 * tokens * (dev_pairs + suite_pairs / max(1, epochs))
    eval_batches = math.ceil(2 * (dev_pairs + suite_pairs / max(1, epochs)) / 64)
    memory = encoder_cost.trial_memory_bytes(shape) * (2 if settings.get("objective") in ("tsdae", "ct") else 1)
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


@register_method("tsdae")
class TSDAE(Method):
    trainable = TSDAETrainable
    description = "TSDAE and its unsupervised baselines (MLM, SimCSE, CT) on an unlabelled corpus"
    smoke = {
        "steps": 4,
        "eval_steps": 2,
        "method": "none,tsdae,mlm,simcse,ct",
        "seeds": "0",
        "eval_sets": "none",
        "max_sentences": 64,
    }
    cost_axes = ("model", "objective")

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
            "--corpus", default="wiki", help="'wiki' (the Wikipedia sample) or a text file, one sentence per line"
        )
        what.add_argument("--max-sentences", type=int, default=None, help="use the first N sentences of the corpus")
        train = parser.add_argument_group("training")
        add_training_flags(train, "")
        train.add_argument(
            "--eval-steps", type=int, default=1_000, help="STS-B dev evaluation every N steps (best kept)"
        )
        train.add_argument(
            "--ct-variant",
            default="official",
            choices=CT_VARIANTS,
            help="official: M5's two copies, 16 pairs in groups of 8 (1 positive), dot-product BCE, RMSprop "
            "piecewise lr, dropout off; in-batch: ContrastiveTensionLossInBatchNegatives with the AdamW settings",
        )
        train.add_argument(
            "--eval-sets", default="stsb,sickr", help="sets scored with the best-dev weights at the end, or 'none'"
        )

    @classmethod
    def check(cls, args) -> None:
        objectives = parse_names(args.method, "--method", list(OBJECTIVES))
        parse_int_list(args.seeds, "--seeds")
        check_training_flags(vars(args), "")
        in_batch = [o for o in objectives if o == "simcse" or (o == "ct" and args.ct_variant == "in-batch")]
        if in_batch and args.batch_size < 2:
            variant = " (--ct-variant in-batch)" if "ct" in in_batch else ""
            raise SweepInputError(
                f"--batch-size {args.batch_size} is too small for --method {','.join(in_batch)}{variant}: its loss "
                "takes the other sentences of a batch as negatives, and a batch of one has none, so the loss is 0 "
                "at every step and nothing is learned; pass --batch-size 2 or more (the paper: 8)"
            )
        if args.eval_steps <= 0:
            raise SweepInputError(f"--eval-steps must be a positive integer, got {args.eval_steps}")
        if args.max_sentences is not None and args.max_sentences <= 0:
            raise SweepInputError(f"--max-sentences must be a positive integer, got {args.max_sentences}")
        check_corpus(args.corpus)

    @classmethod
    def metrics(cls, args) -> MetricContract:

        return MetricContract(
            primary="best_dev_spearman",
            report="best_dev_spearman",
            epoch="dev_spearman",
            axes=("corpus", "model", "objective", "seed"),
            select=None,
            seed="seed",
            label="Spearman",
            columns=tuple(f"{n}_spearman" for n in parse_eval_sets(args.eval_sets)),
            short={"seed": "s", "objective": "", "corpus": ""},
            reference=("objective", "none"),
            reference_by=("corpus", "model"),
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
        sentences, corpus, _ = read_corpus(args.corpus, args.data_dir, args.max_sentences)
        batches = {o: objective_settings(o, args).get("batch_size", 0) for o in objectives}
        largest = max(batches, key=batches.get)
        if batches[largest]:  # a batch draws that many sentences (SimCSE's and CT's negatives are the others)
            check_corpus_size(sentences, batches[largest], "--corpus", args.corpus, f"one batch of --method {largest}")
        sets = parse_eval_sets(args.eval_sets)
        dev = load_suite(["stsb_dev"], args.data_dir)
        suite = load_suite(sets, args.data_dir) if sets else None
        base = {
            "method": cls.name,
            "corpus": corpus,
            "eval_steps": args.eval_steps,
            "lr": args.lr,
            "weight_decay": 0.0,
            "batch_size": args.batch_size,
            "clip": 1.0,
            "pooling": args.pooling,
            "noise": args.noise,
            "delete_ratio": DELETE_RATIOS[args.noise],
            "tied_decoder": True,
            "max_length": args.max_length,
            "max_sentences": args.max_sentences,
            "ct_variant": args.ct_variant,
        }
        configs, costs = [], {}
        for m in models:
            for o in objectives:
                settings = objective_settings(o, args)
                # the untrained encoder is the same whatever the seed: one run per model
                for s in seeds[:1] if o == "none" else seeds:
                    configs.append({**base, **settings, "model": m, "objective": o, "seed": s, "_model_path": paths[m]})
                costs[(m, o)] = trial_cost(
                    paths[m],
                    {**settings, "objective": o},
                    args,
                    sentences,
                    len(dev.sentences) // 2,
                    len(suite.sentences) // 2 if suite else 0,
                )
        return MethodPlan(
            configs=configs,
            data=TSDAEData(sentences, dev, suite),
            costs=costs,
            checksums={f"eval_{k}": v for k, v in dev.checksums.items()},
            static_params={"corpus": corpus},
        )
