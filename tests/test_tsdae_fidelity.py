"""TSDAE as its paper's codes ran it: epochs without replacement (a shuffle an epoch, each sentence once,
the last batch kept or dropped as each objective's code does; CT draws with replacement), the corpus-size
figure (`tsdae-fig3`) planned, dry-run and run from 128 sentences for every objective, and every TSDAE
preset planned and dry-run alike."""

import re
from collections import Counter

import pytest
import torch

from sweeps import tsdae
from sweeps.engine import runner
from trainables.core.errors import SweepInputError
from trainables.methods.tsdae.training import Batches


def _epoch(batches: Batches, n: int, steps: int) -> list[list[int]]:
    return [batches.next(n) for _ in range(steps)]


@pytest.mark.parametrize("last, sizes", [("keep", [8] * 16 + [2]), ("drop", [8] * 16)])
def test_an_epoch_is_one_shuffled_pass_with_the_last_batch_kept_or_dropped(last, sizes):
    batches = Batches(130, "epochs", last, torch.Generator().manual_seed(0))
    first = _epoch(batches, 8, len(sizes))
    assert [len(b) for b in first] == sizes
    seen = Counter(row for batch in first for row in batch)
    assert max(seen.values()) == 1 and len(seen) == sum(sizes)  # no sentence twice in an epoch
    assert batches.passes() == pytest.approx(sum(sizes) / 130)
    second = _epoch(batches, 8, len(sizes))
    assert [len(b) for b in second] == sizes and batches.epochs == 2
    assert [r for b in first for r in b] != [r for b in second for r in b]  # shuffled again
    again = Batches(130, "epochs", last, torch.Generator().manual_seed(0))
    assert _epoch(again, 8, len(sizes)) == first  # seeded


def test_a_batch_larger_than_the_corpus_is_the_whole_corpus_each_epoch():
    batches = Batches(128, "epochs", "keep", torch.Generator().manual_seed(0))
    for epoch in range(1, 4):
        assert sorted(batches.next(512)) == list(range(128)) and batches.passes() == epoch


def test_replacement_sampling_repeats_and_a_checkpoint_without_batches_still_loads():
    batches = Batches(64, "replacement", None, torch.Generator().manual_seed(0))
    rows = batches.next(512)
    assert len(rows) == 512 and len(set(rows)) < 64 + 1 and batches.passes() is None
    resumed = Batches(64, "epochs", "drop", torch.Generator().manual_seed(0))
    resumed.load_state_dict(None)  # written before epochs were recorded
    assert len(set(resumed.next(8))) == 8
    state = resumed.state_dict()
    copy = Batches(64, "epochs", "drop", torch.Generator().manual_seed(1))
    copy.load_state_dict(state)
    assert copy.order == resumed.order and copy.position == 8


def test_a_trial_config_recorded_before_sampling_draws_with_replacement(tiny_models, stsb_sentences):
    from argparse import Namespace

    from trainables.methods.tsdae.training import Training, objective_settings

    args = Namespace(ct_variant="official", shared_settings=False, batch_size=8, steps=2)
    config = {**objective_settings("mlm", args, 64, 64), "objective": "mlm", "seed": 0, "noise": "delete"}
    config.update(_model_path=tiny_models["bert"], ct_variant="official")
    assert Training(config, stsb_sentences[:64], "cpu").batches.sampling == "epochs"
    old = {k: v for k, v in config.items() if k not in ("sampling", "last_batch", "epoch_steps")}
    assert Training(old, stsb_sentences[:64], "cpu").batches.sampling == "replacement"


def _plan(argv):
    """The real plan of a command line, its preset applied as the script applies it."""
    from sweeps.engine import presets
    from sweeps.engine.cli import given_flags
    from trainables.methods.tsdae.method import TSDAE

    parser = runner.build_parser("tsdae", "", TSDAE)
    args = presets.apply(parser, argv, parser.parse_args(argv), TSDAE, given_flags(parser, argv))
    return runner.plan_sweep(args, method=TSDAE)


def _dry_run(argv, capsys) -> tuple[int, str, str]:
    code = runner.main(["--dry-run", *argv], method="tsdae", prog="tsdae")
    out = capsys.readouterr()
    return code, out.out, out.err


FIG3_AT_128 = ["--preset", "tsdae-fig3", "--corpus", "wiki", "--max-sentences", "128", "--seeds", "0"]


