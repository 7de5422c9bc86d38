"""Presets on the command line: `--preset NAME` runs the grid of one table or figure of a paper
(a method's `presets`, trainables/core/method.py `Preset`), `--list-presets` prints the presets of
every paper (every registered method's, grouped by `Preset.paper`, the script's own paper first),
under the display name and description of the methods that run them (`MethodInfo`), with the script
that runs each, what it reproduces, its trial count and its GPU-hours estimate (the running method's
`estimate`, from public configs: no model is loaded). Every sweep script takes both flags; its `--help`
names the presets it runs, and a preset of another script is refused with the command that runs it.

A preset's flags become the parser's defaults, so a flag given on the command line still wins
(e.g. `--preset table2 --seeds 0` for one seed of Table 2's grid). `--smoke-test`'s values (the
method's `smoke`) are applied the same way, over the preset's. The preset's name is recorded
on the sweep's runs (param `preset`); the report looks it up to name the table or figure and to
put the paper's numbers beside the sweep's (analysis/published.py).

A flag given beside a preset may take part of its grid (a subset of a comma-separated list, e.g.
`--corpus twitterpara` of the four domains) or other models, seeds and layers (the report names the
models that differ). A flag that changes what the preset reproduces (`--preset fig5 --task stsb`:
Figure 5 is MRPC) is warned about, and the runs do not carry the preset's name.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from trainables.core.errors import SweepInputError
from trainables.core.method import Estimate, Method, Preset
from trainables.core.settings import Choice, Flag, Setting, shown
from trainables.methods import all_presets, get_method


@dataclass(frozen=True)
class PresetName(Choice):
    """Any paper's preset (one of another script is refused by `apply`, with the command that runs it); `--help`
    names only the presets of the script's own method, `own`."""

    own: tuple = ()

    def parse(self, value):
        try:
            return super().parse(value)
        except ValueError:
            runs = ", ".join(self.own) or "none"
            raise ValueError(
                f"{value!r} is no paper's preset; this script runs {runs} (--list-presets names every paper's preset "
                "and the script that runs it)"
            ) from None

    def describe(self) -> str:
        if not self.own:
            return "this script runs none; --list-presets names every paper's preset and its script"
        return "one of " + ", ".join(self.own)


def settings(method: type[Method]) -> tuple[Setting, ...]:
    """`--preset` (a paper's preset; `--help` lists those `method` runs) and `--list-presets`, as settings of
    every script."""
    group = "presets (the papers' tables and figures)"
    every = tuple(sorted(all_presets(), key=_order))
    return (
        Setting(
            "preset",
            PresetName(every, own=tuple(name for name in every if all_presets()[name].method == method.name)),
            None,
            "run the grid of one table or figure of a paper; flags given beside it override it (--list-presets "
            "describes each and names the script that runs it)",
            group=group,
            config=False,
            metavar="NAME",
        ),
        Setting(
            "list_presets",
            Flag(),
            False,
            "print every paper's presets with their script, what they reproduce, trials and GPU-hours, and exit",
            group=group,
            config=False,
        ),
    )


# Flags a preset sets that another value does not make another table: the models (and the sources,
# teachers and student they stand for), seeds and layers; the report names the models that differ.
FREE_FLAGS = ("models", "sources", "teachers", "student", "seeds", "layers")


def apply(
    parser: argparse.ArgumentParser, argv, args: argparse.Namespace, method: type[Method], given: set | None = None
) -> argparse.Namespace:
    """`args` parsed again with the preset's flags, then with `--smoke-test` the method's `smoke` values, as
    the parser's defaults: a flag given on the command line wins over both (`--smoke-test --steps 0` is
    checked as `--steps 0`). The same `args` without a preset or a smoke test. `given`: the flags on the
    command line; one that changes what the preset reproduces is warned about and the preset's name dropped."""
    values = {}
    name = getattr(args, "preset", None)
    if name:
        preset = all_presets()[name]
        if preset.method != method.name:
            raise SweepInputError(
                f"--preset {name} ({preset.reproduces}) runs with {preset.script}: "
                f"python {preset.script} --preset {name}"
            )
        unknown = [flag for flag in preset.flags if not hasattr(args, flag)]
        if unknown:
            raise SweepInputError(f"--preset {name} sets flags this script does not have: {', '.join(unknown)}")
        values.update(preset.flags)
    if getattr(args, "smoke_test", False):
        values.update(method.smoke)
    if not values:
        return args
    parser.set_defaults(**values)
    parsed = parser.parse_args(argv)
    if name:
        changed = changes(all_presets()[name], parsed, given or set(), parser.settings)
        if changed:
            print(
                f"warning: {'; '.join(changed)}: this is not what --preset {name} reproduces "
                f"({all_presets()[name].reproduces}); its runs are not labelled {name} and the report does not "
                "compare them with the paper",
                file=sys.stderr,
            )
            parsed.preset = None
    return parsed


