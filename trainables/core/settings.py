"""Settings: every value a sweep takes, declared once, typed.

A method (`Method.settings`), an upstream stage kind (`StageKind.settings`) and the engine (sweeps/engine/cli.py) each
declare their settings as a tuple of `Setting`s (conditions on other settings: trainables/core/setting_conditions.py):

    LR = Setting("lr", Float(above=0), 2e-5, "peak learning rate (AdamW)", source="ELECTRA paper §3.1")

From one declaration come: the command-line flag (`--lr`) with its `--help` line (the help, the allowed values and the
source of the default), the value `--preset` and `--smoke-test` set (by the setting's name), the parse and the check
(`resolve`: once, before anything starts, with one `SweepInputError` naming the flag), the trial config
(`config_values`: every setting with `config=True`, in the form runs have always recorded it), and so the MLflow
params, which are the trial config. Settings several methods share (models, seeds, layers, learning rate, batch size,
...) are declared once in `SHARED` below (evaluation sets: trainables/evaluation/sets.py `EVAL_SETS`); a method takes
them and changes what differs (`LR.but(default=3e-5, source=...)`).

Kinds parse a command-line text or an already typed value (a preset's, a resumed sweep's) to the typed value, or raise
`ValueError` with what is wrong: `Int`, `Float`, `Choice`, `Flag`, `Text`, `IntList` (`0,1,2`, `0-4`, optionally a
word such as `all`; at least `low`), `FloatList` (`1e-5,3e-5`, each within a `Float`'s bounds), `Names` (a
comma-separated list, optionally checked against a registry), `Auto` (a word such as `auto`, or a value of another
kind). A setting with `per` (objectives or variants) also takes `OBJECTIVE=VALUE[,...]` (`--batch-size simcse=512`):
its typed value is then a dict, with `*` for the value of every other.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from trainables.core.errors import SweepInputError

INT64_MAX = 2**63 - 1  # Ray's loggers and numpy hold whole numbers in 64 bits
SEED_MAX = 2**32 - 1  # numpy's and torch's seeds
ALL = "*"  # the key of a per-objective value that holds for every objective not named
MAX_LIST = 100_000  # values one range of a list may hold (a grid that size is a typo)


class Kind:
    """How a setting's values are parsed, described and written into a trial config."""

    def parse(self, value):
        raise NotImplementedError

    def describe(self) -> str:
        return ""

    def bad_values(self) -> list[str]:
        """Values the kind refuses (for tests generated from the declarations)."""
        return []

    def to_config(self, value):
        return value


@dataclass(frozen=True)
class Int(Kind):
    low: int | None = None
    high: int | None = None

    def parse(self, value):
        if isinstance(value, bool) or (isinstance(value, float) and value != int(value)):
            raise ValueError(f"must be a whole number, got {value!r}")
        try:
            number = int(value) if not isinstance(value, str) else int(value.strip())
        except ValueError:
            raise ValueError(f"must be a whole number, got {value!r}") from None
        if abs(number) > INT64_MAX:
            raise ValueError(
                f"{number} is beyond the largest whole number Ray and numpy hold ({INT64_MAX}); pass a smaller value"
            )
        if self.low is not None and number < self.low:
            raise ValueError(f"must be {self._range()}, got {number}")
        if self.high is not None and number > self.high:
            raise ValueError(f"must be {self._range()}, got {number}")
        return number

    def _range(self) -> str:
        if self.low == 1 and self.high is None:
            return "a positive integer"
        if self.low == 0 and self.high is None:
            return "0 or more"
        if self.high is None:
            return f"at least {self.low}"
        return f"within {self.low}..{self.high}" if self.low is not None else f"at most {self.high}"

    def describe(self) -> str:
        return "an integer" if self.low is None and self.high is None else self._range()

    def bad_values(self) -> list[str]:
        return ["x", *([str(self.low - 1)] if self.low is not None else [])]


