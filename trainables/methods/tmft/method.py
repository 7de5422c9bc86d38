"""TMFT: truncated model fine-tuning (ELECTRA paper; docs/methods/electra.md M1), on any pair task.

Inputs: sentence pairs of a task (trainables/training/pair_tasks.py: STS-B, MRPC, SICK; word pairs for the
word-similarity stage), an encoder and a layer l (0 = embedding output).
Model: the encoder physically truncated to its embeddings plus the first l layers; u, v = masked
mean of the last hidden state; the task's loss on (u, v) (STS-B: MSE(cos(u, v), gold / 5); MRPC:
BCE-with-logits on the cosine; SICK: cross-entropy of a Linear(3h, 3) head on [u; v; |u - v|]).
AdamW (lr 2e-5, weight decay 0.01 except LayerNorm and bias), linear warm-up over 10% of steps
then linear decay to 0, gradient clipping 1.0, batch 32, 10 epochs; after every epoch the task's
dev metrics (x100), and the test metrics once, of the best-dev weights, at the end (every epoch
with `test_every_epoch`): the same reported `test_*_at_best_dev`, a test pass per epoch fewer.

Upstream stages (WS+TMFT, DAPT+TMFT, TSDAE+TMFT; trainables/methods/tmft/improvements.py): a config with
`upstream_method` = "ws", "dapt" or "tsdae" and `_upstream_path` (the stage's directory in the stage store)
starts from that stage's weights: WS weights are loaded into the layer-l encoder with
`strict=False` (as the authors), DAPT's or TSDAE's encoder folder replaces the pretrained model before
truncation to layer l.

The best-dev epoch's weights are kept as a sentence-transformers model folder (`best/` in every
checkpoint, mean pooling); with `--eval-sets` the trial scores them on the evaluation suite
(trainables/evaluation/sets.py) at its end, into its own run (`<set>_spearman`, ...).

Config keys: model, layer, seed, epochs, lr, batch_size, weight_decay, warmup_ratio,
eval_batch_size, length_grouped, forward_chunk, random_init, test_every_epoch, task (+ eval_sets; upstream_method,
_upstream_path).
The driver (`TMFT.plan`) tokenises each model's data once; it reaches trials as `TMFTData`.
"""

from __future__ import annotations

from trainables.core import settings as shared
from trainables.core.errors import SweepInputError
from trainables.core.method import Estimate, Method, MethodInfo, MethodPlan, MetricContract, TrialCost, register_method
from trainables.core.settings import Auto, Choice, Flag, Int, Setting
from trainables.encoders.loading import model_list
from trainables.evaluation import layer_embeddings
from trainables.evaluation.sets import EVAL_SETS, check_scorable, main_metric
from trainables.methods.tmft import paper
from trainables.methods.tmft.encoder import ZERO_SHOT_STAGE
from trainables.training.batches import CPU_FORWARD_CHUNK
from trainables.training.pair_tasks import COMPANIONS, get_task, task_names

LABELS = {"spearman": "Spearman", "f1": "F1"}
PAPER = "ELECTRA paper §3"
SETTINGS = (
    shared.MODELS.but(default=list(paper.BASE_MODELS), source="the ELECTRA paper's models"),
    shared.LAYERS,
    shared.SEEDS.but(source="ELECTRA paper: five seeds"),
    Setting(
        "task",
        Choice(tuple(task_names())),
        "stsb",
        "fine-tuning task: " + "; ".join(f"{n} ({get_task(n).description})" for n in task_names()),
        group="what to sweep",
    ),
    Setting(
        "random_init",
        Flag(),
        False,
        "start from randomly initialised weights of the same architecture (Appendix E control)",
        group="what to sweep",
    ),
    shared.EPOCHS.but(help="epochs; 0 = evaluate the pretrained truncated encoder (zero-shot baseline)", source=PAPER),
    shared.BATCH_SIZE.but(source=PAPER),
    shared.LR.but(source=PAPER),
    shared.WEIGHT_DECAY,
    shared.WARMUP_RATIO,
    shared.EVAL_BATCH_SIZE,
    Setting(
        "length_grouped",
        Flag(),
        False,
        "group training pairs of similar length into batches (faster; departs from the paper's random batches)",
    ),
    Setting(
        "forward_chunk",
        Auto(Int(low=0)),
        "auto",
        "encode each training batch's sentences sorted by length, this many at a time, so each chunk pads only to "
        "its own longest sentence: the paper's batches and loss, fewer padded tokens. auto: "
        f"{CPU_FORWARD_CHUNK} on the CPU, the whole batch on a GPU (where small models are bound by kernel "
        "launches, which chunks multiply); 0 = the whole batch",
    ),
    Setting(
        "test_every_epoch",
        Flag(),
        False,
        "score the test set after every epoch too (per-epoch test curves in MLflow); by default it is scored once, "
        "with the best-dev weights, at the end: the same reported numbers, less evaluation time (always on with "
        "--search optuna, whose scheduler stops trials early)",
    ),
    shared.MAX_TRAIN_SAMPLES.but(help="train on a deterministic subset of this many pairs"),
    shared.MAX_EVAL_SAMPLES,
    EVAL_SETS,
)
CITATION = """@inproceedings{rep-etal-2024-electra,
  title = {Are {ELECTRA}'s Sentence Embeddings Beyond Repair? The Case of Semantic Textual Similarity},
  author = {Rep, Ivan and Duki{\\'c}, David and {\\v{S}}najder, Jan},
  booktitle = {Findings of the Association for Computational Linguistics: EMNLP 2024},
  pages = {9159--9169},
  year = {2024},
  url = {https://aclanthology.org/2024.findings-emnlp.535/}
}"""


