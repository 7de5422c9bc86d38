"""Presets on the command line: `--preset NAME` runs the grid of one table or figure of a paper
(the method's `presets`, trainables/core/method.py `Preset`), `--list-presets` prints every preset with
what it reproduces, its trial count and its GPU-hours estimate (the method's `estimate`, from
public configs: no model is loaded).

A preset's flags become the parser's defaults, so a flag given on the command line still wins
(e.g. `--preset table2 --seeds 0` for one seed of Table 2's grid). `--smoke-test`'s values (the
method's `smoke`) are applied the same way, over the preset's. The preset's name is recorded
on the sweep's runs (param `preset`); the report looks it up to name the table or figure and to
put the paper's numbers beside the sweep's (analysis/published.py).
"""

from __future__ import annotations

import argparse

from trainables.core.errors import SweepInputError
from trainables.core.method import Method, Preset
from trainables.methods import get_method


def add_arguments(parser: argparse.ArgumentParser, method: type[Method]) -> None:
    if not method.presets:
        return
    group = parser.add_argument_group("presets (a paper's tables and figures)")
    group.add_argument(
        "--preset",
        default=None,
        choices=sorted(method.presets, key=_order),
        help="run the grid of one table or figure of the paper; flags given beside it override it "
        "(--list-presets describes each)",
    )
    group.add_argument(
        "--list-presets",
        action="store_true",
        help="print every preset with what it reproduces, its trials and GPU-hours, and exit",
    )


def apply(parser: argparse.ArgumentParser, argv, args: argparse.Namespace, method: type[Method]) -> argparse.Namespace:
    """`args` parsed again with the preset's flags, then with `--smoke-test` the method's `smoke` values, as
    the parser's defaults: a flag given on the command line wins over both (`--smoke-test --steps 0` is
    checked as `--steps 0`). The same `args` without a preset or a smoke test."""
    values = {}
    name = getattr(args, "preset", None)
    if name:
        preset = method.presets[name]
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
    return parser.parse_args(argv)


def listing(method: type[Method], build_parser, data_dir: str | None = None) -> str:
    """The presets of `method`'s paper as a table: name, script, trials, GPU-hours, what it reproduces
    (`build_parser(prog, description, method)`: the engine's parser of a method's script)."""
    lines = [f"{'preset':<8} {'script':<26} {'trials':>7} {'GPU-h':>8}  reproduces"]
    bases = []
    for preset in sorted(method.presets.values(), key=lambda p: _order(p.name)):
        runner = get_method(preset.method)
        args = build_parser(preset.script, "", runner).parse_args([] if data_dir is None else ["--data-dir", data_dir])
        for flag, value in preset.flags.items():
            setattr(args, flag, value)
        estimate = runner.estimate(args)
        trials = f"{estimate.trials}" if estimate and estimate.trials else "?"
        hours = f"{estimate.gpu_hours:.1f}" if estimate and estimate.gpu_hours is not None else "?"
        note = f" ({estimate.note})" if estimate and estimate.note else ""
        lines.append(f"{preset.name:<8} {preset.script:<26} {trials:>7} {hours:>8}  {preset.reproduces}{note}")
        if estimate and estimate.basis:
            bases.append(estimate.basis)
    lines.append("")
    lines += [f"GPU-hours: one trial after another on one GPU; {basis}." for basis in dict.fromkeys(bases)]
    lines.append(
        "Published numbers beside the sweep's in the report: "
        + (", ".join(p.name for p in method.presets.values() if p.published) or "none")
        + "; the others are plots in the paper."
    )
    return "\n".join(lines)


def follow_up(preset: Preset | None, sweep_dir: str, mlflow_uri: str) -> list[str]:
    """The commands to run after the preset's sweep, filled in."""
    if preset is None:
        return []
    return [command.format(sweep_dir=sweep_dir, mlflow_uri=mlflow_uri) for command in preset.follow_up]


def _order(name: str):
    """table1, table2, fig2a, ..., fig13: tables first, figures by number."""
    import re

    kind, number, rest = re.match(r"([a-z]+)(\d*)(.*)", name).groups()
    return (kind != "table", int(number or 0), rest)
