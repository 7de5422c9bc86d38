"""Zero-shot evaluation of any encoder on the evaluation suite (trainables/evaluation/sets.py), as the
papers report it: cosine of the pooled embeddings against gold, Spearman and Pearson x100.

Inputs: `--models` (hub ids, local folders, or `runs:/<run id>`: the best-dev checkpoint of a
finished trial of any method, recorded as `evaluated_run_id`), `--layers` (`last`, `all`, or
e.g. `0,3,6`; 0 = embedding output), `--pooling` (`own`, the default: the model's own pipeline from its
sentence-transformers config, its Dense layer included where it keeps one, e.g. a SimCSE run's MLP;
`mean`, `cls`, `max`, or several), `--sets`. The plan prints which pipeline scores each model; a trial
scored by its model's own pipeline records `pooling_from` (`model`, or `default`: mean pooling for a
folder with no sentence-transformers config) and its `pooling` is that pipeline's name (e.g. `cls+dense`).
Grid: models x poolings x layers, one trial (and one MLflow run) each; no seeds, no training.

Cost: one forward pass per sentence per model, whatever the number of layers and poolings. The
driver computes, as an upstream stage (kind `embeddings`, trainables/evaluation/layer_embeddings.py; in the
stage store, keyed by the model's weights, layers, poolings, maximum length and the suite's
data), every requested layer's pooled embeddings of the suite's unique sentences from one pass
with all hidden states; each trial reads its (layer, pooling) and scores it.
Metrics: `<set>_spearman`, `<set>_pearson`, `<set>_spearman_mean`, `<set>_<subset>_spearman`,
`mean_spearman` (the contract's primary: the mean over the sets of their pooled Spearman).

Settings: `SETTINGS` (trainables/core/settings.py). Config keys: method, model, layer, pooling, sets (the
sets found, comma-separated), max_length (the one used), evaluated_run_id (a run reference's), stage_key,
upstream_run_id, _upstream_path, and pooling_from where the pooling was `own`. `estimate` (for `--dry-run`)
counts the trials from the models' configs alone (`config_without_loading`), without loading any model.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainables.core import settings as shared
from trainables.core.errors import SweepInputError
from trainables.core.method import Estimate, Method, MethodInfo, MethodPlan, MetricContract, TrialCost, register_method
from trainables.core.settings import Auto, IntList, Names
from trainables.encoders.loading import config_without_loading, model_list
from trainables.encoders.precision import stage_precision
from trainables.evaluation import layer_embeddings
from trainables.evaluation.sets import PAPER_SETS, SUITE, suite_sets
from trainables.evaluation.zero_shot import OWN, POOLINGS


def trainable_module():
    """trainables/methods/evaluate/trainable.py (torch, Ray Tune), imported when a plan or a trial needs it."""
    import trainables.methods.evaluate.trainable as module

    return module


WHAT = "what to evaluate"


@dataclass(frozen=True)
class LayerPick(Auto):
    """`last`, `all` (typed None: 0..L of each model) or a list of layers. The typed `all` (None) parses
    to itself, so a value read back from a saved sweep stays `all` (Auto alone would read None as `last`)."""

    def parse(self, value):
        return None if value is None else super().parse(value)


SETTINGS = (
    shared.MODELS.but(group=WHAT),
    shared.LAYERS.but(
        kind=LayerPick(IntList(word="all"), word="last"),
        default="last",
        help="'last', 'all' (0..L of each model), or comma-separated layers, e.g. 0,3,6; 0 = the embedding output",
        group=WHAT,
    ),
    shared.POOLING.but(
        kind=Names(known=lambda: [OWN, *POOLINGS]),
        default=[OWN],
        help="own (the model's own pipeline from its sentence-transformers config; mean pooling without one), "
        "mean, cls, max, or several, e.g. own,cls",
        group=WHAT,
        axis=True,
    ),
    SUITE.but(config=False),  # the trial config records the sets found (`papers` resolved), by `plan`
    shared.BATCH_SIZE.but(default=64, help="sentences per forward pass", group=WHAT, config=False),
    shared.MAX_LENGTH.but(
        help="tokens per sentence (the model's own when unset, e.g. 256 for all-MiniLM-L6-v2)",
        group=WHAT,
        config=False,  # the trial config records the length used (the model's own when unset), by `plan`
    ),
)
CITATION = """@inproceedings{reimers-gurevych-2019-sentence,
  title = {Sentence-{BERT}: Sentence Embeddings using {S}iamese {BERT}-Networks},
  author = {Reimers, Nils and Gurevych, Iryna},
  booktitle = {Proceedings of the 2019 Conference on Empirical Methods in Natural Language Processing and the 9th
    International Joint Conference on Natural Language Processing (EMNLP-IJCNLP)},
  pages = {3982--3992},
  year = {2019},
  url = {https://aclanthology.org/D19-1410/}
}"""


@register_method("evaluate")
class Evaluate(Method):
    trainable = "trainables.methods.evaluate.trainable:EvaluateTrainable"  # imported when a trial or a plan needs it
    info = MethodInfo(
        display_name="Zero-shot evaluation",
        description="zero-shot evaluation: models x poolings x layers on STS12-16, STS-B and SICK-R",
        citation=CITATION,
        main_metric="mean Spearman over the STS sets",
    )
    settings = SETTINGS
    smoke = {"layers": "all", "sets": "stsb,sts12"}
    cost_axes = ("model", "layer")

    @classmethod
    def check(cls, args) -> None:
        if args.search != "grid":
            raise SweepInputError("--search optuna has nothing to tune in a zero-shot evaluation; use the default grid")

    @classmethod
    def layers_of(cls, args, model: str, depth: int) -> list[int]:
        """The layers `--layers` asks of a model `depth` layers deep; SweepInputError on one beyond it."""
        layers = [depth] if args.layers == "last" else list(range(depth + 1)) if args.layers is None else args.layers
        beyond = [layer for layer in layers if layer > depth]
        if beyond:
            raise SweepInputError(
                f"--layers: layer {beyond[0]} is beyond {model}'s depth ({depth} layers; valid 0..{depth})"
            )
        return layers

    @classmethod
    def estimate(cls, args) -> Estimate | None:
        """Trials (models x poolings x layers) from the models' configs found without loading them
        (`config_without_loading`); the trials only read the `embeddings` stage's output on a CPU (no GPU, no
        checkpoint), and the stage's one forward pass per model is not priced. None where `--layers
        all` meets a model whose depth is not known here."""
        depths = {model: config_without_loading(model) for model in args.models}
        unknown = [model for model, config in depths.items() if config is None]
        if args.layers is None and unknown:
            return None
        counts = {
            model: len(cls.layers_of(args, model, int(config.num_hidden_layers)))
            if config is not None
            else (1 if args.layers == "last" else len(args.layers))
            for model, config in depths.items()
        }
        trials = sum(count * len(cls._pipelines_here(args, model)) for model, count in counts.items())
        sets = "the papers' sets found in --data-dir" if args.sets == "papers" else ",".join(args.sets)
        if args.layers == "last" or args.layers is None:
            layers = {"last": "the last layer", None: "layers 0..L"}[args.layers]
        else:
            layers = "layers " + ",".join(map(str, args.layers))
        stages = tuple(
            f"embeddings of {model}: {layers}, pooling {','.join(args.pooling)}, on {sets}; computed unless the stage "
            "store (<storage-path>/stages) holds it"
            for model in args.models
        )
        return Estimate(
            trials,
            None,
            "the trials score cached embeddings on a CPU; the embeddings stage (one forward pass per model over the "
            "suite's sentences) is not priced",
            "trials counted from the models' local or public configs",
            costs=tuple(TrialCost(memory_bytes=0.0, seconds=0.0, gpu=False) for _ in range(trials)),
            stages=stages,
        )

    @staticmethod
    def _pipelines_here(args, model: str) -> list:
        """The pipelines of a model found here without loading it; `--pooling` as given where it is not here."""
        from trainables.encoders.loading import local_model_folder
        from trainables.evaluation.zero_shot import pipelines

        folder = local_model_folder(model)
        return pipelines(folder, args.pooling, model) if folder is not None else list(args.pooling)

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
        """The sets scored: `--sets` (after `plan`, the sets found), `papers` standing for all of the papers'."""
        return list(PAPER_SETS) if args.sets == "papers" else list(args.sets)

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.core import object_storage
        from trainables.encoders.loading import load_config, model_depth, resolve_model
        from trainables.encoders.run_refs import is_run_reference, run_id_of
        from trainables.evaluation.sets import load_suite
        from trainables.evaluation.zero_shot import default_max_length, pipelines
        from trainables.stages.store import stage_root

        sets, missing = suite_sets(args.sets, args.data_dir)
        if missing:
            print(f"Evaluation sets not found under {args.data_dir}, skipped: {', '.join(missing)}", flush=True)
        args.sets = sets  # the sets found: what the contract's columns and the saved sweep name
        suite = load_suite(sets, args.data_dir)
        poolings = args.pooling
        base = cls.base_config(args)
        root = stage_root(None, context.storage_path)
        configs, specs, costs = [], {}, {}
        for model in model_list(args, context):
            path = resolve_model(model, context.mlflow_uri)
            config = load_config(path)
            layers = cls.layers_of(args, model, model_depth(config))
            scored = pipelines(path, poolings, model)
            for pipeline in (p for p in scored if p.source != "asked"):
                print(f"{model}: scored with {pipeline.says()}; pooling '{pipeline.name}'", flush=True)
            max_length = args.max_length or default_max_length(path)
            spec = layer_embeddings.stage_spec(
                model,
                path,
                layers,
                [p.name for p in scored],
                sets,
                max_length,
                args.batch_size,
                root,
                args.data_dir,
                suite,
                stage_precision(args),
                head=next((p.head for p in scored if p.head), ()),
            )
            specs[spec["key"]] = spec
            extra = {"evaluated_run_id": run_id_of(model)} if is_run_reference(model) else {}
            for pipeline in scored:
                source = {"pooling_from": pipeline.source} if pipeline.source != "asked" else {}
                for layer in layers:
                    configs.append(
                        {
                            **base,
                            "model": model,
                            "layer": layer,
                            "pooling": pipeline.name,
                            "sets": ",".join(sets),
                            "max_length": int(max_length),
                            **extra,
                            **source,
                            "stage_key": spec["key"],
                            "upstream_run_id": None,
                            "_upstream_path": object_storage.join(root, spec["key"]),
                        }
                    )
                    costs[(model, layer)] = TrialCost(memory_bytes=0.0, seconds=0.0, gpu=False)
        return MethodPlan(
            configs=configs,
            data=trainable_module().EvaluateData(suite),
            costs=costs,
            stages=specs,
            checksums={f"eval_{k}": v for k, v in suite.checksums.items()},
            static_params={"stage_dir": str(root)},
        )
