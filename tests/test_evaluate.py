"""The zero-shot evaluation method's settings: each flag typed and checked by its declaration, the
trial configs as runs have always recorded them (keys and values: MLflow params and config hashes of
old runs must not change), and `--dry-run`'s plan priced without loading any model."""

from __future__ import annotations

import argparse

import pytest

from sweeps.engine import dry_run
from sweeps.engine.runner import check_sweep, parser_for
from trainables.core.errors import SweepInputError
from trainables.core.method import PlanContext
from trainables.core.settings import resolve
from trainables.encoders.loading import config_without_loading
from trainables.evaluation.sets import PAPER_SETS
from trainables.methods.evaluate.method import Evaluate

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
KEYS = "method model layer pooling sets max_length stage_key upstream_run_id _upstream_path".split()


def parse(*flags: str) -> argparse.Namespace:
    return parser_for("evaluate").parse_args(list(flags))


def test_every_flag_is_typed_with_its_default():
    args = parse()  # `own`: the model's own pipeline (issue 45; before it, mean)
    assert args.models == [MINILM] and args.layers == "last" and args.pooling == ["own"]
    assert args.sets == "papers" and args.batch_size == 64 and args.max_length is None
    args = parse("--layers", "all", "--pooling", "mean,cls", "--sets", "stsb,sts12", "--max-length", "128")
    assert args.layers is None and args.pooling == ["mean", "cls"] and args.sets == ["stsb", "sts12"]
    assert args.max_length == 128
    assert parse("--layers", "3,0-1").layers == [0, 1, 3]
    assert parse("--layers", "LAST").layers == "last" and parse("--pooling", "cls,cls").pooling == ["cls"]


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--pooling", "avg"), "--pooling unknown 'avg'"),
        (("--pooling", ""), "--pooling is empty"),
        (("--layers", "x"), "--layers 'x' is not a comma-separated list of integers"),
        (("--layers", "4-2"), "--layers '4-2': the range 4-2 runs backwards"),
        (("--batch-size", "0"), "--batch-size must be a positive integer, got 0"),
        (("--max-length", "1"), "--max-length must be at least 2, got 1"),
        (("--sets", "no-such-set"), "--sets unknown 'no-such-set'"),
    ],
)
def test_a_bad_value_is_refused_naming_its_flag(flags, message):
    with pytest.raises(SweepInputError, match=message):
        parse(*flags)


def test_a_saved_sweeps_values_read_back_as_they_were():
    """--resume parses a sweep's recorded (typed) values again: `all` (None) stays `all`, lists stay lists."""
    settings = parser_for("evaluate").settings
    for flags in (("--layers", "all"), ("--layers", "0,2", "--pooling", "cls,mean"), ()):
        args = parse(*flags)
        again = resolve(argparse.Namespace(**vars(args)), settings)
        assert vars(again) == vars(args)


def test_only_the_grid_search_is_taken():
    Evaluate.check(parse())
    with pytest.raises(SweepInputError, match="nothing to tune"):
        Evaluate.check(parse("--search", "optuna"))


def test_the_contracts_columns_are_the_sets():
    assert Evaluate.metrics(parse()).columns == tuple(f"{name}_spearman" for name in PAPER_SETS)
    contract = Evaluate.metrics(parse("--sets", "stsb,sts12"))
    assert contract.columns == ("stsb_spearman", "sts12_spearman") and contract.primary == "mean_spearman"


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, stsb_sentences):
    from trainables.encoders.tiny import build_tiny_model

    return str(build_tiny_model("bert", tmp_path_factory.mktemp("tiny") / "bert", sentences=stsb_sentences))


def test_the_trial_configs_keep_their_keys_and_values(tiny_bert, data_dir, tmp_path):
    args = parse(
        "--models", tiny_bert, "--layers", "all", "--pooling", "mean,cls", "--sets", "stsb", "--data-dir", str(data_dir)
    )
    planned = Evaluate.plan(args, PlanContext(str(tmp_path / "runs"), None))
    configs = planned.configs
    assert [(c["pooling"], c["layer"]) for c in configs] == [(p, layer) for p in ("mean", "cls") for layer in range(5)]
    for config in configs:
        assert set(config) == set(KEYS)
        assert config["method"] == "evaluate" and config["model"] == tiny_bert and config["sets"] == "stsb"
        assert type(config["max_length"]) is int and type(config["layer"]) is int and config["upstream_run_id"] is None
    assert len(planned.stages) == 1 and next(iter(planned.stages.values()))["config"]["poolings"] == ["mean", "cls"]
    assert args.sets == ["stsb"]  # the sets found, as the sweep records them
    args = parse("--models", tiny_bert, "--layers", "1,9", "--data-dir", str(data_dir), "--sets", "stsb")
    with pytest.raises(SweepInputError, match="layer 9 is beyond"):
        Evaluate.plan(args, PlanContext(str(tmp_path / "runs"), None))


def test_the_dry_run_counts_the_trials_without_loading_a_model():
    checked = check_sweep(parse("--layers", "all", "--pooling", "mean,cls", "--dry-run"), Evaluate, "evaluate")
    text = dry_run.describe(checked, parser_for("evaluate"))
    depth = int(config_without_loading(MINILM).num_hidden_layers)
    assert f"trials: {2 * (depth + 1)}" in text and "no GPU" in text, text
    assert f"embeddings of {MINILM}: layers 0..L, pooling mean,cls" in text, text
    estimate = Evaluate.estimate(parse("--models", f"{MINILM},runs:/{'a' * 32}", "--layers", "0,2"))
    assert estimate.trials == 4 and len(estimate.costs) == 4 and not any(c.gpu for c in estimate.costs)
    assert Evaluate.estimate(parse("--models", f"runs:/{'a' * 32}", "--layers", "all")) is None  # depth unknown
    with pytest.raises(SweepInputError, match=f"layer {depth + 1} is beyond"):
        Evaluate.estimate(parse("--layers", str(depth + 1)))


def test_the_dry_run_script_writes_nothing(tmp_path, capsys):
    from sweeps import evaluate

    assert evaluate.main(["--dry-run", "--layers", "0,2", "--storage-path", str(tmp_path / "runs")]) == 0
    assert "trials: 2" in capsys.readouterr().out and not (tmp_path / "runs").exists()
