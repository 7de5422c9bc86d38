"""Exports and evaluations that would produce nothing, or something wrong, say why with one line and exit
non-zero: an mteb export with no run on a whole MTEB task, a model whose weights are not finite, a model
folder whose config.json cannot be read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from trainables.core.errors import SweepInputError

SUBSET_RUN = {
    "run_id": "e" * 32, "method": "tmft", "model": "org/base", "layer": 3, "seed": 2, "sweep": "minilm",
    "task": "stsb", "max_eval_samples": 32, "test_spearman_at_best_dev": 79.0, "test_pearson_at_best_dev": 80.0,
}  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ([SUBSET_RUN], "1 scored the test split on a subset (--max-eval-samples)"),
        ([{**SUBSET_RUN, "task": "mrpc", "max_eval_samples": None}], "1 have no suite scores on an MTEB task"),
        ([], "no trial runs match"),
    ],
)
def test_an_mteb_export_of_nothing_says_why_and_writes_nothing(rows, reason, tmp_path):
    from analysis.mteb_export import export_runs

    with pytest.raises(SweepInputError, match="nothing to export") as refused:
        export_runs(pd.DataFrame(rows), tmp_path / "out")
    assert reason in str(refused.value) and len(str(refused.value).splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_mteb_command_exits_non_zero_on_nothing_to_export(tmp_path, capsys, monkeypatch):
    import analysis.loader
    from analysis.__main__ import main

    monkeypatch.setattr(analysis.loader, "load_runs", lambda uri, experiment=None: pd.DataFrame([SUBSET_RUN]))
    code = main(["mteb", "--mlflow-uri", f"sqlite:///{tmp_path / 'm.db'}", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "nothing to export" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def _damaged(tiny_models, tmp_path, how: str) -> Path:
    folder = Path(shutil.copytree(tiny_models["bert"], tmp_path / how))
    if how == "inf weights":
        from safetensors.torch import load_file, save_file

        weights = load_file(str(folder / "model.safetensors"))
        name = next(k for k in weights if k.endswith("word_embeddings.weight"))
        weights[name][0, 0] = float("inf")
        save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    elif how == "config not JSON":
        (folder / "config.json").write_text("{not json")
    elif how == "config of no model":
        (folder / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    return folder


@pytest.mark.parametrize("how", ["inf weights", "config not JSON", "config of no model"])
@pytest.mark.parametrize("script", ["evaluate", "electra_layers"])
def test_a_model_folder_that_cannot_be_right_is_refused_with_one_line(
    script, how, tmp_path, tiny_models, data_dir, capsys
):
    import importlib

    folder = _damaged(tiny_models, tmp_path, how)
    main = importlib.import_module(f"sweeps.{script}").main
    storage = tmp_path / "runs"
    code = main(["--models", str(folder), "--data-dir", str(data_dir), "--storage-path", str(storage)])
    err = capsys.readouterr().err.strip()
    expected = "holds values that are not finite" if how == "inf weights" else "its config.json cannot be read"
    assert code == 2 and expected in err and len(err.splitlines()) == 1, err
    assert not storage.exists()