def test_the_corpus_size_figure_runs_every_objective_at_128_sentences(sweep_env, tiny_models, capsys):
    """The figure's first point without any batch override: SimCSE trains one batch of all 128 sentences
    an epoch, and the dry run plans the same four trials the sweep runs; each run records its epochs."""
    from mlflow_helpers import runs_by_role

    argv = [*FIG3_AT_128, "--models", tiny_models["bert"], "--eval-sets", "none", *sweep_env["base"]]
    code, out, err = _dry_run(argv, capsys)
    assert code == 0, err
    assert "trials: 4" in out
    assert tsdae.main([*argv, "--name", "fig3"]) == 0
    _, children = runs_by_role(sweep_env["uri"])
    got = {c.data.params["objective"]: c for c in children}
    assert sorted(got) == ["ct", "mlm", "simcse", "tsdae"] and all(c.info.status == "FINISHED" for c in children)
    steps = {o: (int(c.data.params["steps"]), c.data.params["batch_size"]) for o, c in got.items()}
    assert steps == {"tsdae": (160, "8"), "mlm": (160, "8"), "simcse": (10, "128"), "ct": (40, "16")}
    for objective in ("tsdae", "mlm", "simcse"):
        params, metrics = got[objective].data.params, got[objective].data.metrics
        assert params["sampling"] == "epochs" and params["corpus_epochs"] == "10"
        assert metrics["corpus_passes"] == pytest.approx(10.0)  # ten passes, each sentence once a pass
    assert got["ct"].data.params["sampling"] == "replacement" and "corpus_passes" not in got["ct"].data.metrics


@pytest.mark.parametrize("size", [128, 256, 65_536])
def test_the_corpus_size_figure_plans_and_dry_runs_alike_at_its_sizes(size, tmp_path, data_dir, tiny_models, capsys):
    """Every size of the figure plans each objective with the batches its code forms (no override), and
    the dry run of the same command says the same number of trials."""
    argv = ["--preset", "tsdae-fig3", "--corpus", "wiki", "--max-sentences", str(size), "--seeds", "0"]
    argv += ["--models", tiny_models["bert"], "--eval-sets", "none", "--data-dir", str(data_dir)]
    argv += ["--storage-path", str(tmp_path / "runs")]
    plan = _plan(argv)
    code, out, err = _dry_run(argv, capsys)
    assert code == 0, err
    assert f"trials: {len(plan.configs)}" in out and len(plan.configs) == 4
    for c in plan.configs:
        assert c["steps"] == min(100_000, 10 * c["epoch_steps"]) and c["batch_size"] <= size


def _tsdae_presets():
    from trainables.methods import all_presets

    return sorted(name for name, p in all_presets().items() if p.method == "tsdae")


@pytest.mark.parametrize("name", _tsdae_presets())
def test_every_tsdae_preset_is_listed_dry_run_and_checked_alike(name, tmp_path, data_dir, capsys):
    """`--list-presets` prices a preset exactly when `--dry-run` of it passes its checks, with the same
    number of trials, and a refusal is one line naming the problem."""
    from sweeps.engine import presets

    presets._PRICED.clear()
    assert tsdae.main(["--list-presets", "--data-dir", str(data_dir)]) == 0
    listed = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(f"{name} "))
    code, out, err = _dry_run(["--preset", name, "--data-dir", str(data_dir)], capsys)
    if "not priced" in listed:
        assert code == 2 and err.count("\n") == 1, (listed, err)
    else:
        assert code == 0, err
        trials = int(re.search(r"trials: (\d+)", out).group(1))
        assert re.match(rf"{re.escape(name)}\s+sweeps/tsdae\.py\s+{trials}\s", listed), listed


def test_a_preset_plan_refuses_what_its_dry_run_refuses(tmp_path, data_dir, tiny_models, capsys):
    argv = ["--preset", "tsdae-fig3", "--corpus", "wiki", "--max-sentences", "128", "--batch-size", "tsdae=256"]
    argv += ["--models", tiny_models["bert"], "--data-dir", str(data_dir), "--storage-path", str(tmp_path / "r")]
    code, out, err = _dry_run(argv, capsys)
    assert code == 2 and "one batch of --objective tsdae needs 256" in err and out == ""
    with pytest.raises(SweepInputError, match="one batch of --objective tsdae needs 256"):
        _plan(argv)
    assert not (tmp_path / "r").exists()
