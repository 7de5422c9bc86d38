"""A sweep never ends with status 0 having learned nothing: input that cannot train (a corpus that is not
text or holds no sentence, a batch with no in-batch negative, `--smoke-test` beside flags that are wrong)
is refused before any compute, and training that diverges fails its trial once, with the reason, for
every method through one check (trainables/training/divergence.py, called by `EpochTrainable`)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import torch
from mlflow_helpers import runs_by_role

from sweeps import improvements, sed, tsdae
from trainables.core import schema
from trainables.core.errors import TrialFailure

LIMIT_S = 20  # a refusal reads flags and a file or two, no Ray, no trial: seconds (20: slack for a busy machine)


@pytest.fixture
def refused(tmp_path, data_dir, capsys):
    """`refused(script, *flags)`: the script's message, after checking it exits 2 within LIMIT_S and writes
    nothing (no storage folder, no MLflow store)."""
    storage = tmp_path / "runs"

    def invoke(script, *flags):
        started = time.perf_counter()
        code = script.main(["--storage-path", str(storage), "--data-dir", str(data_dir), *flags])
        seconds = time.perf_counter() - started
        err = capsys.readouterr().err
        assert code == 2, err
        assert not storage.exists(), f"bad input wrote {sorted(map(str, storage.rglob('*')))}"
        assert not list(tmp_path.rglob("mlflow.db"))
        assert seconds < LIMIT_S, f"the refusal took {seconds:.1f} s"
        print(f"refused in {seconds:.2f} s: {err.strip()}")
        return err

    return invoke


def _corpus(tmp_path: Path, name: str, content: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


# --- the corpus --------------------------------------------------------------------------------
CORPORA = {
    "binary": (b"\x89PNG\r\n\x1a\n" + bytes(range(128, 256)) * 8, "not valid UTF-8"),
    "nul-bytes": (b"a man\x00\x00\x01 plays\n", "not text (a NUL byte"),
    "blank-lines": (b"\n   \n\t\n\n", "no sentence in its 4 line(s) (every line is blank)"),
    "empty": (b"", "the file is empty"),
}


@pytest.mark.parametrize("kind", list(CORPORA))
def test_a_tsdae_corpus_that_is_not_text_or_holds_no_sentence_is_refused(refused, tmp_path, tiny_models, kind):
    content, message = CORPORA[kind]
    corpus = _corpus(tmp_path, f"{kind}.txt", content)
    err = refused(tsdae, "--models", tiny_models["bert"], "--corpus", corpus, "--eval-sets", "none")
    assert "error: --corpus" in err and corpus in err and message in err and "one sentence a line" in err


def test_a_tsdae_corpus_smaller_than_a_batch_is_refused(refused, tmp_path, tiny_models):
    corpus = _corpus(tmp_path, "three.txt", b"A man plays.\n\nA dog runs.\nTwo cats sit.\n")
    err = refused(tsdae, "--models", tiny_models["bert"], "--corpus", corpus, "--objective", "tsdae,simcse")
    assert f"--corpus {corpus}: 3 sentence(s), but one batch of --objective tsdae needs 8" in err


def test_the_tsdae_stage_refuses_an_empty_corpus(refused, tmp_path, tiny_models):
    corpus = _corpus(tmp_path, "empty.txt", b"")
    err = refused(improvements, "--models", tiny_models["bert"], "--improvement", "tsdae", "--tsdae-corpus", corpus)
    assert f"--tsdae-corpus {corpus}: the file is empty" in err


def test_sed_refuses_a_binary_corpus(refused, tmp_path, tiny_models):
    corpus = _corpus(tmp_path, "corpus.bin", bytes(range(128, 256)) * 8)
    teachers = [tiny_models["bert"], str(shutil.copytree(tiny_models["bert"], tmp_path / "second-teacher"))]
    flags = ["--teachers", ",".join(teachers), "--student", tiny_models["bert"], "--corpus", corpus, "--sets", "stsb"]
    err = refused(sed, *flags)
    assert f"--corpus: {corpus}, line 1: not valid UTF-8" in err


def test_blank_lines_inside_a_corpus_are_dropped_and_counted(tmp_path, capsys):
    from trainables.data.sentences import read_text_corpus
    from trainables.methods.sed.targets import read_corpus as sed_corpus
    from trainables.methods.tsdae.checks import read_corpus as tsdae_corpus

    corpus = _corpus(tmp_path, "mine.txt", b"\xef\xbb\xbfA man plays.\n\n  \nA dog runs. \r\n\n")
    assert read_text_corpus(corpus) == ["A man plays.", "A dog runs."]
    assert "--corpus " + corpus + ": 3 blank line(s) dropped, 2 sentences kept" in capsys.readouterr().out
    assert tsdae_corpus(corpus, None, None)[0] == sed_corpus(corpus, None, None)[0] == ["A man plays.", "A dog runs."]


# --- in-batch negatives ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "flags, objective",
    [(("--objective", "simcse"), "simcse"), (("--objective", "tsdae,ct", "--ct-variant", "in-batch"), "ct")],
)
def test_a_batch_of_one_is_refused_where_the_negatives_are_the_batch(refused, tiny_models, flags, objective):
    err = refused(tsdae, "--models", tiny_models["bert"], "--batch-size", "1", *flags)
    assert f"--batch-size 1 is too small for --objective {objective}" in err
    assert "a batch of one has none, so the loss is 0 at every step" in err and "--batch-size 2 or more" in err


# --- --smoke-test beside other flags -----------------------------------------------------------
@pytest.mark.parametrize(
    "flags, message",
    [
        (("--steps", "0"), "--steps must be a positive integer, got 0"),
        (("--objective", "bogus"), "--objective unknown 'bogus'"),
        (("--steps", "0", "--objective", "bogus"), "--objective unknown 'bogus'"),
        (("--method", "bogus"), "--objective unknown 'bogus'"),  # the old flag: a warning, then the same check
    ],
)
def test_flags_given_beside_smoke_test_are_kept_and_checked(refused, flags, message):
    assert message in refused(tsdae, "--smoke-test", *flags)


def test_smoke_values_fill_in_only_the_flags_not_given():
    from sweeps.engine import presets
    from sweeps.engine.cli import build_parser
    from trainables.methods import get_method

    method = get_method("tsdae")
    argv = ["--smoke-test", "--objective", "simcse", "--seeds", "3"]
    parser = build_parser("tsdae", "", method)
    args = presets.apply(parser, argv, parser.parse_args(argv), method)
    assert (args.objectives, args.seeds) == (["simcse"], [3])  # given: kept
    assert (args.steps, args.eval_steps, args.max_sentences) == (4, 2, [64])  # not given: the smoke values
    plain = build_parser("tsdae", "", method)
    assert presets.apply(plain, ["--steps", "5"], plain.parse_args(["--steps", "5"]), method).steps == 5


# --- divergence: one check for every method ----------------------------------------------------
def test_one_check_fails_a_non_finite_loss_or_non_finite_weights():
    from trainables.training.divergence import check_converging

    finite = [torch.ones(3), torch.zeros(2)]
    check_converging(1, 0.5, finite, 1e-5)
    with pytest.raises(TrialFailure, match=r"training diverged: the mean loss of epoch 1 is nan \(--lr 1e\+30\)"):
        check_converging(1, float("nan"), finite, 1e30)
    # the setting that can cause it is named, the most suspect first (a weight decay of 1e20, not the lr)
    causes = {"lr": 0.01, "weight_decay": 1e20, "warmup_ratio": 0.1}
    with pytest.raises(TrialFailure, match=r"\(--lr 0.01, --weight-decay 1e\+20, .*\); lower --weight-decay or --lr"):
        check_converging(1, float("nan"), finite, settings=causes)
    with pytest.raises(TrialFailure, match="the mean loss of epoch 2 is inf"):
        check_converging(2, float("inf"))
    with pytest.raises(TrialFailure, match="training diverged: the weights are not finite after epoch 3"):
        check_converging(3, 0.5, [torch.ones(3), torch.tensor([1.0, float("inf")])])


def test_every_trainable_fails_its_trial_through_the_shared_check():
    """An `EpochTrainable` whose epoch returns a NaN loss (or leaves NaN weights) ends with `trial_failed`,
    whichever method it is: the check is in the base class, not in each method's loop."""
    from trainables.training.trainable import EpochTrainable

    class Toy(EpochTrainable):
        def build(self, config, data):
            self.weight = torch.nn.Parameter(torch.ones(2))
            self.evaluated = 0

        def train_epoch(self, epoch):
            if self.trial_config["break"] == "weights":
                self.weight.data[0] = float("nan")
                return {"train_loss": 0.1}
            return {"train_loss": float("nan")}

        def evaluate(self):
            self.evaluated += 1
            return {"dev_spearman": 0.0}

        def parameter_count(self):
            return 2

        def trained_parameters(self):
            return [self.weight]

    for broken, reason in (("loss", "the mean loss of epoch 1 is nan"), ("weights", "the weights are not finite")):
        trial = Toy(config={"epochs": 2, "seed": 0, "lr": 1e30, "break": broken})
        result = trial.step()
        assert result["done"] and reason in result["trial_failed"] and result["trial_failed"].startswith("TrialFailure")
        assert trial.evaluated == 0, "a diverged epoch is not evaluated"


@pytest.mark.sweep
def test_a_diverged_tsdae_objective_fails_its_trial_once_with_the_reason(sweep_env, tiny_models, capsys):
    flags = "--method simcse --lr 1e30 --steps 2 --eval-steps 2 --max-sentences 32 --batch-size 8 --eval-sets none"
    code = tsdae.main(
        ["--models", tiny_models["bert"], *flags.split(), "--seeds", "0", "--name", "nan", *sweep_env["base"]]
    )
    out = capsys.readouterr().out
    assert code == 1, out
    assert "1 trial(s) failed:" in out and "training diverged: the mean loss of epoch 1 is nan (--lr 1e+30" in out
    parents, children = runs_by_role(sweep_env["uri"])
    assert parents[0].info.status == "FAILED" and len(children) == 1
    assert children[0].info.status == "FAILED"
    assert "training diverged" in children[0].data.tags[schema.TAG_FAILURE]
    assert not list(Path(sweep_env["storage"], "nan").rglob("error.txt")), "not an error that Tune retries"
