"""The CLI reference (docs/reference/cli.md), written from the code by `python -m analysis docs`.

Every script in sweeps/: a method's sweep script (its `main` is `runner.main` with the method's name) is
described from its parser's declared settings (trainables/core/settings.py, sweeps/engine/cli.py): each
setting's flag, kind, bounds or allowed values, default and the default's source. The other scripts
(the tracking server, the spool sync, the local cluster) from their argparse parser (`build_parser()`), and
the cluster checker from its `USAGE`. A test holds the page to what this writes, so a new setting, a new
bound or a new script shows up in the reference without a hand edit.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

BEGIN = "<!-- CLI reference: python -m analysis docs -->"
END = "<!-- end of CLI reference -->"
DATA_DIR_DEFAULT = "`$EMBSWEEP_DATA_DIR`, else `../shared/data` beside the checkout"
SCRIPTS = Path(__file__).resolve().parents[1] / "sweeps"


def scripts() -> list[str]:
    """The module names of the scripts in sweeps/ (every .py file but the package's __init__)."""
    return sorted(p.stem for p in SCRIPTS.glob("*.py") if p.stem != "__init__")


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(setting) -> str:
    from trainables.core.settings import Flag, shown

    if setting.name == "data_dir":
        return DATA_DIR_DEFAULT  # the machine's own folder otherwise; see trainables/core/paths.py
    if isinstance(setting.kind, Flag):
        return "off"
    if setting.default is None:
        return "unset"
    return f"`{_cell(shown(setting.default))}`"


def _portable(value) -> str:
    """A default as the page shows it on every machine: this machine's temp folder as `<temp dir>`."""
    import tempfile

    return str(value).replace(tempfile.gettempdir(), "<temp dir>")


def _kind(setting) -> str:
    from trainables.core.settings import Auto

    kind = setting.kind
    name = type(kind).__name__ if not isinstance(kind, Auto) else f"Auto({type(kind.kind).__name__})"
    described = kind.describe()
    per = f"; per objective: `{'`, `'.join(setting.per)}`" if setting.per else ""
    return _cell(f"{name}: {described}{per}" if described else f"{name}{per}")


def method_section(module: str, main) -> list[str]:
    from sweeps.engine.runner import parser_for

    keywords = main.keywords
    parser = parser_for(keywords["method"], keywords.get("prog", module), "", keywords.get("defaults"))
    lines = [
        f"## `sweeps/{module}.py`",
        "",
        f"{keywords.get('description', '').strip()} Method: `{keywords['method']}`.",
        "",
        "| flag | kind and bounds | default | default's source | group | what it sets |",
        "|---|---|---|---|---|---|",
    ]
    for s in parser.settings:
        flag = f"`{s.option}`" + "".join(f" (`{a}`, old)" for a in s.aliases)
        lines.append(
            f"| {flag} | {_kind(s)} | {_default(s)} | {_cell(s.source)} | {_cell(s.group)} | {_cell(s.help)} |"
        )
    return lines


def argparse_section(module: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [
        f"## `sweeps/{module}.py`",
        "",
        f"{_cell(parser.description or '')} Run as `{parser.prog}`; its flags are argparse's, not settings.",
        "",
        "| argument | kind and bounds | default | what it sets |",
        "|---|---|---|---|",
    ]
    for action in parser._actions:  # argparse keeps no public list of a parser's arguments
        if action.dest == "help":
            continue
        name = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}` (positional)"
        if action.choices:
            kind = "one of " + ", ".join(map(str, action.choices))
        elif action.nargs == 0:
            kind = "flag"
        else:
            kind = getattr(action.type, "__name__", "text") if action.type else "text"
        default = (
            "off" if action.nargs == 0 else ("unset" if action.default is None else f"`{_portable(action.default)}`")
        )
        lines.append(f"| {name} | {_cell(kind)} | {_cell(default)} | {_cell(action.help or '')} |")
    return lines


def section() -> str:
    """The reference of every script, with its markers, as docs/reference/cli.md holds it."""
    lines = [BEGIN, ""]
    for module in scripts():
        loaded = importlib.import_module(f"sweeps.{module}")
        main = getattr(loaded, "main", None)
        if getattr(main, "keywords", {}).get("method"):
            lines += method_section(module, main)
        elif hasattr(loaded, "build_parser"):
            lines += argparse_section(module, loaded.build_parser())
        elif hasattr(loaded, "USAGE"):
            summary = (loaded.__doc__ or "").strip().splitlines()[0]
            lines += [f"## `sweeps/{module}.py`", "", f"{summary} Usage: `{loaded.USAGE}`; it takes no flags."]
        else:
            raise ValueError(f"sweeps/{module}.py: no method `main`, `build_parser()` or `USAGE` to document")
        lines.append("")
    return "\n".join([*lines, END])
