"""WS+TMFT, DAPT+TMFT (ELECTRA paper, Table 1; docs/methods/electra.md M2, M3) and TSDAE+TMFT (M6): an upstream
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

from dataclasses import replace

from trainables.core import object_storage
from trainables.core.errors import SweepInputError
from trainables.core.method import MethodInfo, MethodPlan, MetricContract, register_method
from trainables.core.setting_conditions import When
from trainables.core.settings import Names, Setting, by_name, merge
from trainables.encoders.mlm import check_model
from trainables.encoders.precision import stage_precision
from trainables.methods.tmft import dapt, word_similarity
from trainables.methods.tmft.method import TMFT
from trainables.stages.store import stage_root
from trainables.stages.upstream import STAGE_GROUP, STAGES, STORE_SETTINGS

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


IMPROVEMENT = Setting(
    "improvement",
    Names(known=lambda: [*IMPROVEMENTS, *ALIASES]),
    ["both"],
    "comma-separated: ws (word-similarity TMFT at layer l, then STS TMFT), dapt (MLM pre-training, then TMFT), "
    "tsdae (TSDAE, then TMFT), none (plain TMFT beside them); both = ws,dapt",
    group=STAGE_GROUP,
    config=False,
)
DAPT_CLIP = by_name(dapt.SETTINGS)["dapt_clip"]


class StageSettings:
    """The method's settings: TMFT's, --improvement, each stage kind's (`StageKind.settings`) and the
    stage store's. Read when asked, from the stage registry: the `tsdae` stage kind registers itself
    when its own package is imported, which may be after this one."""

    def __get__(self, instance, owner) -> tuple:
        kinds = [_under(STAGES.get(kind).settings, kind) for kind in IMPROVEMENTS if kind != "none"]
        return merge(TMFT.settings, (IMPROVEMENT,), *kinds, _under(STORE_SETTINGS, *IMPROVEMENTS[1:]))


def _under(settings, *kinds: str) -> tuple:
    """A stage's settings, each applying only when --improvement names one of `kinds` (or an alias of one)."""
    named = (*kinds, *(alias for alias, means in ALIASES.items() if set(means) & set(kinds)))
    return tuple(s.but(applies_when=(When("improvement", named),)) for s in settings)


@register_method("improvements")
class Improvements(TMFT):
    info = MethodInfo(
        display_name="TMFT after an upstream stage",
        description="WS+TMFT, DAPT+TMFT and TSDAE+TMFT: upstream stages, then the TMFT layer sweep from them",
        citation=TMFT.info.citation,
        main_metric=TMFT.info.main_metric,
    )
    settings = StageSettings()
    smoke = {**TMFT.smoke, **STAGE_SMOKE}
    cost_axes = ("model", "layer")
    one_pass_zero_shot = False  # a stage's weights, not the pretrained ones

    @classmethod
    def check(cls, args) -> None:
        super().check(args)
        STAGES.get("tsdae").check(vars(args))
        if args.search == "optuna" and len(expand(args.improvement)) > 1:
            raise SweepInputError("--search optuna tunes one method: pass one of --improvement ws, dapt or tsdae")

    @classmethod
    def estimate(cls, args):
        from trainables.methods.tmft import paper

        kinds = expand(args.improvement)
        estimate = paper.estimate(args, args.models, stages=len(kinds))
        units = estimate.trials // max(1, len(kinds) * len(args.seeds))  # (model, layer) pairs
        store = args.stage_dir or "<storage-path>/stages"
        stages = [
            f"{kind}: {units if kind == 'ws' else len(args.models)} "
            f"(one per model{' and layer' if kind == 'ws' else ''}), each computed unless the stage store "
            f"{store} holds it from an earlier sweep"
            for kind in kinds
            if kind != "none"
        ]
        return replace(estimate, stages=tuple(stages))

    @classmethod
    def metrics(cls, args) -> MetricContract:
        contract = super().metrics(args)
        return replace(contract, axes=("method", *contract.axes))

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.data.sentences import dapt_corpus_checksum
        from trainables.data.word_similarity import ws_checksum
        from trainables.stages.store import make_spec

        planned = super().plan(args, context)
        a = vars(args)
        kinds = expand(a["improvement"])
        root = stage_root(a.get("stage_dir"), context.storage_path)
        paths = {model: task.model_path for model, task in planned.data.tasks.items()}
        data_dir = a["data_dir"]
        checksums = {}
        if "ws" in kinds:
            checksums["ws"] = ws_checksum(data_dir)  # raises DataFormatError naming a missing file
        if "dapt" in kinds:
            sources = a["dapt_corpus"]
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
                        clip=None if a["dapt_clip"] == "none" else a["dapt_clip"],
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


def expand(improvements: list[str]) -> tuple[str, ...]:
    """--improvement's kinds, aliases expanded (both = ws,dapt), in the order given."""
    return tuple(dict.fromkeys(kind for name in improvements for kind in ALIASES.get(name, (name,))))


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
    return {
        "dapt_corpus": "+".join(a["dapt_corpus"]),
        "dapt_epochs": a["dapt_epochs"],
        "dapt_batch_size": a["dapt_batch_size"],
        "dapt_accumulation": a["dapt_accumulation"],
        "dapt_lr": a["dapt_lr"],
        "dapt_max_sentences": a["dapt_max_sentences"],
        "dapt_head": a["dapt_head"],
        "dapt_schedule": a["dapt_schedule"],
        "dapt_clip": DAPT_CLIP.to_config(a["dapt_clip"]),
    }
