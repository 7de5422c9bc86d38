"""WS+TMFT, DAPT+TMFT (ELECTRA paper, Table 1; docs/methods.md M2, M3) and TSDAE+TMFT (M6): an upstream
stage per model (DAPT, TSDAE) or per model and layer (WS, seed 0 as the paper), then TMFT trials
that start from it.

The method is TMFT's grid and trainable with more flags (`--improvement`, a list of ws, dapt, tsdae
and none, the plain TMFT beside them, for Table 1 from one sweep; `both` = ws,dapt; and the
stage settings `--ws-*`, `--dapt-*`, `--tsdae-*`, `--stage-*`) and with stage specs in its plan: for
every (model, layer, seed) and improvement a trial with method `ws+tmft`, `dapt+tmft` or `tsdae+tmft`
(the `tsdae` stage kind is TSDAE's, found in the stage registry: its flags, check, config and
recorded params come from it), the key of the
stage it starts from (`stage_key`), the stage settings as params and the stage's directory
(`_upstream_path`). Stages live in the content-addressed store `<storage-path>/stages/` (or
`--stage-dir`); the engine computes the missing ones before the trials (sweeps/engine/stages_plan.py)
and fills each trial's `upstream_run_id`.
"""

from __future__ import annotations

import math

from trainables.core import object_storage
from trainables.core.errors import SweepInputError
from trainables.core.method import MethodPlan, MetricContract, register_method
from trainables.data.word_similarity import SPLIT_METHODS as WS_SPLITS
from trainables.encoders.mlm import check_model
from trainables.encoders.precision import stage_precision
from trainables.methods.tmft import dapt, word_similarity
from trainables.methods.tmft.method import TMFT
from trainables.stages.store import stage_root
from trainables.stages.upstream import STAGES

IMPROVEMENTS = ("none", "ws", "dapt", "tsdae")  # none: plain TMFT, no stage
ALIASES = {"both": ("ws", "dapt")}
# --smoke-test also shrinks the stages.
STAGE_SMOKE = {
    "ws_epochs": 2,
    "ws_max_train_samples": 256,
    "dapt_epochs": 1,
    "dapt_max_sentences": 384,
    "dapt_batch_size": 16,
    "dapt_accumulation": 2,
    "tsdae_steps": 4,
    "tsdae_max_sentences": 64,
}


