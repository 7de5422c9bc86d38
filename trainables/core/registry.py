"""One registry pattern for everything a sweep names by string: methods, tasks, evaluation sets,
upstream stages. A registry holds classes, checks that each subclasses its base, and answers an
unknown name with the names it knows (so `--task` and `--sets` choices come from it).

    METHODS = Registry("method", Method)

    @METHODS.register("tmft")
    class TMFT(Method): ...

    METHODS.get("tmft")        # the class; SweepInputError naming the known ones if absent
    METHODS.names()            # registration order
"""

from __future__ import annotations

from typing import Callable

from trainables.core.errors import SweepInputError


class Registry:
    def __init__(self, kind: str, base: type):
        self.kind = kind
        self.base = base
        self._classes: dict[str, type] = {}

    def register(self, name: str, *aliases: str) -> Callable[[type], type]:
        """Decorator: register a subclass of the base under `name` (set as `cls.name`) and `aliases`."""

        def decorate(cls: type) -> type:
            if not (isinstance(cls, type) and issubclass(cls, self.base)):
                raise TypeError(
                    f"{getattr(cls, '__name__', cls)!r} must subclass {self.base.__name__} to be registered as a "
                    f"{self.kind}"
                )
            for key in (name, *aliases):
                if key in self._classes and self._classes[key] is not cls:
                    raise ValueError(f"{self.kind} {key!r} is already registered by {self._classes[key].__name__}")
                self._classes[key] = cls
            cls.name = name
            return cls

        return decorate

    def get(self, name: str) -> type:
        if name not in self._classes:
            raise SweepInputError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names()) or 'none'}")
        return self._classes[name]

    def names(self, where: Callable[[type], bool] | None = None) -> list[str]:
        """Registered names (aliases included), in registration order, optionally filtered."""
        return [key for key, cls in self._classes.items() if where is None or where(cls)]

    def __contains__(self, name: str) -> bool:
        return name in self._classes