@dataclass(frozen=True)
class Float(Kind):
    above: float | None = None  # strictly greater than
    low: float | None = None  # at least
    below: float | None = None  # strictly less than
    high: float | None = None  # at most
    why: str = ""  # what the bounds come from (e.g. "Ray's resource precision"), said when a value is refused

    def parse(self, value):
        if isinstance(value, bool):
            raise ValueError(f"must be a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"must be a number, got {value!r}") from None
        if not math.isfinite(number):
            raise ValueError(f"must be a finite number, got {value}")
        if (
            (self.above is not None and not number > self.above)
            or (self.low is not None and number < self.low)
            or (self.below is not None and not number < self.below)
            or (self.high is not None and number > self.high)
        ):
            raise ValueError(f"must be {self.describe()}, got {value}" + (f" ({self.why})" if self.why else ""))
        return number

    def describe(self) -> str:
        if self.above == 0 and self.low is None and self.below is None and self.high is None:
            return "positive"
        parts = []
        if self.above is not None:
            parts.append(f"> {self.above:g}")
        if self.low is not None:
            parts.append(f">= {self.low:g}")
        if self.below is not None:
            parts.append(f"< {self.below:g}")
        if self.high is not None:
            parts.append(f"<= {self.high:g}")
        return " and ".join(parts) or "a number"

    def bad_values(self) -> list[str]:
        bad = ["x", "nan"]
        if self.above is not None:
            bad.append(f"{self.above:g}")
        if self.low is not None:
            bad.append(f"{self.low / 10 if self.low > 0 else self.low - 1:g}")
        if self.high is not None:
            bad.append(f"{self.high + 1:g}")
        return bad


@dataclass(frozen=True)
class Choice(Kind):
    values: tuple

    def parse(self, value):
        text = str(value).strip()
        for allowed in self.values:  # `2` on the command line is the choice 2
            if value == allowed or text == str(allowed):
                return allowed
        raise ValueError(f"must be one of {', '.join(map(str, self.values))}; got {value!r}")

    def describe(self) -> str:
        return "one of " + ", ".join(map(str, self.values))

    def bad_values(self) -> list[str]:
        return ["no-such-value"]


@dataclass(frozen=True)
class Flag(Kind):
    """On or off (`--flag` sets it); a preset or a saved sweep may give True/False."""

    def parse(self, value):
        if isinstance(value, str):
            if value.strip().lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"is on or off (true or false), got {value!r}")
            return value.strip().lower() in ("true", "1")
        return bool(value)


@dataclass(frozen=True)
class Text(Kind):
    def parse(self, value):
        return str(value)


@dataclass(frozen=True)
class IntList(Kind):
    """'0,1,2' or '0-4' (or a mix) -> sorted unique integers >= `low` (0); `word` (e.g. 'all') -> None."""

    word: str | None = None
    low: int = 0
    high: int = INT64_MAX
    what: str = "value"  # what one entry is, for the message on one beyond `high`
    why: str = "the largest whole number Ray and numpy hold"

    def parse(self, value):
        if self.word and (value is None or (isinstance(value, str) and value.strip().lower() == self.word)):
            return None
        if isinstance(value, (list, tuple)):
            values = list(value)
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                raise ValueError(f"must be integers, got {value!r}")
        else:
            values = []
            for part in (p.strip() for p in str(value).split(",")):
                if not part:
                    continue
                try:
                    low, high = (int(v) for v in part.split("-", 1)) if "-" in part[1:] else (int(part), int(part))
                except ValueError:
                    raise ValueError(
                        f"{value!r} is not a comma-separated list of integers (e.g. 0,1,2 or 0-4"
                        + (f", or {self.word}" if self.word else "")
                        + ")"
                    ) from None
                if high < low:
                    raise ValueError(f"{value!r}: the range {part} runs backwards; write {high}-{low}")
                if high - low >= MAX_LIST:
                    raise ValueError(f"{value!r}: the range {part} holds more than {MAX_LIST} values")
                values.extend(range(low, high + 1))
        if not values:
            raise ValueError("is empty")
        if any(v < 0 for v in values):
            raise ValueError(f"{value!r} holds a negative value")
        under = [v for v in values if v < self.low]
        if under:
            raise ValueError(f"holds {under[0]}: a {self.what} must be at least {self.low}")
        beyond = [v for v in values if v > self.high]
        if beyond:
            raise ValueError(f"holds {beyond[0]}: a {self.what} must be within 0..{self.high} ({self.why})")
        return sorted(set(values))

    def describe(self) -> str:
        least = f", each at least {self.low}" if self.low > 0 else ""
        return "comma-separated integers or ranges (0,1,2 or 0-4)" + least + (f", or {self.word}" if self.word else "")

    def bad_values(self) -> list[str]:
        return ["x", "4-2", "-1", *([str(self.low - 1)] if self.low > 0 else [])]

    def to_config(self, value):
        return "all" if value is None else ",".join(map(str, value))