@register_method("improvements")
class Improvements(TMFT):
    description = "WS+TMFT and DAPT+TMFT: upstream stages, then the TMFT layer sweep from them"
    smoke = {**TMFT.smoke, **STAGE_SMOKE}
    cost_axes = ("model", "layer")
    one_pass_zero_shot = False  # a stage's weights, not the pretrained ones

    @classmethod
    def add_arguments(cls, parser, defaults: dict) -> None:

        super().add_arguments(parser, defaults)
        group = parser.add_argument_group("improvements (upstream stages)")
        group.add_argument(
            "--improvement",
            default="both",
            help="comma-separated: ws (word-similarity TMFT at layer l, then STS TMFT), dapt (MLM "
            "pre-training, then TMFT), none (plain TMFT beside them); both = ws,dapt",
        )
        ws = word_similarity.STAGE_DEFAULTS
        group.add_argument(
            "--ws-epochs", type=int, default=ws["epochs"], help="word-similarity stage epochs (best dev epoch kept)"
        )
        group.add_argument("--ws-batch-size", type=int, default=ws["batch_size"])
        group.add_argument("--ws-lr", type=float, default=ws["lr"])
        group.add_argument(
            "--ws-selection",
            choices=word_similarity.SELECTIONS,
            default=ws["selection"],
            help="best-epoch rule: dev Spearman of the cosine (the paper), or the authors' max over cosine, "
            "Euclidean, Manhattan and dot",
        )
        group.add_argument(
            "--ws-max-train-samples",
            type=int,
            default=None,
            help="train the WS stage on a deterministic subset of word pairs",
        )
        dp = dapt.STAGE_DEFAULTS
        group.add_argument("--dapt-epochs", type=int, default=dp["epochs"])
        group.add_argument("--dapt-batch-size", type=int, default=dp["batch_size"])
        group.add_argument(
            "--dapt-accumulation",
            type=int,
            default=dp["accumulation"],
            help="gradient accumulation steps (effective batch = batch x this)",
        )
        group.add_argument("--dapt-lr", type=float, default=dp["lr"])
        group.add_argument(
            "--dapt-corpus",
            default="sick,stsb-train,wiki",
            help="comma-separated sentence sources: sick, stsb-train, wiki, allnli (the paper's SNLI+MultiNLI), "
            "snli, multinli",
        )
        group.add_argument(
            "--dapt-max-sentences", type=int, default=None, help="a deterministic subset of the corpus (quick runs)"
        )
        group.add_argument(
            "--dapt-head",
            choices=dapt.HEADS,
            default=dp["head"],
            help="auto: the checkpoint's MLM head, or a new tied one if it has none; "
            "authors: always a new head, only its tied decoder trained",
        )
        group.add_argument(
            "--dapt-schedule",
            choices=dapt.SCHEDULES,
            default=dp["schedule"],
            help="steps: warm-up over 10%% of the optimiser steps (the paper); authors: counted in batches, "
            "so the rate peaks at 80%% of training (the authors' code)",
        )
        group.add_argument(
            "--dapt-clip",
            default="1.0",
            help="gradient clipping norm of the DAPT stage (the paper: 1.0), or 'none' (the authors' code)",
        )
        group.add_argument(
            "--ws-split",
            choices=WS_SPLITS,
            default="numpy",
            help="word-pair split: numpy (seeded, this project's), sklearn-compat (the authors' "
            "train_test_split with np.random.seed(0))",
        )
        STAGES.get("tsdae").add_arguments(group)
        group.add_argument(
            "--stage-dir",
            default=None,
            help="the stage store (default: <storage-path>/stages): a local or shared folder, or an s3:// URI",
        )
        group.add_argument(
            "--stage-cpus", type=float, default=None, help="CPUs per stage task (default: --cpus-per-trial)"
        )
        group.add_argument(
            "--stage-gpus",
            type=float,
            default=None,
            help="GPUs per stage task (default: 1 when trials use GPUs, else 0)",
        )

    @classmethod
    def check(cls, args) -> None:
        super().check(args)
        a = vars(args)
        for flag in ("ws_batch_size", "dapt_batch_size", "dapt_accumulation"):
            if a[flag] <= 0:
                raise SweepInputError(f"--{flag.replace('_', '-')} must be a positive integer, got {a[flag]}")
        for flag in ("ws_epochs", "dapt_epochs"):
            if a[flag] < 0:
                raise SweepInputError(f"--{flag.replace('_', '-')} must be 0 or more, got {a[flag]}")
        for flag in ("ws_lr", "dapt_lr"):
            if not a[flag] > 0:
                raise SweepInputError(f"--{flag.replace('_', '-')} must be positive, got {a[flag]}")
        STAGES.get("tsdae").check(a)
        for flag in ("ws_max_train_samples", "dapt_max_sentences", "tsdae_max_sentences"):
            if a[flag] is not None and a[flag] <= 0:
                raise SweepInputError(f"--{flag.replace('_', '-')} must be a positive integer, got {a[flag]}")
        parse_clip(a["dapt_clip"])
        if a["search"] == "optuna" and len(parse_improvements(a["improvement"])) > 1:
            raise SweepInputError("--search optuna tunes one method: pass one of --improvement ws, dapt or tsdae")

    @classmethod
    def estimate(cls, args):
        from trainables.methods.tmft import electra_paper

        models = [m.strip() for m in args.models.split(",") if m.strip()]
        return electra_paper.estimate(args, models, stages=len(parse_improvements(args.improvement)))

    @classmethod
    def metrics(cls, args) -> MetricContract:
        from dataclasses import replace

        contract = super().metrics(args)
        return replace(contract, axes=("method", *contract.axes))

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.data.sentences import dapt_corpus_checksum, parse_sources
        from trainables.data.word_similarity import ws_checksum
        from trainables.stages.store import make_spec

        planned = super().plan(args, context)
        a = vars(args)
        kinds = parse_improvements(a["improvement"])
        root = stage_root(a.get("stage_dir"), context.storage_path)
        paths = {model: task.model_path for model, task in planned.data.tasks.items()}
        data_dir = a["data_dir"]
        checksums = {}
        if "ws" in kinds:
            checksums["ws"] = ws_checksum(data_dir)  # raises DataFormatError naming a missing file
        if "dapt" in kinds:
            sources = parse_sources(a["dapt_corpus"])
            checksums["dapt"] = dapt_corpus_checksum(data_dir, sources)
            for path in set(paths.values()):
                check_model(path)
        if "tsdae" in kinds:
            checksums["tsdae"] = STAGES.get("tsdae").prepare(a, paths, data_dir)
        specs, configs = {}, []
        for base in planned.configs:
            for kind in kinds:
                if kind == "none":
                    configs.append({**base, "method": TMFT.name})
                    continue
                if kind == "ws":
                    config = word_similarity.stage_config(
                        base["layer"],
                        epochs=a["ws_epochs"],
                        batch_size=a["ws_batch_size"],
                        lr=a["ws_lr"],
                        selection=a["ws_selection"],
                        random_init=a["random_init"],
                        max_train_samples=a["ws_max_train_samples"],
                        max_eval_samples=a["max_eval_samples"],
                        split_method=a["ws_split"],
                    )
                elif kind == "tsdae":
                    config = STAGES.get("tsdae").config(a)
                else:
                    config = dapt.stage_config(
                        corpus="+".join(sources),
                        epochs=a["dapt_epochs"],
                        batch_size=a["dapt_batch_size"],
                        accumulation=a["dapt_accumulation"],
                        lr=a["dapt_lr"],
                        head=a["dapt_head"],
                        random_init=a["random_init"],
                        max_sentences=a["dapt_max_sentences"],
                        schedule=a["dapt_schedule"],
                        clip=parse_clip(a["dapt_clip"]),
                    )
                if kind != "tsdae":  # TSDAE's loop trains in fp32
                    config.update(stage_precision(args))
                spec = make_spec(kind, base["model"], paths[base["model"]], root, data_dir, checksums[kind], config)
                specs.setdefault(spec["key"], spec)
                configs.append(
                    {
                        **base,
                        "method": STAGES.get(kind).downstream,
                        "upstream_method": kind,
                        "stage_key": spec["key"],
                        "upstream_run_id": None,
                        **downstream_params(kind, a),
                        "_upstream_path": object_storage.join(root, spec["key"]),
                    }
                )
        planned.configs = configs
        planned.stages = specs
        planned.method_label = ",".join("tmft" if k == "none" else STAGES.get(k).downstream for k in kinds)
        planned.static_params["stage_dir"] = str(root)
        return planned


