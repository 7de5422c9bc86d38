"""A setting that works only under another one (`Setting.applies_when`) is refused, one line naming both flags,
when given without it (or warned about, `warn_alone`): generated from every sweep script's settings, so a new
conditional setting is covered without a new test; and the cases of issue 56 run as a user runs them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sweeps.engine import presets
from sweeps.engine.cli import GpuShare, given_flags
from sweeps.engine.plan import check_sweep
from sweeps.engine.runner import parser_for
from sweeps.engine.scripts import sweep_scripts
from trainables.core.errors import SweepInputError
from trainables.core.paths import PROJECT_ROOT
from trainables.core.setting_conditions import When, check_applies
from trainables.core.settings import Auto, Choice, Flag, Float, FloatList, Int, IntList, Names, Text, by_name
from trainables.methods import get_method


def example(kind) -> str:
    """A value `kind` accepts (for a setting given only to be refused)."""
    if isinstance(kind, Choice):
        return str(kind.values[0])
    if isinstance(kind, Names):
        return kind.known()[0] if kind.known else "x"
    if isinstance(kind, Int):
        return str(kind.low if kind.low is not None else 1)
    if isinstance(kind, Float):
        low = kind.low if kind.low is not None else (kind.above + 1 if kind.above is not None else 1.0)
        return f"{low:g}"
    if isinstance(kind, IntList):
        return str(kind.low)
    if isinstance(kind, FloatList):
        return example(kind.each)
    if isinstance(kind, Auto):
        return kind.word
    if isinstance(kind, GpuShare):
        return "1"
    if isinstance(kind, Text):
        return "x"
    raise AssertionError(f"no example value for {kind!r}: teach example() this kind")


def giving(setting, value=None) -> list[str]:
    if isinstance(setting.kind, Flag):
        return [setting.option]
    return [f"{setting.option}={value if value is not None else example(setting.kind)}"]


def off(condition: When, other) -> list[str]:
    """Flags that make `condition` fail."""
    if condition.values:
        kind = other.kind.kind if isinstance(other.kind, Auto) else other.kind
        if isinstance(other.kind, Auto) and condition.values == (other.kind.word,):
            return giving(other, example(kind))
        choices = kind.values if isinstance(kind, Choice) else kind.known()
        return giving(other, next(str(c) for c in choices if c not in condition.values))
    if condition.not_values:
        return giving(other, condition.not_values[0])
    return giving(other) if condition.unset else []  # a flag or value left out is off


def on(condition: When, other) -> list[str]:
    """Flags that make `condition` hold (nothing when its default does)."""
    if condition.holds(other.default if not isinstance(other.kind, Flag) else False):
        return []
    if condition.values:
        return giving(other, condition.values[0])
    return giving(other)


def conditional_cases():
    for script, method in sweep_scripts().items():
        parser = parser_for(method, script)
        for setting in parser.settings:
            for index, condition in enumerate(setting.applies_when):
                yield pytest.param(script, method, setting.name, index, id=f"{script}:{setting.option}:{index}")


CASES = list(conditional_cases())


def test_the_scripts_declare_conditional_settings():
    names = {case.values[2] for case in CASES}  # the three of issue 56 among them
    assert {"noise", "instance_type", "seed_ci_width"} <= names, names


@pytest.mark.parametrize("script, method, name, index", CASES)
def test_a_conditional_setting_given_without_its_condition_is_refused(script, method, name, index, tmp_path):
    parser = parser_for(method, script)
    declared = by_name(parser.settings)
    setting = declared[name]
    conditions = setting.applies_when
    assert all(c.setting in declared for c in conditions), f"{setting.option}: a condition names no setting"
    condition, other = conditions[index], declared[conditions[index].setting]
    argv = [*giving(setting), *off(condition, other), "--storage-path", str(tmp_path / "runs")]
    for j, each in enumerate(conditions):
        if j != index:
            argv += on(each, declared[each.setting])
    args = parser.parse_args(argv)
    assert not condition.holds(getattr(args, other.name)), argv
    given = given_flags(parser, argv)
    args = presets.apply(parser, argv, args, get_method(method), given)
    if setting.warn_alone:
        warnings = check_applies(args, parser.settings, given)
        assert len(warnings) == 1 and setting.option in warnings[0] and other.option in warnings[0]
    else:
        with pytest.raises(SweepInputError) as refused:  # as the script checks it, before anything is written
            check_sweep(args, method, script, given)
        assert "applies only" in str(refused.value) and "\n" not in str(refused.value), refused.value
        with pytest.raises(SweepInputError) as refused:  # this setting's own refusal (a condition's flag may be too)
            check_applies(args, parser.settings, {setting.name})
        message = str(refused.value)
        assert setting.option in message and other.option in message, message
    assert not (tmp_path / "runs").exists()

    # with every condition met, the same setting passes this check
    held = [*giving(setting), "--storage-path", str(tmp_path / "runs")]
    for each in conditions:
        held += on(each, declared[each.setting])
    given = given_flags(parser, held)
    assert check_applies(parser.parse_args(held), parser.settings, given) == []


def test_a_setting_not_given_is_never_refused_for_its_condition():
    parser = parser_for("tsdae", "tsdae")
    args = parser.parse_args(["--objective", "simcse"])  # --noise keeps its default, unused by simcse
    assert check_applies(args, parser.settings, given_flags(parser, ["--objective", "simcse"])) == []


def _script(tmp_path, data_dir, script, *flags):
    storage = tmp_path / "runs"
    command = [sys.executable, str(PROJECT_ROOT / "sweeps" / f"{script}.py"), *flags]
    command += ["--storage-path", str(storage), "--data-dir", str(data_dir)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    return done.returncode, done.stderr.strip(), storage


@pytest.mark.sweep
@pytest.mark.parametrize(
    "script, flags, expected",
    [
        ("tsdae", ["--objective", "simcse", "--noise", "swap"], "--noise applies only when --objective holds tsdae"),
        ("electra_layers", ["--instance-type", "g5.12xlarge"], "--instance-type applies only with --dry-run"),
        ("electra_layers", ["--seed-ci-width", "5"], "--seed-ci-width applies only with --seeds-by-need"),
    ],
)
def test_issue_56_cases_refused_by_the_real_scripts(script, flags, expected, tmp_path, data_dir):
    code, err, storage = _script(tmp_path, data_dir, script, "--smoke-test", *flags)
    assert code == 2 and len(err.splitlines()) == 1 and expected in err, err
    assert not storage.exists()


def test_local_cluster_refuses_up_flags_on_down(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "sweeps.local_cluster", "down", "--max-workers", "2", "--temp-dir", str(tmp_path / "t")],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
    )
    assert done.returncode == 2 and done.stderr.strip() == (
        "error: --max-workers applies only to `up` (it sizes the cluster up starts); leave it out"
    )
    assert not (tmp_path / "t").exists()
