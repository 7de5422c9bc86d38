"""Settings are declared once (trainables/core/settings.py) and everything comes from the declaration:
these tests are generated from the registries (every method, every stage kind, the engine, every
preset), so a new setting, method or preset is tested with no edit here."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from sweeps.engine import resume, runner
from sweeps.engine.cli import ENGINE
from trainables.core.errors import SweepInputError
from trainables.core.method import METHODS, MethodInfo
from trainables.core.settings import (
    ALL,
    Auto,
    Choice,
    Flag,
    Float,
    Int,
    IntList,
    Names,
    Setting,
    add_to_parser,
    config_values,
    resolve,
)
from trainables.methods import all_presets, load
from trainables.stages.upstream import STAGES

ROOT = Path(__file__).resolve().parents[1]
load()
METHOD_NAMES = sorted(METHODS.names())


def _bad_cases():
    for method in METHOD_NAMES:
        for setting in METHODS.get(method).settings:
            for bad in setting.bad_values():
                yield pytest.param(method, setting, bad, id=f"{method}-{setting.name}-{bad}")


@pytest.fixture(scope="module")
def parsers():
    return {name: runner.parser_for(name) for name in METHOD_NAMES}


@pytest.mark.parametrize(("method", "setting", "bad"), list(_bad_cases()))
def test_a_bad_value_of_every_declared_setting_is_refused_naming_its_flag(parsers, method, setting, bad):
    with pytest.raises(SweepInputError, match=re.escape(setting.option)):
        parsers[method].parse_args([f"{setting.option}={bad}"])


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_every_method_declares_what_reports_and_docs_read(parsers, method):
    cls = METHODS.get(method)
    assert isinstance(cls.info, MethodInfo) and cls.info.citation.startswith("@")
    names = [s.name for s in cls.settings]
    assert len(names) == len(set(names)), names
    assert all(s.help for s in cls.settings), [s.name for s in cls.settings if not s.help]
    args = parsers[method].parse_args([])  # every default is a value its kind takes
    for setting in cls.settings:
        assert getattr(args, setting.name) == setting.parse(setting.default)
    for setting in cls.settings:
        assert setting.option in parsers[method].format_help()


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_the_smoke_values_and_every_preset_of_a_method_are_values_of_its_settings(method):
    cls = METHODS.get(method)
    declared = {s.name: s for s in (*cls.settings, *ENGINE)}
    for key, value in cls.smoke.items():
        declared[key].parse(value)
    for preset in (p for p in all_presets().values() if p.method == method):
        unknown = [flag for flag in preset.flags if flag not in declared]
        assert not unknown, f"preset {preset.name} sets undeclared {unknown}"
        for flag, value in preset.flags.items():
            declared[flag].parse(value)


def test_every_preset_belongs_to_a_registered_method():
    assert {p.method for p in all_presets().values()} <= set(METHOD_NAMES)


@pytest.mark.parametrize("stage", sorted(STAGES.names()))
def test_a_stage_kinds_settings_are_named_after_it_and_are_settings_of_a_method_that_runs_it(stage):
    kind = STAGES.get(stage)
    for setting in kind.settings:
        assert isinstance(setting, Setting) and setting.name.startswith(f"{stage}_"), setting.name
        # as the stage kind declares it, but for the condition a method adds (--improvement naming the stage)
        taken = [s.but(applies_when=()) for m in METHOD_NAMES for s in METHODS.get(m).settings]
        assert setting in taken, setting.name


def _scripts_with(setting: str) -> list[str]:
    scripts = []
    for path in sorted((ROOT / "sweeps").glob("*.py")):
        found = re.search(r'method="([\w-]+)"', path.read_text())
        if found and any(s.name == setting for s in METHODS.get(found.group(1)).settings):
            scripts.append(pytest.param(path.stem, found.group(1), id=path.stem))
    return scripts


@pytest.mark.parametrize(("script", "method"), _scripts_with("lr"))
def test_lr_minus_one_is_refused_by_every_sweep_script_with_one_message_before_anything_is_written(
    script, method, tmp_path, capsys
):
    storage = tmp_path / "runs"
    code = runner.main(["--lr", "-1", "--storage-path", str(storage)], method=method, prog=script)
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines()[-1] == "error: --lr must be positive, got -1"
    assert not storage.exists()


def test_every_sweep_script_is_a_registered_method():
    for path in sorted((ROOT / "sweeps").glob("*.py")):
        found = re.search(r'method="([\w-]+)"', path.read_text())
        if found:
            assert found.group(1) in METHOD_NAMES, path.name


# --- the kinds ---------------------------------------------------------------------------------
def test_kinds_parse_texts_and_typed_values_alike():
    assert IntList().parse("0-2,5") == IntList().parse([5, 0, 1, 2]) == [0, 1, 2, 5]
    assert IntList(word="all").parse("all") is None
    assert Names(known=lambda: ["a", "b"]).parse("b,a,b") == ["b", "a"]
    assert Names(empty=True).parse("none") == [] and Names(empty=True).to_config([]) == "none"
    assert Auto(Int(low=0)).parse("auto") == "auto" and Auto(Int(low=0)).parse("3") == 3
    assert Float(above=0).parse("2e-5") == 2e-5 and Float(above=0).parse(2e-5) == 2e-5
    assert Flag().parse("true") is True and Flag().parse(False) is False
    assert Choice(("x", "y")).parse("y") == "y"


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        (Int(low=1), "0", "must be a positive integer, got 0"),
        (Int(), str(2**63), "beyond the largest whole number"),
        (Float(above=0), "nan", "must be a finite number"),
        (Float(low=0, below=1), "1", "must be >= 0 and < 1, got 1"),
        (IntList(), "4-2", "runs backwards"),
        (IntList(high=9, what="seed"), "10", "a seed must be within 0..9"),
        (Names(known=lambda: ["a"]), "z", "unknown 'z'; known: a"),
        (Names(repeats=False), "m,m", "names m more than once"),
        (Choice(("x",)), "y", "must be one of x"),
    ],
)
def test_kinds_refuse_with_what_is_wrong(kind, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        kind.parse(value)


def test_a_per_objective_setting_takes_one_value_or_one_per_objective():
    batch = Setting("batch_size", Int(low=1), None, "sentences", per=("tsdae", "simcse"))
    assert batch.parse("64") == 64
    assert batch.parse("32,simcse=512") == {ALL: 32, "simcse": 512}
    assert batch.parse({"simcse": 512}) == {"simcse": 512}
    for bad, message in (
        ("ct=4", "'ct' is not one of tsdae, simcse"),
        ("simcse=0", "positive integer"),
        ("simcse=1,simcse=2", "gives simcse twice"),
    ):
        with pytest.raises(SweepInputError, match=re.escape(message)):
            batch.parse(bad)


def test_a_flag_and_its_old_name_set_one_setting_the_old_one_with_a_warning(capsys):
    setting = Setting("objectives", Names(), ["tsdae"], "objectives", flag="--objective", aliases=("--method",))
    parser = argparse.ArgumentParser()
    add_to_parser(parser, (setting,))
    assert resolve(parser.parse_args(["--objective", "mlm,ct"]), (setting,)).objectives == ["mlm", "ct"]
    assert capsys.readouterr().err == ""
    assert resolve(parser.parse_args(["--method", "simcse"]), (setting,)).objectives == ["simcse"]
    assert "warning: --method is now --objective" in capsys.readouterr().err


def test_the_trial_config_holds_every_declared_non_axis_setting_in_the_form_runs_recorded():
    declared = (
        Setting("seeds", IntList(), [0], "seeds", axis=True),
        Setting("eval_sets", Names(empty=True), [], "sets"),
        Setting("lr", Float(above=0), 2e-5, "lr"),
        Setting("stage_dir", Choice(("a",)), None, "not a trial's", config=False),
    )
    args = resolve(argparse.Namespace(seeds="0-2", eval_sets="stsb,sickr", lr="3e-5", stage_dir=None), declared)
    assert config_values(args, declared) == {"eval_sets": "stsb,sickr", "lr": 3e-5}


def test_the_docs_table_of_methods_is_the_one_the_methods_declare():
    from analysis.methods_table import BEGIN, END, section

    page = (ROOT / "docs" / "methods" / "index.md").read_text()
    assert BEGIN in page and END in page
    shown = page[page.index(BEGIN) : page.index(END) + len(END)]
    assert shown == section(), (
        "docs/methods/index.md's methods table is stale: regenerate it with python -m analysis docs"
    )
    for method in METHOD_NAMES:
        assert f"| `{method}` | {METHODS.get(method).info.display_name} |" in shown


def test_a_sweep_recorded_before_the_declarations_resumes_its_texts_read_as_the_same_values():
    """sweep.json of an older sweep holds the flags as texts (`"0,1"`, `"all"`) and TSDAE's objectives
    under `method`: they compare equal to today's typed values, and a value that really changed is refused."""
    parser = runner.parser_for("tmft")
    args = parser.parse_args(["--models", "a,b", "--seeds", "0,1"])
    defaults = vars(parser.parse_args([]))
    old = {"models": "a,b", "seeds": "0,1", "layers": "all", "lr": "2e-05", "eval_sets": "none"}
    resume.refuse_changed_flags(args, defaults, old, parser.settings)
    with pytest.raises(SweepInputError, match=r"--seeds 0,1,2 \(the sweep has 0,1\)"):
        resume.refuse_changed_flags(parser.parse_args(["--seeds", "0-2"]), defaults, old, parser.settings)
    tsdae = METHODS.get("tsdae")
    assert tsdae.renamed == {"method": "objectives"}
    saved = {tsdae.renamed.get(k, k): v for k, v in {"method": "tsdae,mlm", "seeds": "0"}.items()}
    typed = resolve(argparse.Namespace(**{**vars(runner.parser_for("tsdae").parse_args([])), **saved}), tsdae.settings)
    assert typed.objectives == ["tsdae", "mlm"] and typed.seeds == [0]


