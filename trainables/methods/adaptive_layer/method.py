"""Adaptive layers: every layer from one training run (docs/methods/adaptive-layers.md).

Inputs: the pair task and data TMFT trains on (trainables/training/pair_tasks.py: STS-B by default; MRPC,
SICK), an encoder. Model: the whole encoder with mean pooling, trained once with sentence-transformers'
`AdaptiveLayerLoss` around TMFT's loss of the task (trainables/methods/adaptive_layer/training.py), with
TMFT's optimiser, schedule, batch and epochs. The one saved model (`best/`, the best epoch by the mean
dev score over the layers) is scored at every layer from one forward pass: `layer<k>_test_<metric>_at_best_dev`.

The loss's options are flags with its documented defaults: `--n-layers-per-step 1`,
`--last-layer-weight 1.0`, `--prior-layers-weight 1.0`, `--kl-div-weight 1.0`, `--kl-temperature 0.3`.

Settings: `SETTINGS` (trainables/core/settings.py; the training ones are TMFT's, with TMFT's defaults).
Config keys: method, model, seed, task, epochs, lr, batch_size, weight_decay, warmup_ratio,
eval_batch_size, max_train_samples, max_eval_samples and the five loss options.
`estimate` (for `--dry-run`) prices models x seeds from the models' configs alone (`config_without_loading`),
without loading any model.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainables.core import settings as shared
from trainables.core.method import Estimate, Method, MethodInfo, MethodPlan, MetricContract, TrialCost, register_method
from trainables.core.setting_conditions import When
from trainables.core.settings import Choice, Float, Int, Setting
from trainables.encoders.loading import config_without_loading, local_model_folder, model_list
from trainables.training.pair_tasks import COMPANIONS, get_task, task_names

DEFAULTS = {  # AdaptiveLayerLoss's own defaults (sentence-transformers 6.2)
    "n_layers_per_step": 1,
    "last_layer_weight": 1.0,
    "prior_layers_weight": 1.0,
    "kl_div_weight": 1.0,
    "kl_temperature": 0.3,
}

TMFT = "ELECTRA paper §3 (TMFT's)"  # the source of the training settings, TMFT's (docs/methods/electra.md M1)
TRAINING = "training (TMFT's, docs/methods/electra.md M1)"
LOSS = "AdaptiveLayerLoss (sentence-transformers; its defaults)"
LIBRARY = "sentence-transformers' AdaptiveLayerLoss default"


@dataclass(frozen=True)
class LayersPerStep(Int):
    """-1 (every earlier layer) or a positive number of layers."""

    def parse(self, value):
        number = super().parse(value)
        if number == 0:
            raise ValueError("must be -1 (all) or 1 or more, got 0")
        return number

    def describe(self) -> str:
        return "-1 (all) or 1 or more"

    def bad_values(self) -> list[str]:
        return ["x", "0", "-2"]


SETTINGS = (
    shared.MODELS,
    shared.SEEDS.but(default=[0]),
    Setting("task", Choice(tuple(task_names())), "stsb", "the pair task, as TMFT's --task", group="what to sweep"),
    shared.EPOCHS.but(kind=Int(low=1), default=1, group=TRAINING),
    shared.BATCH_SIZE.but(group=TRAINING, source=TMFT),
    shared.LR.but(group=TRAINING, source=TMFT),
    shared.WEIGHT_DECAY.but(group=TRAINING, source=TMFT),
    shared.WARMUP_RATIO.but(group=TRAINING, source=TMFT),
    shared.EVAL_BATCH_SIZE.but(group=TRAINING),
    shared.MAX_TRAIN_SAMPLES.but(help="train on a deterministic subset of this many pairs", group=TRAINING),
    shared.MAX_EVAL_SAMPLES.but(group=TRAINING),
    Setting(
        "n_layers_per_step",
        LayersPerStep(low=-1),
        DEFAULTS["n_layers_per_step"],
        "earlier layers drawn per step beside the last (-1: all of them)",
        group=LOSS,
        source=LIBRARY,
    ),
    Setting(
        "last_layer_weight",
        Float(low=0),
        DEFAULTS["last_layer_weight"],
        "weight of the task's loss at the last layer",
        group=LOSS,
        source=LIBRARY,
    ),
    Setting(
        "prior_layers_weight",
        Float(low=0),
        DEFAULTS["prior_layers_weight"],
        "weight of the task's loss at the earlier layers drawn (shared among them)",
        group=LOSS,
        source=LIBRARY,
    ),
    Setting(
        "kl_div_weight",
        Float(low=0),
        DEFAULTS["kl_div_weight"],
        "weight of the KL divergence of each drawn layer from the last (times --kl-temperature)",
        group=LOSS,
        source=LIBRARY,
        applies_when=(When("kl_temperature", not_values=(0.0,)),),
        warn_alone=True,  # sentence-transformers' AdaptiveLayerLoss takes it with the KL term off too
    ),
    Setting(
        "kl_temperature",
        Float(low=0),
        DEFAULTS["kl_temperature"],
        "temperature of the KL term; 0 turns the KL term off",
        group=LOSS,
        source=LIBRARY,
    ),
)
CITATION = """@article{li-etal-2024-2d-matryoshka,
  title = {{2D} {M}atryoshka Sentence Embeddings},
  author = {Li, Xianming and Li, Zongxi and Li, Jing and Xie, Haoran and Li, Qing},
  journal = {arXiv preprint arXiv:2402.14776},
  year = {2024},
  url = {https://arxiv.org/abs/2402.14776}
}"""


def _priced_task(args, model: str):
    """(the task's pairs as token ids for the cost model, how they were tokenised): the subsets the
    sweep would use, tokenised in memory (no cache written) by the model's own tokenizer where its
    folder is here, else ceil(1.3 x words) + 2 ids a sentence."""
    import math

    from trainables.training.tokenized import TokenizedPairs, TokenizedTask, load_task, subset

    examples, checksums = load_task(args.task, args.data_dir)
    rows = {
        split: subset(pairs, args.max_train_samples if split == "train" else args.max_eval_samples)
        for split, pairs in examples.items()
    }
    folder, encode, how = local_model_folder(model), None, "estimated as 1.3 per word"
    if folder is not None:
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(folder))
            encode = lambda texts: tokenizer(list(texts), truncation=True, max_length=512)["input_ids"]  # noqa: E731
            how = "by the models' own tokenizers"
        except (OSError, ValueError):
            encode = None
    if encode is None:
        encode = lambda texts: [[0] * (math.ceil(1.3 * len(str(t).split())) + 2) for t in texts]  # noqa: E731
    splits = {
        split: TokenizedPairs(
            encode([r.sentence1 for r in pairs]), encode([r.sentence2 for r in pairs]), [0.0] * len(pairs)
        )
        for split, pairs in rows.items()
    }
    return TokenizedTask(args.task, str(folder or model), 0, splits, dict(checksums)), how


class AdaptiveData:
    """What every trial reads: each model's tokenised task."""

    def __init__(self, tasks: dict):
        self.tasks = tasks


@register_method("adaptive-layer")
class AdaptiveLayer(Method):
    """One model per (model, seed) trained with AdaptiveLayerLoss, scored at every layer."""

    trainable = "trainables.methods.adaptive_layer.trainable:AdaptiveLayerTrainable"  # imported when needed
    info = MethodInfo(
        display_name="Adaptive layers (one run)",
        description="adaptive layers: every layer from one run (sentence-transformers' AdaptiveLayerLoss)",
        citation=CITATION,
        main_metric="test Spearman at the best dev epoch of every layer (STS-B), beside TMFT's model of that layer",
    )
    settings = SETTINGS
    smoke = {"seeds": [0], "epochs": 1, "max_train_samples": 64, "max_eval_samples": 200, "batch_size": 16}
    cost_axes = ("model",)

    @classmethod
    def estimate(cls, args) -> Estimate:
        """Trials (models x seeds), each priced by the cost model (trainables/encoders/cost.py) as TMFT's
        trial at the model's last layer, from the model's local or public config (`config_without_loading`; no
        model loaded) on the task's data tokenised by the model's tokenizer where it is here (else 1.3
        tokens per word); nothing is written."""
        from trainables.encoders import cost as encoder_cost

        trials = len(args.models) * len(args.seeds)
        configs = {model: config_without_loading(model) for model in args.models}
        unknown = [model for model, config in configs.items() if config is None]
        if unknown:
            return Estimate(trials, None, f"not priced: no local or public config here for {', '.join(unknown)}")
        precision = "tf32" if args.precision == "auto" else args.precision
        per_model, hows = [], set()
        for model, config in configs.items():
            task, how = _priced_task(args, model)
            hows.add(how)
            memory, seconds, weights = encoder_cost.pair_task_cost(
                config,
                task,
                int(config.num_hidden_layers),
                args.batch_size,
                args.epochs,
                args.gpu_tflops,
                precision,
                args.eval_batch_size,
            )
            per_model.append(TrialCost(memory, seconds, weight_bytes=weights))
        costs = tuple(cost for cost in per_model for _ in args.seeds)
        return Estimate(
            trials,
            sum(cost.seconds for cost in costs) / 3600,
            "priced as TMFT's trial at the last layer: the earlier layers' losses and their evaluation not counted",
            f"{precision} on an H100 (--gpu-tflops scales it), tokens {' and '.join(sorted(hows))}",
            costs=costs,
        )

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
            averaged_over="layers",  # each layer's own score is logged as layer<k>_<metric>
            short={"seed": "s"},
        )

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.encoders import cost as encoder_cost
        from trainables.encoders.loading import load_config, resolve_model
        from trainables.training.tokenized import load_task, subset, tokenize_task

        seeds = args.seeds
        models = model_list(args, context)
        paths = {model: resolve_model(model, context.mlflow_uri) for model in models}
        examples, checksums = load_task(args.task, args.data_dir)
        if args.max_eval_samples:
            examples = {
                s: rows if s == "train" else subset(rows, args.max_eval_samples) for s, rows in examples.items()
            }
        tasks = {m: tokenize_task(args.task, paths[m], examples, checksums, args.max_train_samples) for m in models}
        base = cls.base_config(args)
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
