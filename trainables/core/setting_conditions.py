"""Settings that apply only under another setting: a `Setting`'s `applies_when` holds `When`s, and
`check_applies` refuses such a setting given on the command line without its conditions (or warns, where
the setting has `warn_alone`: the paper's code accepted it too), before anything starts."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from trainables.core.errors import SweepInputError
from trainables.core.settings import Flag, Setting, by_name, shown


@dataclass(frozen=True)
class When:
    """A condition a setting applies under: another setting's (`setting`, by name) value.

    values: the other's value is one of these (a list value: holds one of these); `not_values`: is none of these;
    neither: the other is on (a flag) or set; `unset`: the other is not set (None or off)."""

    setting: str
    values: tuple = ()
    not_values: tuple = ()
    unset: bool = False

    def holds(self, value) -> bool:
        held = value if isinstance(value, (list, tuple)) else [value]
        if self.values:
            return any(v in self.values for v in held)
        if self.not_values:
            return not any(v in self.not_values for v in held)
        present = value is not None and value is not False and value != [] and value != ""
        return not present if self.unset else present

    def says(self, other: Setting) -> str:
        """The condition in words: `with --seeds-by-need`, `when --objective holds tsdae`."""
        if self.values:
            verb = "holds" if isinstance(other.default, (list, tuple)) else "is"
            return f"when {other.option} {verb} {' or '.join(map(str, self.values))}"
        if self.not_values:
            return f"when {other.option} is not {' or '.join(map(str, self.not_values))}"
        return f"{'without' if self.unset else 'with'} {other.option}"

    def fix(self, other: Setting) -> str:
        if self.values:
            if isinstance(other.default, (list, tuple)):
                return f"add {self.values[0]} to {other.option}"
            return f"pass {other.option} {self.values[0]}"
        if self.not_values:
            return f"give {other.option} another value"
        return f"{'leave out' if self.unset else 'add'} {other.option}"


def check_applies(args: argparse.Namespace, settings, given: set) -> list[str]:
    """Each setting given on the command line (`given`: its name) whose `applies_when` does not hold for `args`
    (the values the sweep runs with): a `SweepInputError` naming both flags and the fix, or, for a setting with
    `warn_alone`, a warning printed to stderr. Returns the warnings."""
    declared = by_name(settings)
    warnings = []
    for setting in settings:
        if setting.name not in given:
            continue
        for condition in setting.applies_when:
            other = declared[condition.setting]
            value = getattr(args, other.name, other.default)
            if condition.holds(value):
                continue
            now = "off" if isinstance(other.kind, Flag) else "not set" if value is None else shown(value)
            message = (
                f"{setting.option} applies only {condition.says(other)} (here {other.option}: {now}); "
                f"{condition.fix(other)}, or leave {setting.option} out"
            )
            if not setting.warn_alone:
                raise SweepInputError(message)
            print(f"warning: {message} (it has no effect here)", file=sys.stderr)
            warnings.append(message)
    return warnings
