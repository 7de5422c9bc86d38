"""Zero-shot evaluation of any encoder on the evaluation suite (trainables/evaluation/sets.py), as the
papers report it: cosine of the pooled embeddings against gold, Spearman and Pearson x100.

Inputs: `--models` (hub ids, local folders, or `runs:/<run id>`: the best-dev checkpoint of a
finished trial of any method, recorded as `evaluated_run_id`), `--layers` (`last`, `all`, or
e.g. `0,3,6`; 0 = embedding output), `--pooling` (`mean`, `cls`, or both), `--sets`.
Grid: models x poolings x layers, one trial (and one MLflow run) each; no seeds, no training.

Cost: one forward pass per sentence per model, whatever the number of layers and poolings. The
driver computes, as an upstream stage (kind `embeddings`, trainables/evaluation/layer_embeddings.py; in the
stage store, keyed by the model's weights, layers, poolings, maximum length and the suite's
data), every requested layer's pooled embeddings of the suite's unique sentences from one pass
with all hidden states; each trial reads its (layer, pooling) and scores it.
Metrics: `<set>_spearman`, `<set>_pearson`, `<set>_spearman_mean`, `<set>_<subset>_spearman`,
`mean_spearman` (the contract's primary: the mean over the sets of their pooled Spearman).
"""

from __future__ import annotations

from trainables.core.errors import SweepInputError
from trainables.core.method import (
    Method,
    MethodPlan,
    MetricContract,
    TrialCost,
    parse_layers,
    parse_names,
    register_method,
)
from trainables.encoders.loading import model_list
from trainables.encoders.precision import stage_precision
from trainables.evaluation import layer_embeddings
from trainables.evaluation.sets import PAPER_SETS, suite_sets
from trainables.evaluation.zero_shot import POOLINGS
from trainables.methods.evaluate.trainable import EvaluateData, EvaluateTrainable


@register_method("evaluate")
class Evaluate(Method):
    trainable = EvaluateTrainable
    description = "zero-shot evaluation: models x poolings x layers on STS12-16, STS-B and SICK-R"
    smoke = {"layers": "all", "sets": "stsb,sts12"}
    cost_axes = ("model", "layer")

    @classmethod
    def add_arguments(cls, parser, defaults: dict) -> None:
        from trainables.evaluation.sets import eval_set_names

        d = {
            "models": "sentence-transformers/all-MiniLM-L6-v2",
            "layers": "last",
            "pooling": "mean",
            "sets": "papers",
            **defaults,
        }
        what = parser.add_argument_group("what to evaluate")
        what.add_argument(
            "--models",
            default=d["models"],
            help="comma-separated hub ids, local model folders, or runs:/<run id> (a trial's best-dev checkpoint)",
        )
        what.add_argument(
            "--layers",
            default=d["layers"],
            help="'last', 'all' (0..L of each model), or comma-separated layers, e.g. 0,3,6",
        )
        what.add_argument("--pooling", default=d["pooling"], help="mean, cls, or mean,cls")
        what.add_argument(
            "--sets",
            default=d["sets"],
            help="'papers' (STS12-16, STS-B test, SICK-R test, those found in --data-dir) or comma-separated: "
            f"{', '.join(eval_set_names())}",
        )
        what.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass")
        what.add_argument(
            "--max-length",
            type=int,
            default=None,
            help="tokens per sentence (default: the model's own, e.g. 256 for all-MiniLM-L6-v2)",
        )

    @classmethod
    def check(cls, args) -> None:
        if args.batch_size <= 0:
            raise SweepInputError(f"--batch-size must be a positive integer, got {args.batch_size}")
        if args.max_length is not None and args.max_length <= 1:
            raise SweepInputError(f"--max-length must be at least 2 tokens, got {args.max_length}")
        if str(args.layers).strip().lower() != "last":
            parse_layers(args.layers)
        parse_names(args.pooling, "--pooling", list(POOLINGS))
        if args.search != "grid":
            raise SweepInputError("--search optuna has nothing to tune in a zero-shot evaluation; use the default grid")

    @classmethod
    def metrics(cls, args) -> MetricContract:
        from trainables.evaluation.sets import main_metric, suite_primary

        sets = cls._sets_of(args)
        return MetricContract(
            primary=suite_primary(sets),
            report=suite_primary(sets),
            mode="max",
            axes=("model", "pooling", "layer"),
            select=None,
            seed=None,
            columns=tuple(main_metric(name) for name in sets),
            short={"layer": "L", "pooling": ""},
        )

    @classmethod
    def _sets_of(cls, args) -> list[str]:
        text = str(args.sets)
        if text.strip().lower() == "papers":
            return list(PAPER_SETS)
        return [n.strip() for n in text.split(",") if n.strip()]

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.core import object_storage
        from trainables.encoders.loading import load_config, model_depth, resolve_model
        from trainables.encoders.run_refs import is_run_reference, run_id_of
        from trainables.evaluation.sets import load_suite
        from trainables.evaluation.zero_shot import default_max_length
        from trainables.stages.store import stage_root

        sets, missing = suite_sets(args.sets, args.data_dir)
        if missing:
            print(f"Evaluation sets not found under {args.data_dir}, skipped: {', '.join(missing)}", flush=True)
        args.sets = ",".join(sets)
        suite = load_suite(sets, args.data_dir)
        poolings = parse_names(args.pooling, "--pooling", list(POOLINGS))
        layer_flag = str(args.layers).strip().lower()
        root = stage_root(None, context.storage_path)
        configs, specs, costs = [], {}, {}
        for model in model_list(args, context):
            path = resolve_model(model, context.mlflow_uri)
            config = load_config(path)
            depth = model_depth(config)
            layers = {"last": [depth], "all": list(range(depth + 1))}.get(layer_flag) or parse_layers(args.layers)
            beyond = [layer for layer in layers if layer > depth]
            if beyond:
                raise SweepInputError(
                    f"--layers: layer {beyond[0]} is beyond {model}'s depth ({depth} layers; valid 0..{depth})"
                )
            max_length = args.max_length or default_max_length(path)
            spec = layer_embeddings.stage_spec(
                model,
                path,
                layers,
                poolings,
                sets,
                max_length,
                args.batch_size,
                root,
                args.data_dir,
                suite,
                stage_precision(args),
            )
            specs[spec["key"]] = spec
            extra = {"evaluated_run_id": run_id_of(model)} if is_run_reference(model) else {}
            for pooling in poolings:
                for layer in layers:
                    configs.append(
                        {
                            "method": cls.name,
                            "model": model,
                            "layer": layer,
                            "pooling": pooling,
                            "sets": ",".join(sets),
                            "max_length": int(max_length),
                            **extra,
                            "stage_key": spec["key"],
                            "upstream_run_id": None,
                            "_upstream_path": object_storage.join(root, spec["key"]),
                        }
                    )
                    costs[(model, layer)] = TrialCost(memory_bytes=0.0, seconds=0.0, gpu=False)
        return MethodPlan(
            configs=configs,
            data=EvaluateData(suite),
            costs=costs,
            stages=specs,
            checksums={f"eval_{k}": v for k, v in suite.checksums.items()},
            static_params={"stage_dir": str(root)},
        )
