"""Names that say what they hold: a method package is named after the method it registers, and a script's
`--help` names the presets that script runs (a preset of another script is refused with its command)."""

from __future__ import annotations

import pytest

from sweeps.engine.runner import main, parser_for
from trainables.core.method import METHODS
from trainables.methods import all_presets, load


def test_each_method_lives_in_the_package_of_its_name_or_beside_the_method_it_varies():
    load()
    packages = {METHODS.get(name).__module__.split(".")[2]: name for name in METHODS.names()}
    for name in METHODS.names():
        package = METHODS.get(name).__module__.split(".")[2]
        assert package == name.replace("-", "_") or package in packages, (name, package)
    assert METHODS.get("evaluate").__module__ == "trainables.methods.evaluate.method"


@pytest.mark.parametrize("method", ["evaluate", "sed", "tmft"])
def test_help_lists_the_presets_of_its_own_script_only(method, monkeypatch):
    monkeypatch.setenv("COLUMNS", "10000")  # one line per flag: argparse wraps names at their hyphens
    own = sorted(name for name, preset in all_presets().items() if preset.method == method)
    others = sorted(name for name, preset in all_presets().items() if preset.method != method)
    line = next(x for x in parser_for(method).format_help().splitlines() if x.strip().startswith("--preset NAME"))
    described = line.rpartition("[")[2]  # what the kind says it takes: [one of ...] (default: not set)
    assert all(name in described for name in own)
    assert not any(f" {name}," in described or f" {name}]" in described for name in others)
    if not own:
        assert "this script runs none" in described


def test_a_preset_of_another_script_and_an_unknown_name_are_refused_naming_what_runs(capsys):
    assert main(["--preset", "fig2a", "--dry-run"], method="evaluate", prog="evaluate") == 2
    assert "python sweeps/electra_layers.py --preset fig2a" in capsys.readouterr().err
    assert main(["--preset", "nope", "--dry-run"], method="sed", prog="sed") == 2
    err = capsys.readouterr().err
    assert "'nope' is no paper's preset; this script runs sed-table1, sed-table3" in err and "fig2a" not in err
