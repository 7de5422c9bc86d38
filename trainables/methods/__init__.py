"""One package per method. `load()` imports every module of every package here that registers what it
declares (a method with `@register_method`, a stage kind with `@STAGES.register`; found by reading the
files): a new method is a new package here, found with no edit elsewhere. Those modules import no torch,
transformers or Ray Tune: a method's trials' code (its `trainable`, by path) is imported when a plan or a
trial needs it, not to print `--help` or refuse a flag. `get_method` and `find_preset` look a method or a
preset up by name. Importing one module of a package (e.g. a method's Ray-free losses) imports nothing else."""

import importlib
import pkgutil
import re
from pathlib import Path

from trainables.core.method import METHODS, Method, Preset

REGISTERS = re.compile(r"^@(register_method|STAGES\.register)\(", re.M)


def load() -> None:
    """Import every method package's modules that register something (registration happens on import; a
    second call is free)."""
    for package in pkgutil.iter_modules(__path__):
        if package.ispkg:
            folder = Path(__path__[0]) / package.name
            for module in pkgutil.iter_modules([str(folder)]):
                if REGISTERS.search((folder / f"{module.name}.py").read_text()):
                    importlib.import_module(f"{__name__}.{package.name}.{module.name}")


def get_method(name: str) -> type[Method]:
    """The method class registered under `name` (SweepInputError naming the known ones otherwise)."""
    load()
    return METHODS.get(name)


def all_presets() -> dict[str, Preset]:
    """Every method's presets by name (the presets of every paper: a method package's `presets` appear
    here with no edit elsewhere). Two different presets of one name are an error of the code."""
    load()
    out: dict[str, Preset] = {}
    for key in METHODS.names():
        for name, preset in METHODS.get(key).presets.items():
            if name in out and out[name] != preset:
                raise ValueError(f"two presets are called {name!r}: {out[name].reproduces!r} and {preset.reproduces!r}")
            out[name] = preset
    return out


def find_preset(name: str) -> Preset | None:
    """The preset called `name` among every method's, or None."""
    return all_presets().get(name)
