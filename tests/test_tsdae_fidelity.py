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


@pytest.mark.sweep
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
    corpus = tmp_path / "corpus.txt"  # the Wikipedia sample holds 11,914 sentences: a larger corpus for 65,536
    corpus.write_text("".join(f"sentence number {i} of a corpus large enough\n" for i in range(70_000)))
    argv = ["--preset", "tsdae-fig3", "--corpus", str(corpus), "--max-sentences", str(size), "--seeds", "0"]
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


@pytest.fixture(scope="module")
def tsdae_listing(data_dir) -> list[str]:
    """`--list-presets`' lines, priced afresh once for the module's presets."""
    import contextlib
    import io

    from sweeps.engine import presets

    presets._PRICED.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert tsdae.main(["--list-presets", "--data-dir", str(data_dir)]) == 0
    return out.getvalue().splitlines()


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.sweep] if n == "tsdae-fig3" else []) for n in _tsdae_presets()]
)
def test_every_tsdae_preset_is_listed_dry_run_and_checked_alike(name, tsdae_listing, data_dir, capsys):
    """`--list-presets` prices a preset exactly when `--dry-run` of it passes its checks, with the same
    number of trials, and a refusal is one line naming the problem."""
    listed = next(line for line in tsdae_listing if line.startswith(f"{name} "))
    code, out, err = _dry_run(["--preset", name, "--data-dir", str(data_dir)], capsys)
    if "not priced" in listed:
        assert code == 2 and err.count("\n") == 1, (listed, err)
    else:
        assert code == 0, err
        trials = int(re.search(r"trials: (\d+)", out).group(1))
        assert re.match(rf"{re.escape(name)}\s+sweeps/tsdae\.py\s+{trials}\s", listed), listed


def test_a_size_beyond_the_corpus_is_refused_not_run_under_its_name(tmp_path, data_dir, tiny_models):
    argv = ["--preset", "tsdae-fig3", "--corpus", "wiki", "--max-sentences", "16384", "--seeds", "0"]
    argv += ["--models", tiny_models["bert"], "--eval-sets", "none", "--data-dir", str(data_dir)]
    argv += ["--storage-path", str(tmp_path / "r")]
    with pytest.raises(SweepInputError, match="--max-sentences 16384: --corpus wiki holds 11,548 sentences"):
        _plan(argv)


def test_a_preset_plan_refuses_what_its_dry_run_refuses(tmp_path, data_dir, tiny_models, capsys):
    argv = ["--preset", "tsdae-fig3", "--corpus", "wiki", "--max-sentences", "128", "--batch-size", "tsdae=256"]
    argv += ["--models", tiny_models["bert"], "--data-dir", str(data_dir), "--storage-path", str(tmp_path / "r")]
    code, out, err = _dry_run(argv, capsys)
    assert code == 2 and "one batch of --objective tsdae needs 256" in err and out == ""
    with pytest.raises(SweepInputError, match="one batch of --objective tsdae needs 256"):
        _plan(argv)
    assert not (tmp_path / "r").exists()


# --- Appendix A: noise types and ratios, pooling, the decoder tied or not, by name ---------------------------


def _noise(kind, ratio, seed=0):
    import numpy as np

    from trainables.methods.tsdae.noise import Noise

    return Noise(kind, ratio, np.random.RandomState(seed), "[MASK]", ["zebra", "quartz"])


SENTENCE = "the quick brown fox jumps over the lazy dog near a quiet river bank today"


def test_each_noise_type_influences_its_ratio_of_the_words():
    words = SENTENCE.split()
    many = 400
    swapped = [_noise("swap", 0.3, s)(SENTENCE).split() for s in range(many)]
    assert all(sorted(w) == sorted(words) for w in swapped)  # the same words, moved
    moved = sum(a != b for w in swapped for a, b in zip(w, words)) / (many * len(words))
    assert 0.2 < moved < 0.35
    masked = [_noise("mask", 0.3, s)(SENTENCE).split() for s in range(many)]
    assert all(len(w) == len(words) for w in masked)
    assert 0.25 < sum(w.count("[MASK]") for w in masked) / (many * len(words)) < 0.35
    replaced = [_noise("replace", 0.5, s)(SENTENCE).split() for s in range(many)]
    share = sum(x in ("zebra", "quartz") for w in replaced for x in w) / (many * len(words))
    assert all(len(w) == len(words) for w in replaced) and 0.45 < share < 0.55
    added = [_noise("add", 0.3, s)(SENTENCE).split() for s in range(many)]
    assert all([x for x in w if x not in ("zebra", "quartz")] == words for w in added)
    assert 0.25 < sum(len(w) - len(words) for w in added) / (many * len(words)) < 0.35
    deleted = [_noise("delete", 0.6, s)(SENTENCE).split() for s in range(many)]
    assert 0.55 < 1 - sum(map(len, deleted)) / (many * len(words)) < 0.65
    assert _noise("swap", 0.3, 7)(SENTENCE) == _noise("swap", 0.3, 7)(SENTENCE)  # seeded


