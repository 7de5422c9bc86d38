"""Adaptive layers: every layer from one training run (docs/methods.md, "Adaptive layers").

Inputs: the pair task and data TMFT trains on (trainables/training/tasks.py: STS-B by default; MRPC,
SICK), an encoder. Model: the whole encoder with mean pooling, trained once with sentence-transformers'
`AdaptiveLayerLoss` around TMFT's loss of the task (trainables/methods/adaptive_layer/training.py), with
TMFT's optimiser, schedule, batch and epochs. The one saved model (`best/`, the best epoch by the mean
dev score over the layers) is scored at every layer from one forward pass: `layer<k>_test_<metric>_at_best_dev`.

The loss's options are flags with its documented defaults: `--n-layers-per-step 1`,
`--last-layer-weight 1.0`, `--prior-layers-weight 1.0`, `--kl-div-weight 1.0`, `--kl-temperature 0.3`.

Config keys: method, model, seed, task, epochs, lr, batch_size, weight_decay, warmup_ratio,
eval_batch_size, max_train_samples, max_eval_samples and the five loss options.
"""

from __future__ import annotations

from trainables.core.errors import SweepInputError
from trainables.core.method import (
    Method,
    MethodPlan,
    MetricContract,
    TrialCost,
    add_seeds_argument,
    parse_int_list,
    register_method,
)
from trainables.encoders.loading import model_list
from trainables.methods.adaptive_layer.trainable import AdaptiveLayerTrainable
from trainables.methods.adaptive_layer.training import DEFAULTS
from trainables.training.tasks import COMPANIONS, get_task, task_names


class AdaptiveData:
    """What every trial reads: each model's tokenised task."""

    def __init__(self, tasks: dict):
        self.tasks = tasks