def test_every_shared_setting_is_a_setting_of_several_methods():
    from trainables.core.settings import SHARED

    for setting in SHARED:
        users = [m for m in METHOD_NAMES if any(s.name == setting.name for s in METHODS.get(m).settings)]
        assert len(users) >= 2, f"{setting.name} is declared as shared but only {users} take it"


def _engine_bad_cases():
    for setting in ENGINE:
        for bad in setting.bad_values():
            yield pytest.param(setting, bad, id=f"engine-{setting.name}-{bad}")


@pytest.mark.parametrize(("setting", "bad"), list(_engine_bad_cases()))
def test_a_bad_value_of_every_engine_setting_is_refused_naming_its_flag(parsers, setting, bad):
    """The engine's settings on every script alike (the empty value among them)."""
    for method in METHOD_NAMES:
        with pytest.raises(SweepInputError, match=re.escape(setting.option)):
            parsers[method].parse_args([f"{setting.option}={bad}"])


def test_every_declared_setting_refuses_an_empty_value_on_every_script(parsers):
    """`--steps ''` is not "unset": it is refused like any other bad value (a setting whose default is the
    empty text takes it)."""
    for method in METHOD_NAMES:
        for setting in (*METHODS.get(method).settings, *ENGINE):
            if isinstance(setting.kind, Flag) or setting.default == "":
                continue
            with pytest.raises(SweepInputError, match=re.escape(f"{setting.option} is empty")):
                parsers[method].parse_args([f"{setting.option}="])


def test_resource_shares_ray_cannot_schedule_are_refused(parsers):
    parser = parsers["tmft"]
    with pytest.raises(SweepInputError, match=r"--cpus-per-trial must be >= 0.0001, got 1e-9 \(Ray schedules"):
        parser.parse_args(["--cpus-per-trial", "1e-9"])
    with pytest.raises(SweepInputError, match=r"--gpus-per-trial must be 0 or at least 0.0001"):
        parser.parse_args(["--gpus-per-trial", "0.00001"])
    assert parser.parse_args(["--cpus-per-trial", "0.0001", "--gpus-per-trial", "0"]).cpus_per_trial == 0.0001


def test_none_with_other_names_is_refused_as_a_combination(parsers):
    with pytest.raises(SweepInputError, match="--eval-sets none means no name at all and cannot be combined with stsb"):
        parsers["tmft"].parse_args(["--eval-sets", "none,stsb"])
    assert parsers["tmft"].parse_args(["--eval-sets", "none"]).eval_sets == []


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_help_shows_each_default_once(parsers, method, capsys):
    with pytest.raises(SystemExit):
        parsers[method].parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in text
    for chunk in re.split(r"\s--?[a-z]", text):
        assert chunk.count("(default:") <= 1, chunk