def test_replace_and_add_draw_whole_words_of_the_models_vocabulary(tiny_models):
    from transformers import AutoTokenizer

    from trainables.methods.tsdae.noise import vocabulary_words

    tokenizer = AutoTokenizer.from_pretrained(tiny_models["bert"])
    words = vocabulary_words(tokenizer)
    assert words and all(w.isalpha() and not w.startswith("##") for w in words)
    assert not set(words) & set(tokenizer.all_special_tokens)


def test_an_untied_decoder_and_max_pooling_train(tiny_models, stsb_sentences):
    from argparse import Namespace

    from trainables.methods.tsdae.training import Training, objective_settings

    args = Namespace(ct_variant="official", shared_settings=False, batch_size=4, steps=2)
    config = {**objective_settings("tsdae", args, 64, 64), "objective": "tsdae", "seed": 0}
    config.update(_model_path=tiny_models["bert"], noise="replace", noise_ratio=0.3, pooling="max", tied_decoder=False)
    training = Training(config, stsb_sentences[:64], "cpu")
    assert training.st[1].pooling_mode == "max" and training.noise.kind == "replace"
    encoder = training.st[0].auto_model.encoder.layer[0].attention.self.query.weight
    decoder = training.loss.decoder.bert.encoder.layer[0].attention.self.query.weight
    assert encoder.data_ptr() != decoder.data_ptr()  # a separate copy
    before = decoder.detach().clone()
    training.run(2)
    assert not torch.equal(before, decoder.detach())  # trained too
    tied = Training({**config, "tied_decoder": True}, stsb_sentences[:64], "cpu")
    ours = tied.st[0].auto_model.encoder.layer[0].attention.self.query.weight
    assert ours.data_ptr() == tied.loss.decoder.bert.encoder.layer[0].attention.self.query.weight.data_ptr()


@pytest.mark.parametrize("name", ["tsdae-table5", "tsdae-table6", "tsdae-table7", "tsdae-tying"])
def test_the_appendix_presets_plan_the_papers_grid(name, tmp_path, data_dir, tiny_models, capsys):
    from trainables.methods.tsdae import paper

    argv = ["--preset", name, "--models", tiny_models["bert"], "--max-sentences", "64", "--seeds", "0"]
    argv += ["--data-dir", str(data_dir), "--storage-path", str(tmp_path / "runs")]
    plan = _plan(argv)
    got = {(c["noise"], c["noise_ratio"], c["pooling"], c["tied_decoder"]) for c in plan.configs}
    wanted = {
        tuple(dict(r.match)[k] for k in ("noise", "noise_ratio", "pooling", "tied_decoder"))
        for r in paper.APPENDIX_A_ROWS[name]
    }
    assert got == wanted and len(plan.configs) == len(wanted)
    assert {(c["steps"], c["eval_steps"], c["corpus"], c["objective"]) for c in plan.configs} == {
        (30_000, 1_500, "wiki", "tsdae")
    }
    code, out, _ = _dry_run(argv, capsys)
    assert code == 0 and f"trials: {len(wanted)}" in out
    full = _plan(
        argv[:-6] + ["--data-dir", str(data_dir), "--storage-path", str(tmp_path / "runs"), "--max-sentences", "64"]
    )
    assert len(full.configs) == 5 * len(wanted)  # the paper's five seeds


