"""One registry pattern: base class checked, unknown names answered with the known ones, and the
command line's choices taken from the registries."""

import pytest

from trainables.core.errors import SweepInputError
from trainables.core.registry import Registry


class Base:
    pass


def test_registry_checks_the_base_class_and_names_known_entries():
    registry = Registry("widget", Base)

    @registry.register("one", "uno")
    class One(Base):
        pass

    assert registry.get("uno") is One and One.name == "one" and registry.names() == ["one", "uno"]
    with pytest.raises(TypeError, match="must subclass Base"):
        registry.register("two")(int)
    with pytest.raises(SweepInputError, match="unknown widget 'three'; known: one, uno"):
        registry.get("three")
    with pytest.raises(ValueError, match="already registered"):
        registry.register("one")(type("Other", (Base,), {}))


def test_cli_choices_come_from_the_registries():
    from sweeps.engine.runner import parser_for
    from trainables.training.pair_tasks import task_names

    task = next(s for s in parser_for("tmft").settings if s.name == "task")
    from trainables.core.paths import default_data_dir
    from trainables.data.multilingual_stsb import release_languages

    released = [f"stsb-{lang}" for lang in release_languages(default_data_dir()) if lang not in ("de", "es")]
    assert list(task.kind.values) == task_names() == ["stsb", "korsts", "stsb-de", "stsb-es", *released, "mrpc", "sick"]
    with pytest.raises(SweepInputError, match="unknown method 'nope'"):
        parser_for("nope")


def test_best_value_is_the_best_mean_ties_to_the_lower_value_and_skips_nan():
    """The one selection rule of the end-of-sweep table and the analysis, against pandas."""
    import math

    import pandas as pd

    from trainables.core.method import best_value

    means = pd.Series({3: 80.0, 1: 82.5, 2: math.nan, 6: 82.5, 0: 10.0})
    assert best_value(means.to_dict(), "max") == 1 == means.dropna().idxmax()
    assert best_value(means.to_dict(), "min") == 0 == means.dropna().idxmin()
    assert best_value({4: 1.0, 2: 1.0}, "min") == 2
    assert best_value({1: math.nan}, "max") is None
