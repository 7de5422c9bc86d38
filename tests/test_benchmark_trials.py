"""The layer-sweep benchmark's authors' arm (benchmarks/layer_sweep.py, its trials from
benchmarks/truncation.py's `make_trial`, run outside Ray) runs on a tiny model and scores every
layer: a benchmark that breaks on a change of the trial's interface is caught here, not half an
hour into a measurement."""

from __future__ import annotations

import importlib.util
from argparse import Namespace

import pytest

from trainables.core.paths import PROJECT_ROOT


def _layer_sweep():
    """The script as a module: `benchmarks/` is a folder of scripts, not a package CI's pytest can import."""
    spec = importlib.util.spec_from_file_location("layer_sweep", PROJECT_ROOT / "benchmarks" / "layer_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.sweep
def test_the_authors_arm_scores_every_layer_and_seed(tiny_models, data_dir):
    authors_sweep = _layer_sweep().authors_sweep

    args = Namespace(model=tiny_models["bert"], data_dir=str(data_dir), train_samples=64, epochs=1)
    seconds, scores = authors_sweep(args, layers=[0, 2], seeds=[0])
    assert seconds > 0 and set(scores) == {(0, 0), (2, 0)}
    assert all(-100 <= score <= 100 for score in scores.values())  # Spearman in points
    assert scores[(0, 0)] != scores[(2, 0)]