def trainable_module():
    """trainables/methods/tmft/trainable.py (torch, Ray Tune), imported when a plan or a trial needs it."""
    import trainables.methods.tmft.trainable as module

    return module


@register_method("tmft")
class TMFT(Method):
    """Truncated model fine-tuning: models x layers x seeds on a pair task (docs/methods/electra.md M1)."""

    trainable = "trainables.methods.tmft.trainable:TMFTTrainable"  # imported when a trial or a plan needs it
    info = MethodInfo(
        display_name="TMFT",
        description="truncated model fine-tuning: models x layers x seeds on a pair task",
        citation=CITATION,
        main_metric="test Spearman at the best dev epoch (STS-B)",
        labels={"ws+tmft": "WS+TMFT", "dapt+tmft": "DAPT+TMFT", "tsdae+tmft": "TSDAE+TMFT"},
    )
    settings = SETTINGS
    smoke = {
        "layers": [0, 2],
        "seeds": [0, 1],
        "epochs": 1,
        "max_train_samples": 64,
        "max_eval_samples": 200,
        "batch_size": 16,
    }
    cost_axes = ("model", "layer")
    one_pass_zero_shot = True  # --epochs 0 reads every layer from one forward pass (not after a stage)
    presets = paper.PRESETS

    @classmethod
    def estimate(cls, args) -> Estimate:
        return paper.estimate(args, cls.models_for_task(args, list(paper.BASE_MODELS)))

    @staticmethod
    def models_for_task(args, default_models: list[str]) -> list[str]:
        """--models as given; for a translated STS-B left at the default models, the paper's models for its language."""
        language_models = getattr(get_task(args.task), "paper_models", None)
        if language_models and args.models == default_models:
            return [m.strip() for m in language_models.split(",") if m.strip()]
        return args.models

    @classmethod
    def check(cls, args) -> None:
        if args.search == "optuna" and (args.layers is None or len(args.layers) != 1 or len(args.models) != 1):
            raise SweepInputError(
                "--search optuna tunes one model at one layer: pass a single --models entry and a single --layers value"
            )

    @classmethod
    def metrics(cls, args) -> MetricContract:
        primary = get_task(args.task).primary_for(vars(args))
        companion = COMPANIONS.get(primary, "")
        sets = getattr(args, "eval_sets", [])
        return MetricContract(
            primary=f"best_dev_{primary}",
            report=f"test_{primary}_at_best_dev",
            companion=f"test_{companion}_at_best_dev" if companion else "",
            epoch=f"dev_{primary}",
            axes=("model", "layer", "seed"),
            select="layer",
            seed="seed",
            label=LABELS.get(primary, primary),
            columns=tuple(main_metric(name) for name in sets),
            short={"layer": "L", "seed": "s"},
        )

    @classmethod
    def base_config(cls, args) -> dict:
        config = super().base_config(args)
        config["test_every_epoch"] = config["test_every_epoch"] or args.search == "optuna"
        if not args.eval_sets:  # only when asked, so configs (and their hashes) of plain sweeps stay as they were
            del config["eval_sets"]
        return config

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.encoders.loading import check_layers, load_config, model_depth, resolve_model
        from trainables.training.tokenized import load_task, subset, tokenize_task

        seeds, layers = args.seeds, args.layers
        if not context.smoke_test:
            args.models = cls.models_for_task(args, context.default_models)
        model_ids = model_list(args, context)
        paths, depths = {}, {}
        for model in model_ids:
            paths[model] = resolve_model(model, context.mlflow_uri)
            depths[model] = model_depth(load_config(paths[model]))
            check_layers(model, depths[model], layers)
        examples, checksums = load_task(args.task, args.data_dir)  # raises DataFormatError
        if args.max_eval_samples:
            examples = {
                s: (rows if s == "train" else subset(rows, args.max_eval_samples)) for s, rows in examples.items()
            }
            task = get_task(args.task)
            for split in ("dev", "test") if task.primary == "spearman" else ():  # scored by correlations
                check_scorable(
                    [task.label(e) for e in examples[split]],
                    f"the {args.task} {split} split",
                    sample=f"--max-eval-samples {args.max_eval_samples}",
                )
        suite = None
        sets = args.eval_sets
        if sets:
            from trainables.evaluation.sets import load_suite

            suite = load_suite(sets, args.data_dir)
            checksums.update({f"eval_{name}": value for name, value in suite.checksums.items()})
        base = cls.base_config(args)
        configs = [
            {**base, "model": model, "layer": layer, "seed": seed}
            for model in model_ids
            for layer in (layers if layers is not None else range(depths[model] + 1))
            for seed in seeds
        ]
        tasks = {
            model: tokenize_task(args.task, paths[model], examples, checksums, args.max_train_samples)
            for model in model_ids
        }
        static = {
            f"model_path_{i}": str(paths[m])
            for i, m in enumerate(model_ids)
            if str(paths[m]) != m and m.startswith("runs:/")
        }
        planned = MethodPlan(
            configs=configs,
            data=trainable_module().TMFTData(tasks, suite),
            costs=cls.costs(tasks, args),
            checksums=checksums,
            static_params=static,
        )
        if (
            cls.one_pass_zero_shot
            and args.epochs == 0
            and not args.random_init
            and not args.max_eval_samples
            and get_task(args.task).zero_shot_sets
        ):
            cls.plan_one_pass(planned, paths, args, context)
        return planned

    @classmethod
    def plan_one_pass(cls, planned: MethodPlan, paths: dict, args, context) -> None:
        """A zero-epoch sweep: one `embeddings` stage per model (all its layers from one forward
        pass over the task's dev and test sentences), read by every trial of that model."""
        from trainables.core import object_storage
        from trainables.encoders.precision import stage_precision
        from trainables.evaluation.sets import load_suite
        from trainables.evaluation.zero_shot import default_max_length
        from trainables.stages.store import stage_root

        sets = list(get_task(args.task).zero_shot_sets.values())
        suite = load_suite(sets, args.data_dir)
        root = stage_root(getattr(args, "stage_dir", None), context.storage_path)
        for model, path in paths.items():
            mine = [c for c in planned.configs if c["model"] == model]
            spec = layer_embeddings.stage_spec(
                model,
                path,
                sorted({c["layer"] for c in mine}),
                [cls.trainable_class().pooling],
                sets,
                default_max_length(path),
                args.eval_batch_size,
                root,
                args.data_dir,
                suite,
                stage_precision(args),
            )
            planned.stages[spec["key"]] = spec
            for config in mine:
                config.update(
                    {
                        "upstream_method": ZERO_SHOT_STAGE,
                        "stage_key": spec["key"],
                        "upstream_run_id": None,
                        "_upstream_path": object_storage.join(root, spec["key"]),
                    }
                )
        planned.data.one_pass_scorer = suite
        planned.static_params["stage_dir"] = str(root)

    @classmethod
    def costs(cls, tasks: dict, args) -> dict:
        """(model, layer) -> TrialCost from the encoder cost model (trainables/encoders/cost.py)."""
        from trainables.encoders import cost as encoder_cost
        from trainables.encoders.loading import load_config

        costs = {}
        for model, task in tasks.items():
            config = load_config(task.model_path)
            for layer in range(int(config.num_hidden_layers) + 1):
                memory, seconds, weights = encoder_cost.pair_task_cost(
                    config,
                    task,
                    layer,
                    int(args.batch_size),
                    int(args.epochs),
                    args.gpu_tflops,
                    getattr(args, "precision", "auto"),
                    int(args.eval_batch_size),
                )
                costs[(model, layer)] = TrialCost(memory, seconds, weight_bytes=weights)
        return costs

    @classmethod
    def search_space(cls, args, base: dict) -> dict:
        from ray import tune

        return {
            **base,
            "lr": tune.loguniform(1e-5, 1e-4),
            "batch_size": tune.choice([16, 32, 64]),
            "warmup_ratio": tune.uniform(0.0, 0.2),
        }
