"""The list kinds' bounds (trainables/core/settings.py): `IntList(low=...)` refuses an entry under its
lower bound, `FloatList` holds every number to a `Float`'s bounds; both refuse with what is wrong."""

from __future__ import annotations

import pytest

from trainables.core.errors import SweepInputError
from trainables.core.settings import Float, FloatList, IntList, Setting


def test_an_int_list_with_a_lower_bound_refuses_an_entry_under_it():
    dims = Setting("dims", IntList(low=1, what="dimension"), [64], "output dimensions")
    assert dims.parse("8,1-2") == [1, 2, 8]
    with pytest.raises(SweepInputError, match=r"--dims.*holds 0: a dimension must be at least 1"):
        dims.parse("0")
    with pytest.raises(SweepInputError, match=r"--dims.*holds 0"):
        dims.parse("0-4")
    assert "0" in IntList(low=1).bad_values() and "each at least 1" in IntList(low=1).describe()
    assert IntList().parse("0,2") == [0, 2]  # 0 or more, as before


def test_a_float_list_keeps_the_order_given_and_holds_each_number_to_its_bounds():
    lrs = Setting("lrs", FloatList(Float(above=0)), [1e-5], "learning rates")
    assert lrs.parse("3e-5, 1e-5,3e-5") == [3e-5, 1e-5]
    assert lrs.parse([0.5, 0.1]) == [0.5, 0.1] and lrs.kind.to_config([3e-5, 0.1]) == "3e-05,0.1"
    for bad, why in [("1e-5,-1", "must be positive"), ("1e-5,x", "must be a number"), ("nan", "finite")]:
        with pytest.raises(SweepInputError, match=rf"--lrs.*{why}"):
            lrs.parse(bad)
    for bad in lrs.kind.bad_values():
        with pytest.raises(SweepInputError, match="--lrs"):
            lrs.parse(bad)


def test_a_method_whose_smoke_or_preset_value_its_setting_refuses_does_not_register():
    from trainables.core import settings as shared
    from trainables.core.method import METHODS, Method, MethodInfo, Preset, register_method

    info = MethodInfo(
        display_name="Bad", description="d", citation="@misc{x, title = {X}, year = {2026}}", main_metric="m"
    )

    class BadSmoke(Method):
        settings = (shared.SEEDS, shared.LAYERS)
        smoke = {"layers": "8,all"}

    BadSmoke.info = info
    with pytest.raises(ValueError, match=r"method 'bad-smoke': its smoke value layers='8,all' is refused: --layers"):
        register_method("bad-smoke")(BadSmoke)

    class BadPreset(Method):
        settings = (shared.SEEDS,)
        presets = {"p": Preset("p", "bad-preset", "sweeps/x.py", "nothing", {"seeds": "-1"})}

    BadPreset.info = info
    with pytest.raises(ValueError, match=r"its preset p value seeds='-1' is refused: --seeds"):
        register_method("bad-preset")(BadPreset)
    assert "bad-smoke" not in METHODS.names() and "bad-preset" not in METHODS.names()
