"""Bad input to --extend, --reuse-from and --recompute (sweeps/engine/extend.py, reuse.py): one line, exit 2,
nothing written; and what --extend makes of a sweep's settings."""

from __future__ import annotations

import json

import pytest

from sweeps.engine import extend, storage
from sweeps.engine.cli import build_parser
from sweeps.engine.runner import main
from trainables.methods import get_method


def _old_sweep(root, name="old", method="tmft", **changes) -> None:
    args = vars(build_parser("x", "", get_method("tmft")).parse_args([]))
    args.update(changes)
    folder = root / name
    folder.mkdir(parents=True)
    saved = {"name": name, "script": "electra_layers", "method_class": method, "args": args}
    (folder / storage.SWEEP_FILE).write_text(json.dumps(saved, default=str))


def _files(root) -> list:
    return sorted(str(p) for p in root.rglob("*")) if root.exists() else []


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--extend", "nosuch"], "--extend nosuch: no sweep there"),
        (["--extend", "other"], "that sweep ran the method 'sed'"),
        (["--extend", "old", "--lr", "3e-5"], "--lr 3e-05 differs from the sweep's 2e-05"),
        (["--extend", "old", "--epochs", "3", "--seeds", "0-9"], "--epochs 3 differs from the sweep's 1"),
        (["--extend", "old", "--recompute"], "--recompute with --extend"),
        (["--reuse-from", "sqlite:////nonexistent/mlflow.db"], "--reuse-from sqlite:////nonexistent/mlflow.db: no"),
        (["--reuse-from", "http://127.0.0.1:1"], "--reuse-from http://127.0.0.1:1: the MLflow store is unreachable"),
    ],
)
def test_bad_extend_reuse_from_and_recompute_are_one_line_exit_2_and_write_nothing(tmp_path, capsys, flags, message):
    storage_path = tmp_path / "runs"
    _old_sweep(storage_path, epochs=1)
    _old_sweep(storage_path, "other", method="sed")
    before = _files(storage_path)
    code = main(["--smoke-test", "--storage-path", str(storage_path), *flags], method="tmft", prog="electra_layers")
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
    assert _files(storage_path) == before


def test_extend_adds_the_values_given_to_the_axes_and_keeps_every_other_setting(tmp_path):
    _old_sweep(tmp_path, seeds=[0, 1, 2, 3, 4], layers=[0, 2], epochs=3, lr=3e-5)
    method = get_method("tmft")
    parser = build_parser("x", "", method)
    args = parser.parse_args(["--seeds", "5-9", "--max-concurrent", "2", "--storage-path", str(tmp_path)])
    args.extend = "old"
    grown = extend.extended_args(args, method, parser, {"seeds", "max_concurrent", "storage_path", "extend"})
    assert grown.seeds == list(range(10)) and grown.layers == [0, 2]  # the old axis values and the new ones
    assert grown.epochs == 3 and grown.lr == 3e-5  # the old sweep's, not the defaults
    assert grown.max_concurrent == 2  # where and how it runs: the command line's
    assert grown.extend == str(tmp_path / "old") and grown.name is None  # a sweep of its own


def test_extend_with_all_layers_keeps_all():
    assert extend._union(None, [0, 1]) is None and extend._union([3, 1], [2]) == [1, 2, 3]
    assert extend._union(["b", "a"], ["c", "a"]) == ["b", "a", "c"]
