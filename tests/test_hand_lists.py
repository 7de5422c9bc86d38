"""The engine's short lists of setting names name settings that exist: a renamed or deleted setting
fails here instead of silently leaving a list (the lists themselves are the rules they state)."""

from __future__ import annotations

from analysis import loader
from sweeps.engine import presets
from sweeps.engine.cli import ENGINE, TRIAL_SETTINGS
from sweeps.engine.resume import RESUME_KEEPS
from sweeps.engine.runner import parser_for
from sweeps.engine.stages_plan import stage_params
from trainables.core import schema
from trainables.core.method import METHODS
from trainables.core.settings import Float, Int, IntList
from trainables.methods import load
from trainables.stages.upstream import STAGES


def test_the_flags_a_resumed_sweep_keeps_from_its_command_line_are_engine_settings():
    assert set(RESUME_KEEPS) <= {s.name for s in ENGINE}, set(RESUME_KEEPS) - {s.name for s in ENGINE}


def test_the_flags_a_preset_leaves_free_are_settings_some_method_declares():
    load()
    declared = {s.name for name in METHODS.names() for s in METHODS.get(name).settings}
    assert set(presets.FREE_FLAGS) <= declared, set(presets.FREE_FLAGS) - declared


def test_the_engine_settings_every_trial_carries_are_the_ones_declared_so():
    assert [s.name for s in TRIAL_SETTINGS] == ["precision", "keep_checkpoints", "best_dtype"]
    assert all(s.trial and not s.config for s in TRIAL_SETTINGS)  # not a method's trial-config setting


def test_tsdaes_per_objective_flags_are_the_settings_it_declares_per_objective_and_keys_of_a_trials_settings():
    from trainables.methods.tsdae import method, settings

    assert settings.FLAGS == tuple(s.name for s in method.SETTINGS if s.per)
    assert set(settings.FLAGS) <= set(settings.SETTING_KEYS), set(settings.FLAGS) - set(settings.SETTING_KEYS)
    columns = [*settings.PAPER.values(), settings.SIMCSE_APRIL, settings.SHARED]
    assert all(set(column) <= set(settings.SETTING_KEYS) for column in columns)  # every paper value is a trial key


def test_the_params_every_trial_run_records_are_what_a_tmft_trial_records():
    """schema.PARAMS (the analysis reads them, and old runs hold them): each is a TMFT trial-config key, the
    one value of a TMFT axis (`layer` of `layers`), a result param, or the sweep's git commit (a real run's
    params hold them all: tests/test_sweep_tmft.py)."""
    tmft = METHODS.get("tmft")
    config = tmft.base_config(parser_for("tmft").parse_args([]))
    axes = {s.name for s in tmft.settings if s.axis}
    for param in schema.PARAMS:
        assert param in config or f"{param}s" in axes or param in schema.RESULT_PARAMS or param == "git_commit", param


def test_the_params_the_analysis_reads_as_numbers_are_numeric_settings_axes_or_results():
    """analysis/loader.py types these columns; a setting renamed or retyped fails here, so that the
    analysis still reads the runs recorded under the old name on purpose, not by accident."""
    load()
    declared: dict[str, list] = {}
    for name in METHODS.names():
        for setting in METHODS.get(name).settings:
            declared.setdefault(setting.name, []).append(setting)
    for param in loader.FLOAT_PARAMS:
        assert declared.get(param) and all(isinstance(s.kind, Float) for s in declared[param]), param
    for param in loader.INT_PARAMS:
        ints = declared.get(param) and all(isinstance(s.kind, Int) for s in declared[param])
        axes = declared.get(f"{param}s") or []  # an axis of whole numbers (`layers`, whose trials hold one `layer`)
        axis = axes and all(s.axis and isinstance(getattr(s.kind, "kind", s.kind), IntList) for s in axes)
        assert ints or axis or param in schema.RESULT_PARAMS, param


def _stage_configs() -> dict:
    from trainables.methods.tmft import dapt, word_similarity

    load()
    a = vars(parser_for("improvements").parse_args([]))
    common = {"epochs": 1, "batch_size": 8, "lr": 1e-5, "random_init": False}
    return {
        "ws": word_similarity.stage_config(
            3, **common, selection="cosine", max_train_samples=None, max_eval_samples=None
        ),
        "dapt": dapt.stage_config(**common, corpus="sick", accumulation=1, head="auto", max_sentences=None),
        "tsdae": STAGES.get("tsdae").config(a),
    }


def test_a_stage_run_records_the_trial_params_its_stage_config_holds():
    shared = {"seed", "lr", "batch_size"}
    for kind, config in _stage_configs().items():
        spec = {"kind": kind, "config": config, "model": "m", "key": "k", "model_identity": "i", "data_checksum": "d"}
        params = stage_params(spec, {"git_commit": "c"})
        held = {k for k in schema.PARAMS if k in config}
        assert shared | ({"epochs"} if kind != "tsdae" else set()) <= held, (kind, held)
        assert all(params[k] == config[k] for k in held), kind
        assert params["lr"] == (1e-5 if kind != "tsdae" else 3e-5)  # the stage's own, as given
        assert (params["method"], params["model"], params["git_commit"]) == (kind, "m", "c")


def test_every_stage_setting_is_recorded_in_the_params_of_the_trials_that_start_from_the_stage():
    from trainables.methods.tmft.improvements import downstream_params

    load()
    a = vars(parser_for("improvements").parse_args([]))
    for kind in ("ws", "dapt", "tsdae"):
        assert set(downstream_params(kind, a)) == {s.name for s in STAGES.get(kind).settings}, kind