@pytest.mark.parametrize(
    "flags, message",
    [
        ("--noise shuffle", "--noise unknown 'shuffle'"),
        ("--noise-ratio 0.95", "--noise-ratio unknown '0.95'"),
        ("--noise-ratio 0.3,1", "unknown '1'"),
        ("--poolings avg", "--poolings unknown 'avg'"),
        ("--pooling avg", "--pooling"),
        ("--decoder shared", "--decoder unknown 'shared'"),
        ("--corpus EMPTY", "no sentence in its 2 line(s)"),
        ("--corpus ZERO", "the file is empty"),
    ],
)
def test_a_bad_appendix_setting_or_an_empty_corpus_is_one_line_exit_2_nothing_written(
    flags, message, tmp_path, data_dir, tiny_models, capsys
):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    (tmp_path / "zero.txt").write_text("")
    argv = [w.replace("EMPTY", str(empty)).replace("ZERO", str(tmp_path / "zero.txt")) for w in flags.split()]
    argv += ["--models", tiny_models["bert"], "--data-dir", str(data_dir), "--storage-path", str(tmp_path / "runs")]
    code = tsdae.main([*argv, "--mlflow-uri", f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "runs").exists()


@pytest.mark.sweep
def test_the_appendix_presets_run_on_a_tiny_model_and_the_report_shows_tables_5_to_7(
    sweep_env, tiny_models, monkeypatch
):
    """Every Appendix A preset runs (a tiny model; the paper's grid, its 30K-step budget shortened in the
    presets themselves, since a budget given beside a preset unlabels its runs), and the report puts each
    table's published STS-B dev scores beside the runs', matched by noise, ratio, pooling and decoder, naming
    the corpus that ran in place of the paper's SNLI+MultiNLI sentences."""
    from dataclasses import replace

    import pandas as pd

    from analysis.report import build_report
    from trainables.methods.tsdae import paper

    for name in paper.APPENDIX_A_ROWS:
        short = replace(paper.PRESETS[name], flags={**paper.PRESETS[name].flags, "steps": 4, "eval_steps": 2})
        monkeypatch.setitem(paper.PRESETS, name, short)
    short = ["--models", tiny_models["bert"], "--seeds", "0", "--max-sentences", "64"]
    for name in paper.APPENDIX_A_ROWS:
        assert tsdae.main(["--preset", name, *short, "--name", name, *sweep_env["base"]]) == 0, name
    build_report(sweep_env["uri"], sweep_env["tmp"] / "report")
    text = (sweep_env["tmp"] / "report" / "README.md").read_text()
    for name, rows in paper.APPENDIX_A_ROWS.items():
        table = pd.read_csv(sweep_env["tmp"] / "report" / "tables" / f"paper_{name}.csv").set_index("row")
        assert [str(label) for label in table.index] == [r.label for r in rows], name
        assert (table["runs"] == 1).all(), name  # each published row matched by exactly its run
        assert table["STS-B dev (paper)"].tolist() == [dict(r.values)["STS-B dev"] for r in rows]
        assert table["STS-B dev (ours)"].notna().all()
    assert table.loc["tied", "STS-B dev (paper)"] == 79.15
    assert "corpus (the paper's: SNLI+MultiNLI sentences): `wiki`" in text and "wiki1m-prefix" in text
    assert "Table 6 (Appendix A)" in text and "78.77" in text


# --- what docs/methods/ states ---------------------------------------------------------------------------


def _methods_md() -> str:
    from trainables.core.paths import PROJECT_ROOT

    return "\n".join(p.read_text() for p in sorted((PROJECT_ROOT / "docs" / "methods").glob("*.md")))


def test_every_module_the_methods_page_names_as_code_exists():
    from trainables.core.paths import PROJECT_ROOT

    files = {p.name for p in PROJECT_ROOT.rglob("*.py") if ".venv" not in p.parts}
    for line in (x for x in _methods_md().splitlines() if x.startswith("Code:") or x.startswith("| M")):
        for name in re.findall(r"`([\w/]+\.py)`", line):
            assert (PROJECT_ROOT / name).is_file() if "/" in name else name in files, (name, line)


def test_every_tsdae_preset_is_on_the_methods_page_and_the_wiki_sample_is_sized_as_it_says(data_dir):
    text = _methods_md()
    for name in _tsdae_presets():
        assert f"--preset {name} " in text, name
    from trainables.methods.tsdae.checks import read_corpus

    lines = (data_dir / "wiki-sentences" / "wiki1m-prefix.txt").read_text().splitlines()
    sentences = read_corpus("wiki", data_dir, None)[0]
    assert f"{len(lines):,} lines, {len(sentences):,} distinct sentences" in text
    assert -(-len(sentences) // 512) == 23 and "batch 512 is 23 steps" in text


def test_the_pareto_rule_the_methods_page_states_keeps_the_front_beyond_the_top_share():
    from sweeps.engine.pareto_asha import rung_decision

    # three trials: the third is on the front (the smallest size) but last by the ordering's share
    records = {"a": (0.1, 5.0), "b": (0.2, 4.0), "c": (0.9, 1.0)}
    assert rung_decision(records, "c", 3)[0] and rung_decision(records, "c", 3)[1] == 0
    assert "or if it is on the front there\n(non-dominated rank 0)" in _methods_md()