def parse_improvements(text: str) -> tuple[str, ...]:
    """--improvement: the kinds in IMPROVEMENTS (aliases expanded), in the order given."""
    from trainables.core.method import parse_names

    names = parse_names(text, "--improvement", [*IMPROVEMENTS, *ALIASES])
    return tuple(dict.fromkeys(kind for name in names for kind in ALIASES.get(name, (name,))))


def downstream_params(kind: str, a: dict) -> dict:
    """Stage settings recorded in every downstream trial's params."""
    if kind == "ws":
        return {
            "ws_selection": a["ws_selection"],
            "ws_epochs": a["ws_epochs"],
            "ws_batch_size": a["ws_batch_size"],
            "ws_lr": a["ws_lr"],
            "ws_max_train_samples": a["ws_max_train_samples"],
            "ws_split": a["ws_split"],
        }
    if kind == "tsdae":
        return STAGES.get("tsdae").downstream_params(a)
    from trainables.data.sentences import parse_sources

    return {
        "dapt_corpus": "+".join(parse_sources(a["dapt_corpus"])),
        "dapt_epochs": a["dapt_epochs"],
        "dapt_batch_size": a["dapt_batch_size"],
        "dapt_accumulation": a["dapt_accumulation"],
        "dapt_lr": a["dapt_lr"],
        "dapt_max_sentences": a["dapt_max_sentences"],
        "dapt_head": a["dapt_head"],
        "dapt_schedule": a["dapt_schedule"],
        "dapt_clip": a["dapt_clip"],
    }


def parse_clip(text) -> float | None:
    """--dapt-clip: a positive norm, or 'none'."""
    if str(text).strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value <= 0:
        raise SweepInputError(f"--dapt-clip must be a positive number or 'none', got {text!r}")
    return value