def changes(preset: Preset, args: argparse.Namespace, given: set, settings) -> list[str]:
    """The flags given beside `preset` that take it outside its grid, as `--flag value (the preset's: value)`:
    a list-valued setting may take a subset of the preset's list; any other must equal the preset's value."""
    declared = {s.name: s for s in settings}

    def inside(name: str, value, preset_value) -> bool:
        ours = declared[name].parse(preset_value) if name in declared else preset_value
        if isinstance(value, list) and isinstance(ours, list):
            return set(value) <= set(ours)
        return value == ours

    return [
        f"{declared[flag].option if flag in declared else '--' + flag} {shown(getattr(args, flag))} "
        f"(the preset's: {shown(value)})"
        for flag, value in preset.flags.items()
        if flag in given and flag not in FREE_FLAGS and not inside(flag, getattr(args, flag), value)
    ]


def listing(method: type[Method], build_parser, data_dir: str | None = None) -> str:
    """Every paper's presets (`all_presets`), grouped by paper, `method`'s own paper first: name,
    script, trials, GPU-hours, what it reproduces; the commands a preset needs run first; which
    presets have published numbers (`build_parser(prog, description, method)`: the engine's parser
    of a method's script)."""
    papers: dict[str, list[Preset]] = {}
    for preset in sorted(all_presets().values(), key=lambda p: _order(p.name)):
        papers.setdefault(preset.paper or "other", []).append(preset)
    own = next((p.paper for p in method.presets.values() if p.paper), None)
    order = sorted(papers, key=lambda paper: (paper != own, paper))
    width = max([8, *(len(name) for name in all_presets())])
    lines = []
    for paper in order:
        runners = dict.fromkeys(get_method(p.method) for p in papers[paper])
        lines += [f"== {paper} =="]
        lines += [f"{m.info.display_name}: {m.info.description}" for m in runners if m.info is not None]
        lines += [f"{'preset':<{width}} {'script':<26} {'trials':>7} {'GPU-h':>8}  reproduces"]
        bases = []
        for preset in papers[paper]:
            estimate = _estimate(preset, build_parser, data_dir)
            trials = f"{estimate.trials}" if estimate and estimate.trials else "?"
            hours = _hours(estimate.gpu_hours) if estimate and estimate.gpu_hours is not None else "?"
            note = f" ({estimate.note})" if estimate and estimate.note else ""
            lines.append(
                f"{preset.name:<{width}} {preset.script:<26} {trials:>7} {hours:>8}  {preset.reproduces}{note}"
            )
            lines += [f"{'':<{width}}   first: {command}" for command in preset.before]
            if estimate and estimate.basis:
                bases.append(estimate.basis)
        lines.append("")
        lines += [f"GPU-hours: one trial after another on one GPU; {basis}." for basis in dict.fromkeys(bases)]
        plots = [p.name for p in papers[paper] if not p.published]
        lines.append(
            "Published numbers beside the sweep's in the report: "
            + (", ".join(p.name for p in papers[paper] if p.published) or "none")
            + ("; the others are plots in the paper." if plots else ".")
        )
        lines.append("")
    return "\n".join(lines).rstrip("\n")


_PRICED: dict = {}  # (preset, data folder) -> Estimate: a listing prices each preset once a process


def _estimate(preset: Preset, build_parser, data_dir):
    """The preset's grid priced by the method that runs it (None where it cannot price it)."""
    key = (preset.name, data_dir)
    if key not in _PRICED:
        _PRICED[key] = _price(preset, build_parser, data_dir)
    return _PRICED[key]


def _price(preset: Preset, build_parser, data_dir):
    runner = get_method(preset.method)
    parser = build_parser(preset.script, "", runner)
    parser.set_defaults(**preset.flags)
    try:
        args = parser.parse_args([] if data_dir is None else ["--data-dir", data_dir])
        return runner.estimate(args)
    except SweepInputError as error:
        return Estimate(0, None, f"not priced: {error}")


def follow_up(preset: Preset | None, sweep_dir: str, mlflow_uri: str) -> list[str]:
    """The commands to run after the preset's sweep, filled in."""
    if preset is None:
        return []
    return [command.format(sweep_dir=sweep_dir, mlflow_uri=mlflow_uri) for command in preset.follow_up]


def _order(name: str):
    """table1, table2, fig2a, ..., fig13: tables first, figures by number (a paper's prefix, as in
    tsdae-table2, left out)."""
    import re

    kind, number, rest = re.match(r"([a-z]+)(\d*)(.*)", name.rpartition("-")[2]).groups()
    return (kind != "table", int(number or 0), rest)


def _hours(hours: float) -> str:
    return f"{hours:.1f}" if hours >= 0.1 or hours == 0 else f"{hours:.2f}"
