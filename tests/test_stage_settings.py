"""A stage's settings are declared once, by the stage, under the names its stage config uses, and
`stage_settings` makes them a method's flags (`LR` -> `--dapt-lr`): named after the stage kind, with the
stage's own default where it has one, and otherwise the base declaration's kind, bounds and default."""

from __future__ import annotations

import pytest

from trainables.core import settings as shared
from trainables.core.settings import Int, Setting, by_name
from trainables.methods import load
from trainables.methods.tmft import dapt, word_similarity
from trainables.stages.upstream import STAGE_GROUP, STAGES, stage_settings

load()
STAGE_MODULES = {"ws": word_similarity, "dapt": dapt}
SHARED = by_name(shared.SHARED)
TAKE_STAGE_DEFAULTS = {
    "ws": {"epochs", "batch_size", "lr", "selection"},
    "dapt": {"epochs", "batch_size", "accumulation", "lr", "head", "schedule", "clip"},
}


def _unprefixed(kind: str, setting: Setting) -> str:
    assert setting.name.startswith(f"{kind}_"), setting.name
    return setting.name[len(kind) + 1 :]


def test_a_base_declaration_becomes_the_stages_flag_with_the_stages_default():
    lr, steps = stage_settings(
        "x", (shared.LR.but(help="X stage rate"), Setting("steps", Int(low=1), 7, "X steps")), {"lr": 1e-3}
    )
    assert (lr.name, lr.option, lr.default, lr.help) == ("x_lr", "--x-lr", 1e-3, "X stage rate")
    assert (lr.kind, lr.source) == (shared.LR.kind, shared.LR.source)  # kind and bounds from LR
    assert (steps.name, steps.option, steps.default, steps.kind) == ("x_steps", "--x-steps", 7, Int(low=1))
    assert all(s.group == STAGE_GROUP and not s.config and not s.axis for s in (lr, steps))


@pytest.mark.parametrize("kind", sorted(STAGE_MODULES))
def test_a_stage_flags_default_is_the_stage_configs_default(kind):
    stage_defaults = STAGE_MODULES[kind].STAGE_DEFAULTS
    taken = set()
    for setting in STAGES.get(kind).settings:
        key = _unprefixed(kind, setting)
        if key in stage_defaults:
            assert setting.parse(setting.default) == stage_defaults[key], setting.name
            taken.add(key)
    assert taken == TAKE_STAGE_DEFAULTS[kind]


def test_the_flags_that_take_no_stage_default_keep_their_own():
    ws, dapt_settings = by_name(word_similarity.SETTINGS), by_name(dapt.SETTINGS)
    assert ws["ws_split"].default == word_similarity.STAGE_DEFAULTS["split_method"] == "numpy"
    assert ws["ws_max_train_samples"].default is None
    assert dapt_settings["dapt_clip"].default == "1.0"  # as the flag takes it; the stage config holds 1.0
    assert dapt_settings["dapt_corpus"].default == ["sick", "stsb-train", "wiki"]


# TSDAE's stage pools with [CLS] or mean only and takes a length from 1 token: its own kinds on purpose.
OWN_KINDS = {"tsdae_pooling", "tsdae_max_length"}


@pytest.mark.parametrize("kind", ["ws", "dapt", "tsdae"])
def test_a_stage_setting_named_like_a_shared_one_has_its_kind_and_bounds(kind):
    checked = set()
    for setting in STAGES.get(kind).settings:
        key = _unprefixed(kind, setting)
        if key in SHARED and setting.name not in OWN_KINDS:
            assert setting.kind == SHARED[key].kind, setting.name
            checked.add(key)
    assert {"batch_size", "lr"} <= checked, checked
