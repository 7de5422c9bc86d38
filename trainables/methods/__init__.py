"""One package per method. `load()` imports every module of every package here, and each module
registers what it declares (a method with `@register_method`, a stage kind with `@STAGES.register`):
a new method is a new package here, found with no edit elsewhere. `get_method` and `find_preset`
look a method or a preset up by name. Importing one module of a package (e.g. a method's Ray-free
losses) imports nothing else."""

import importlib
import pkgutil

from trainables.core.method import METHODS, Method, Preset


def load() -> None:
    """Import every method package's modules (registration happens on import; a second call is free)."""
    for package in pkgutil.iter_modules(__path__):
        if package.ispkg:
            for module in pkgutil.iter_modules([f"{__path__[0]}/{package.name}"]):
                importlib.import_module(f"{__name__}.{package.name}.{module.name}")


def get_method(name: str) -> type[Method]:
    """The method class registered under `name` (SweepInputError naming the known ones otherwise)."""
    load()
    return METHODS.get(name)


def find_preset(name: str) -> Preset | None:
    """The preset called `name` among every method's, or None."""
    load()
    for key in METHODS.names():
        preset = METHODS.get(key).presets.get(name)
        if preset is not None:
            return preset
    return None
