"""One package per method. Importing this package imports every method package in it, and each
registers its method (and the stage kinds it owns) on import: a new method is a new package here,
found with no edit elsewhere. `get_method` and `find_preset` look a method or a preset up by name."""

import importlib
import pkgutil

from trainables.core.method import METHODS, Method, Preset

for _module in pkgutil.iter_modules(__path__):
    if _module.ispkg:
        importlib.import_module(f"{__name__}.{_module.name}")


def get_method(name: str) -> type[Method]:
    """The method class registered under `name` (SweepInputError naming the known ones otherwise)."""
    return METHODS.get(name)


def find_preset(name: str) -> Preset | None:
    """The preset called `name` among every method's, or None."""
    for key in METHODS.names():
        preset = METHODS.get(key).presets.get(name)
        if preset is not None:
            return preset
    return None
