"""`--resume` compares the flags given on the command line, and only those, with the ones the sweep
started with (sweeps/engine/resume.py `refuse_changed_flags`): the values `--preset` or `--smoke-test`
fill in are the sweep's own and are checked through those two flags; a flag typed out at its default
is compared too (an unset flag is no difference)."""

from __future__ import annotations

import pytest

from sweeps.engine import presets
from sweeps.engine.cli import given_flags
from sweeps.engine.resume import refuse_changed_flags
from sweeps.engine.runner import parser_for
from trainables.core.errors import SweepInputError
from trainables.methods import get_method

TMFT = get_method("tmft")


def _parsed(argv):
    """(args as `main` has them after presets and --smoke-test, the flags given, the declared defaults)."""
    parser = parser_for("tmft", "electra_layers")
    given = given_flags(parser, argv)
    args = presets.apply(parser, argv, parser.parse_args(argv), TMFT, given)
    return args, given, vars(parser_for("tmft", "electra_layers").parse_args([])), parser.settings


def _resume(started: list[str], now: list[str]) -> None:
    saved = vars(_parsed(started)[0])
    args, given, defaults, settings = _parsed(["--resume", "x", *now])
    refuse_changed_flags(args, defaults, saved, settings, given)


def test_resume_with_smoke_test_continues_a_smoke_sweep_and_refuses_what_changes_it():
    _resume(["--smoke-test"], ["--smoke-test"])
    _resume(["--smoke-test"], [])  # its smoke values are the sweep's own
    _resume(["--smoke-test", "--epochs", "2"], ["--smoke-test", "--epochs", "2"])
    with pytest.raises(SweepInputError, match=r"these differ: --epochs 3 \(the sweep has 1\)\. Drop them"):
        _resume(["--smoke-test"], ["--smoke-test", "--epochs", "3"])
    with pytest.raises(SweepInputError, match=r"these differ: --smoke-test True \(the sweep has False\)\. Drop"):
        _resume([], ["--smoke-test"])  # named once: not each value it would fill in


def test_resume_with_preset_continues_the_presets_sweep_and_refuses_another():
    _resume(["--preset", "fig2a"], ["--preset", "fig2a"])
    _resume(["--preset", "fig2a"], [])
    with pytest.raises(SweepInputError, match=r"these differ: --preset table2 \(the sweep has fig2a\)\. Drop them"):
        _resume(["--preset", "fig2a"], ["--preset", "table2"])
    with pytest.raises(SweepInputError, match=r"these differ: --preset fig2a \(the sweep has None\)\. Drop them"):
        _resume([], ["--preset", "fig2a"])


def test_a_flag_typed_out_at_its_default_is_compared_with_the_sweeps_value():
    default = _parsed([])[2]["epochs"]
    _resume([], ["--epochs", str(default)])
    with pytest.raises(SweepInputError, match=rf"--epochs {default} \(the sweep has 5\)"):
        _resume(["--epochs", "5"], ["--epochs", str(default)])