@register_method("adaptive-layer")
class AdaptiveLayer(Method):
    """One model per (model, seed) trained with AdaptiveLayerLoss, scored at every layer."""

    trainable = AdaptiveLayerTrainable
    description = "adaptive layers: every layer from one run (sentence-transformers' AdaptiveLayerLoss)"
    smoke = {"seeds": "0", "epochs": 1, "max_train_samples": 64, "max_eval_samples": 200, "batch_size": 16}
    cost_axes = ("model",)

    @classmethod
    def add_arguments(cls, parser, defaults: dict) -> None:
        d = {"models": "sentence-transformers/all-MiniLM-L6-v2", "seeds": "0", "epochs": 1, **defaults}
        what = parser.add_argument_group("what to sweep")
        what.add_argument("--models", default=d["models"], help="comma-separated hub ids or local model directories")
        add_seeds_argument(what, d["seeds"])
        what.add_argument("--task", default="stsb", choices=task_names(), help="the pair task, as TMFT's --task")
        train = parser.add_argument_group("training (TMFT's, docs/methods.md M1)")
        train.add_argument("--epochs", type=int, default=d["epochs"])
        train.add_argument("--batch-size", type=int, default=32)
        train.add_argument("--lr", type=float, default=2e-5, help="peak learning rate (AdamW)")
        train.add_argument("--weight-decay", type=float, default=0.01)
        train.add_argument("--warmup-ratio", type=float, default=0.1)
        train.add_argument("--eval-batch-size", type=int, default=64)
        train.add_argument("--max-train-samples", type=int, default=None, help="train on the first N pairs")
        train.add_argument("--max-eval-samples", type=int, default=None, help="a subset of dev and test")
        loss = parser.add_argument_group("AdaptiveLayerLoss (sentence-transformers; its defaults)")
        loss.add_argument(
            "--n-layers-per-step",
            type=int,
            default=DEFAULTS["n_layers_per_step"],
            help="earlier layers drawn per step beside the last (-1: all of them)",
        )
        loss.add_argument("--last-layer-weight", type=float, default=DEFAULTS["last_layer_weight"])
        loss.add_argument("--prior-layers-weight", type=float, default=DEFAULTS["prior_layers_weight"])
        loss.add_argument("--kl-div-weight", type=float, default=DEFAULTS["kl_div_weight"])
        loss.add_argument(
            "--kl-temperature", type=float, default=DEFAULTS["kl_temperature"], help="0 turns the KL term off"
        )

    @classmethod
    def check(cls, args) -> None:
        if args.epochs < 1:
            raise SweepInputError(f"--epochs must be 1 or more, got {args.epochs}")
        if not args.lr > 0:
            raise SweepInputError(f"--lr must be positive, got {args.lr}")
        for flag in ("batch_size", "eval_batch_size", "max_train_samples", "max_eval_samples"):
            value = getattr(args, flag)
            if value is not None and value <= 0:
                raise SweepInputError(f"--{flag.replace('_', '-')} must be a positive integer, got {value}")
        if args.weight_decay < 0 or not 0 <= args.warmup_ratio < 1:
            raise SweepInputError("--weight-decay must be >= 0 and --warmup-ratio in [0, 1)")
        if args.n_layers_per_step == 0 or args.n_layers_per_step < -1:
            raise SweepInputError(f"--n-layers-per-step must be -1 (all) or 1 or more, got {args.n_layers_per_step}")
        for flag in ("last_layer_weight", "prior_layers_weight", "kl_div_weight", "kl_temperature"):
            if getattr(args, flag) < 0:
                raise SweepInputError(f"--{flag.replace('_', '-')} must be 0 or more, got {getattr(args, flag)}")
        parse_int_list(args.seeds, "--seeds")

    @classmethod
    def metrics(cls, args) -> MetricContract:
        primary = get_task(args.task).primary_for(vars(args))
        companion = COMPANIONS.get(primary, "")
        return MetricContract(
            primary=f"best_dev_{primary}",
            report=f"test_{primary}_at_best_dev",
            companion=f"test_{companion}_at_best_dev" if companion else "",
            epoch=f"dev_{primary}",
            axes=("model", "seed"),
            select=None,
            seed="seed",
            label=f"{primary} (mean over layers)",
            short={"seed": "s"},
        )

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.encoders import cost as encoder_cost
        from trainables.encoders.loading import load_config, resolve_model
        from trainables.training.tokenized import load_task, subset, tokenize_task

        seeds = parse_int_list(args.seeds, "--seeds")
        models = model_list(args, context)
        paths = {model: resolve_model(model, context.mlflow_uri) for model in models}
        examples, checksums = load_task(args.task, args.data_dir)
        if args.max_eval_samples:
            examples = {
                s: rows if s == "train" else subset(rows, args.max_eval_samples) for s, rows in examples.items()
            }
        tasks = {m: tokenize_task(args.task, paths[m], examples, checksums, args.max_train_samples) for m in models}
        base = {
            "method": cls.name,
            "task": args.task,
            "epochs": args.epochs,
            "lr": args.lr,
            "batch_size": args.batch_size,
            "weight_decay": args.weight_decay,
            "warmup_ratio": args.warmup_ratio,
            "eval_batch_size": args.eval_batch_size,
            "max_train_samples": args.max_train_samples,
            "max_eval_samples": args.max_eval_samples,
            **{key: getattr(args, key) for key in DEFAULTS},
        }
        costs = {}
        for model, task in tasks.items():
            config = load_config(task.model_path)
            memory, seconds, weights = encoder_cost.pair_task_cost(
                config,
                task,
                int(config.num_hidden_layers),
                int(args.batch_size),
                int(args.epochs),
                args.gpu_tflops,
                getattr(args, "precision", "auto"),
                int(args.eval_batch_size),
            )
            costs[(model,)] = TrialCost(memory, seconds, weight_bytes=weights)
        return MethodPlan(
            configs=[{**base, "model": model, "seed": seed} for model in models for seed in seeds],
            data=AdaptiveData(tasks),
            costs=costs,
            checksums=checksums,
        )