@dataclass(frozen=True)
class FloatList(Kind):
    """'1e-5,3e-5' -> the numbers in the order given, once each, each within a `Float`'s bounds (`each`)."""

    each: Float = Float()

    def parse(self, value):
        parts = list(value) if isinstance(value, (list, tuple)) else [p for p in str(value).split(",") if p.strip()]
        if not parts:
            raise ValueError("is empty")
        try:
            numbers = [self.each.parse(part) for part in parts]
        except ValueError as error:
            raise ValueError(f"{value!r}: {error}") from None
        return list(dict.fromkeys(numbers))

    def describe(self) -> str:
        return f"comma-separated numbers, each {self.each.describe()}"

    def bad_values(self) -> list[str]:
        return ["", *(f"1,{bad}" for bad in self.each.bad_values())]

    def to_config(self, value):
        return ",".join(f"{v:g}" for v in value)


@dataclass(frozen=True)
class Names(Kind):
    """A comma-separated list of names (kept in order, once each), each one of `known()` when given;
    `none` (when `empty` is set): the empty list."""

    known: Callable[[], list[str]] | None = None
    empty: bool = False
    repeats: bool = True  # False: a name given twice is refused

    def parse(self, value):
        if isinstance(value, (list, tuple)):
            names = [str(n).strip() for n in value]
        else:
            text = str(value).strip()
            if self.empty and text.lower() in ("", "none"):
                return []
            names = [n.strip() for n in text.split(",") if n.strip()]
        if not names and not self.empty:
            raise ValueError("is empty")
        if self.empty and len(names) > 1 and "none" in (n.lower() for n in names):
            others = ",".join(n for n in names if n.lower() != "none")
            raise ValueError(
                f"none means no name at all and cannot be combined with {others}; give none alone or {others}"
            )
        if not self.repeats:
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise ValueError(f"names {', '.join(repeated)} more than once")
        if self.known is not None:
            known = list(self.known())
            unknown = [n for n in names if n not in known]
            if unknown:
                raise ValueError(f"unknown {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
        return list(dict.fromkeys(names))

    def describe(self) -> str:
        if self.known is None:
            return "or none" if self.empty else ""
        return "comma-separated, of " + ", ".join(self.known()) + (", or none" if self.empty else "")

    def bad_values(self) -> list[str]:
        return ["no-such-name"] if self.known is not None else ([] if self.empty else [","])

    def to_config(self, value):
        return ",".join(value) if value else "none"


@dataclass(frozen=True)
class Auto(Kind):
    """`word` (e.g. 'auto') or a value of `kind`."""

    kind: Kind
    word: str = "auto"

    def parse(self, value):
        if isinstance(value, str) and value.strip().lower() == self.word:
            return self.word
        try:
            return self.kind.parse(value)
        except ValueError as error:
            raise ValueError(f"{error} (or {self.word})") from None

    def describe(self) -> str:
        return f"{self.word}, or {self.kind.describe() or 'a value'}"

    def bad_values(self) -> list[str]:
        return self.kind.bad_values()

    def to_config(self, value):
        return value if value == self.word else self.kind.to_config(value)


@dataclass(frozen=True)
class Setting:
    """One value a sweep takes.

    name:    the setting's name: the trial-config key, the MLflow param and (dashed) the flag
    kind:    how its values are parsed and checked (a `Kind`)
    default: the typed default (None: unset, e.g. "the model's own"); `source` says where it comes from
    help:    one line for --help; group: its --help section
    axis:    a sweep axis (models, layers, seeds, ...): the grid varies it, the trial config holds one value
    config:  whether the trial config (so MLflow) carries it as it is (axes and engine settings do not)
    flag:    the command-line flag (default `--<name with dashes>`); `aliases`: old flags, working with a warning
    per:     objectives (or variants) a value may be given for alone: `OBJECTIVE=VALUE[,...]`
    const:   the value of a flag given without one (e.g. `--resume` alone); MISSING: a value is required
    trial:   an engine setting every trial's config carries, as the trial reads it (sweeps/engine/plan.py)
    result:  whether its value can change a trial's result: if so, it is part of the trial's key (trial_keys.py)
    """

    name: str
    kind: Kind
    default: Any = None
    help: str = ""
    group: str = "training"
    source: str = "code"
    axis: bool = False
    config: bool = True
    flag: str = ""
    aliases: tuple[str, ...] = ()
    per: tuple[str, ...] = ()
    const: Any = field(default=None)
    metavar: str | None = None
    trial: bool = False
    applies_when: tuple = ()  # setting_conditions.When: the conditions it does anything under
    warn_alone: bool = False  # given without them: a warning, not a refusal
    result: bool = True

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def but(self, **changes) -> Setting:
        """This setting with other fields (a method's own default, help or source)."""
        return replace(self, **changes)

    def parse(self, value):
        """The typed value of `value` (a text from the command line or a typed value); SweepInputError
        naming the flag when it is not one."""
        if value is None and (self.default is None or isinstance(self.kind, Flag)):
            return None if not isinstance(self.kind, Flag) else False
        if isinstance(value, str) and not value.strip() and value != self.default:
            raise SweepInputError(f"{self.option} is empty; give a value{self._empty_hint()} or leave the flag out")
        try:
            if self.per and not isinstance(self.kind, Flag):
                return self._parse_per(value)
            return self.kind.parse(value)
        except ValueError as error:
            raise SweepInputError(f"{self.option} {error}") from None

    def _empty_hint(self) -> str:
        if isinstance(self.kind, Names) and self.kind.empty:
            return " (none for no names)"
        return f" ({self.kind.describe()})" if self.kind.describe() and not isinstance(self.kind, Text) else ""

    def _parse_per(self, value):
        if isinstance(value, dict):
            parts = [(name, v) for name, v in value.items()]
        else:
            texts = [p.strip() for p in str(value).split(",") if p.strip()] if isinstance(value, str) else [value]
            if len(texts) == 1 and not (isinstance(texts[0], str) and "=" in texts[0]):
                return self.kind.parse(texts[0])
            parts = []
            for text in texts:
                name, _, each = str(text).rpartition("=")
                parts.append((name.strip() or ALL, each))
        out = {}
        for name, each in parts:
            if name != ALL and name not in self.per:
                raise ValueError(
                    f"{name}={each}: {name!r} is not one of {', '.join(self.per)}; write VALUE for every one or "
                    "NAME=VALUE for some"
                )
            if name in out:
                raise ValueError(f"gives {name if name != ALL else 'every one'} twice")
            out[name] = self.kind.parse(each)
        return out

    def help_text(self) -> str:
        parts = [self.help] if self.help else []
        allowed = self.kind.describe()
        if allowed and not isinstance(self.kind, (Flag, Text)):
            parts.append(f"[{allowed}]")
        if self.per:
            parts.append(f"(VALUE for every one, or NAME=VALUE[,...] for some of {', '.join(self.per)})")
        if not isinstance(self.kind, Flag) and "default:" not in self.help:  # said once: in words, else the value
            shown = self.kind.to_config(self.default) if isinstance(self.default, (list, tuple)) else self.default
            shown = "not set" if shown is None else "empty" if shown == "" else shown
            parts.append(f"(default: {shown}" + (f"; {self.source})" if self.source != "code" else ")"))
        elif not isinstance(self.kind, Flag) and self.source != "code":
            parts.append(f"({self.source})")
        elif self.source != "code":
            parts.append(f"({self.source})")
        return " ".join(parts).replace("%", "%%")

    def bad_values(self) -> list[str]:
        bad = self.kind.bad_values()
        if self.per and bad:
            bad = [*bad, f"no-such-objective={bad[0]}"]
        if not isinstance(self.kind, Flag) and self.default != "":  # an empty value is refused like any bad one
            bad = [*bad, ""]
        return bad

    def to_config(self, value):
        if isinstance(value, dict):
            return {k: self.kind.to_config(v) for k, v in value.items()}
        return self.kind.to_config(value)


class _Alias(argparse.Action):
    """An old flag: sets the setting's value, with a warning naming the flag that replaces it."""

    def __call__(self, parser, namespace, values, option_string=None):
        setting = self.default_setting
        print(f"warning: {option_string} is now {setting.option}; {option_string} still works", file=sys.stderr)
        setattr(namespace, self.dest, True if isinstance(setting.kind, Flag) else values)


def add_to_parser(parser: argparse.ArgumentParser, settings, groups: dict | None = None) -> None:
    """One flag per setting, in argparse groups by `Setting.group`. Values stay as given (texts);
    `resolve` parses and checks them once."""
    groups = {} if groups is None else groups
    for setting in settings:
        if setting.group not in groups:
            groups[setting.group] = parser.add_argument_group(setting.group)
        group = groups[setting.group]
        default = False if isinstance(setting.kind, Flag) else setting.default
        if isinstance(setting.kind, Flag):
            group.add_argument(
                setting.option, dest=setting.name, action="store_true", default=default, help=setting.help_text()
            )
        elif setting.const is not None:
            group.add_argument(
                setting.option,
                dest=setting.name,
                nargs="?",
                const=setting.const,
                default=default,
                metavar=setting.metavar,
                help=setting.help_text(),
            )
        else:
            group.add_argument(
                setting.option, dest=setting.name, default=default, metavar=setting.metavar, help=setting.help_text()
            )
        for alias in setting.aliases:
            action = group.add_argument(
                alias,
                dest=setting.name,
                action=_Alias,
                nargs=0 if isinstance(setting.kind, Flag) else None,
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
            )
            action.default_setting = setting


def resolve(args: argparse.Namespace, settings) -> argparse.Namespace:
    """Every declared setting of `args` parsed and checked, in place (SweepInputError on the first bad
    value, naming its flag); returns `args`."""
    for setting in settings:
        if hasattr(args, setting.name):
            setattr(args, setting.name, setting.parse(getattr(args, setting.name)))
    return args


def config_values(args: argparse.Namespace, settings) -> dict:
    """The trial-config entries of the settings that go into it (`config=True`, not an axis)."""
    return {
        s.name: s.to_config(getattr(args, s.name))
        for s in settings
        if s.config and not s.axis and hasattr(args, s.name)
    }


def shown(value) -> str:
    """A setting's value as a flag takes it, for messages: a list comma-separated."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def by_name(settings) -> dict[str, Setting]:
    return {s.name: s for s in settings}


def merge(*groups) -> tuple[Setting, ...]:
    """Settings of several declarations in order; a later one of the same name replaces an earlier."""
    out: dict[str, Setting] = {}
    for group in groups:
        for setting in group:
            out[setting.name] = setting
    return tuple(out.values())


def value_for(value, objective: str):
    """A per-objective setting's value for `objective`: its own, else the one for every objective,
    else None (the objective's own default)."""
    if isinstance(value, dict):
        return value.get(objective, value.get(ALL))
    return value


MODELS = Setting(
    "models",
    Names(repeats=False),
    ["sentence-transformers/all-MiniLM-L6-v2"],
    "comma-separated hub ids, local model folders, or runs:/<run id> (a trial's best-dev checkpoint)",
    group="what to sweep",
    axis=True,
)
SEEDS = Setting(
    "seeds",
    IntList(high=SEED_MAX, what="seed", why="numpy's and torch's range"),
    [0, 1, 2, 3, 4],
    "comma-separated seeds, or a range like 0-4",
    group="what to sweep",
    axis=True,
)
LAYERS = Setting(
    "layers",
    IntList(word="all"),
    None,
    "'all' (0..L of each model) or comma-separated layers, e.g. 0,3,6; 0 = the embedding output",
    group="what to sweep",
    axis=True,
)
EPOCHS = Setting("epochs", Int(low=0), 10, "training epochs")
LR = Setting("lr", Float(above=0), 2e-5, "peak learning rate (AdamW)")
BATCH_SIZE = Setting("batch_size", Int(low=1), 32, "training pairs or sentences per step")
EVAL_BATCH_SIZE = Setting("eval_batch_size", Int(low=1), 64, "sentences per evaluation forward pass")
WEIGHT_DECAY = Setting("weight_decay", Float(low=0), 0.01, "AdamW weight decay (not on LayerNorm and bias)")
WARMUP_RATIO = Setting(
    "warmup_ratio", Float(low=0, below=1), 0.1, "linear warm-up share of all steps, then linear decay"
)
POOLING = Setting("pooling", Choice(("mean", "cls")), "mean", "how token vectors become a sentence vector")
MAX_LENGTH = Setting("max_length", Int(low=2), None, "tokens per sentence (default: the model's own limit)")
MAX_TRAIN_SAMPLES = Setting(
    "max_train_samples", Int(low=1), None, "train on a deterministic subset of this many examples"
)
MAX_EVAL_SAMPLES = Setting(
    "max_eval_samples", Int(low=1), None, "evaluate on a deterministic subset of dev and test (quick runs only)"
)
SHARED = (
    MODELS,
    SEEDS,
    LAYERS,
    EPOCHS,
    LR,
    BATCH_SIZE,
    EVAL_BATCH_SIZE,
    WEIGHT_DECAY,
    WARMUP_RATIO,
    POOLING,
    MAX_LENGTH,
    MAX_TRAIN_SAMPLES,
    MAX_EVAL_SAMPLES,
)
