"""The analysis notebooks run top to bottom, headless (nbclient, this venv's Python as the
kernel), against the small MLflow store of tests/analysis_helpers.py."""

from __future__ import annotations

import shutil

import pytest
from analysis_helpers import shared_store

from analysis.nbrun import NOTEBOOKS, parameter_cell, run_notebook


def _outputs(nb, kind):
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs if kind in o.get("data", {})]


def _text(nb):
    return "".join(o.get("text", "") for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs)


def test_every_notebook_has_a_parameter_cell_first():
    import nbformat

    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert names == ["cka.ipynb", "layer_curves.ipynb", "pareto.ipynb"]
    for name in names:
        nb = nbformat.read(str(NOTEBOOKS / name), as_version=4)
        assert nb.cells[0] is parameter_cell(nb) and "MLFLOW_URI = " in nb.cells[0].source
        assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code")  # stored clean


@pytest.mark.sweep
@pytest.mark.parametrize("name", ["layer_curves", "pareto"])
def test_store_notebooks_run_headless(name, tmp_path_factory, tmp_path):
    store = shared_store(tmp_path_factory)
    nb = run_notebook(
        NOTEBOOKS / f"{name}.ipynb",
        {"MLFLOW_URI": store.uri, "EXPERIMENT": store.experiment},
        cwd=tmp_path,
        timeout=300,
    )
    assert f"MLFLOW_URI = {store.uri!r}" in nb.cells[0].source
    assert "34 trial runs: 30 complete, 4 left out" in _text(nb)
    assert len(_outputs(nb, "image/png")) == 2  # one figure per (method, task): tmft and dapt+tmft
    tables = "".join(o["data"]["text/html"] for o in _outputs(nb, "text/html"))
    if name == "pareto":
        assert "on_front" in tables
    else:
        assert "status FAILED" in tables and "is_best_layer" not in tables


@pytest.mark.sweep
def test_cka_notebook_runs_headless(tmp_path_factory, tmp_path):
    from trainables.encoders.tiny import build_tiny_model

    models = [
        str(build_tiny_model(kind, tmp_path / kind, layers=2, hidden=32)) for kind in ("bert", "electra-discriminator")
    ]
    # A copy of the store: its schema is already migrated, which saves a new database's seconds.
    shutil.copy(shared_store(tmp_path_factory).path, tmp_path / "cka.db")
    uri = f"sqlite:///{tmp_path / 'cka.db'}"
    nb = run_notebook(
        NOTEBOOKS / "cka.ipynb",
        {
            "MLFLOW_URI": uri,
            "MODEL_A": models[0],
            "MODEL_B": models[1],
            "MAX_SENTENCES": 8,
            "OUT_DIR": str(tmp_path / "out"),
        },
        cwd=tmp_path,
        timeout=300,
    )
    assert len(_outputs(nb, "image/png")) == 1
    assert "['cka.csv', 'cka.png', 'cka.svg']" in _text(nb)
    assert (tmp_path / "out" / "cka.csv").is_file()
