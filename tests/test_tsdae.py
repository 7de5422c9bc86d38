"""TSDAE and its baselines (trainables/methods/tsdae/method.py): every objective through the real sweep script,
refusal of encoders without a causal-LM decoder, decoder weight tying, and learning on a tiny BERT."""

import pytest
from mlflow_helpers import runs_by_role

from trainables.core.errors import SweepInputError


@pytest.mark.sweep  # the script's smoke sweep (tests/test_sweep_scripts.py runs every other script's)
def test_every_objective_runs_through_the_sweep_script(sweep_env):
    from sweep_helpers import check_smoke_runs

    from sweeps import tsdae

    assert tsdae.main(["--smoke-test", "--name", "smoke-tsdae", *sweep_env["base"]]) == 0
    check_smoke_runs(sweep_env["uri"], "tsdae")  # one finished parent, every child finished with its contract
    _, children = runs_by_role(sweep_env["uri"])
    assert sorted(c.data.params["objective"] for c in children) == ["ct", "mlm", "none", "simcse", "tsdae"]
    for child in children:
        assert child.info.status == "FINISHED"
        assert "best_dev_spearman" in child.data.metrics
        params = child.data.params
        assert (params["noise"], params["reference_rows"], params["reference_by"]) == (
            "delete" if params["objective"] == "tsdae" else "None",  # TSDAE's noise; None for the others
            "objective=none",
            "corpus,model",
        )
        expected = {  # each objective's own paper's settings (settings.py), --smoke-test's 8 a batch
            "none": ("0", "None", "mean", "none", "none"),
            "tsdae": ("4", "3e-05", "cls", "adamw", "constant"),
            "mlm": ("4", "5e-05", "mean", "adamw", "linear"),
            "simcse": ("4", "5e-05", "cls", "adamw", "linear"),  # as the TSDAE paper ran it
            "ct": ("4", "1e-05", "mean", "rmsprop", "ct-piecewise"),
        }[params["objective"]]
        keys = ("steps", "lr", "pooling", "optimizer", "schedule")
        assert tuple(params[k] for k in keys) == expected, params["objective"]
        assert params["settings"] == "paper"
    by_objective = {c.data.params["objective"]: c.data.params for c in children}
    assert (by_objective["simcse"]["mlp"], by_objective["simcse"]["temperature"]) == ("keep", "0.05")
    assert by_objective["simcse"]["simcse_settings"] == "tsdae-paper"
    assert by_objective["tsdae"]["decoder_dropout"] == "True" and by_objective["ct"]["dropout"] == "False"
    assert (by_objective["tsdae"]["final_weights"], by_objective["simcse"]["final_weights"]) == ("last", "best-dev")


@pytest.mark.parametrize("kind", ["mpnet"])
def test_encoders_without_a_causal_decoder_are_refused(kind, tiny_models):
    from trainables.methods.tsdae.checks import check_decoder

    with pytest.raises(SweepInputError, match="no causal-LM decoder.*--objective mlm,simcse,ct"):
        check_decoder(tiny_models[kind], "my-mpnet")
    check_decoder(tiny_models["bert"], "bert")


def test_decoder_weights_are_tied_after_a_step(tiny_models):
    import torch
    from sentence_transformers import losses

    from trainables.methods.tsdae.training import sentence_model

    model = sentence_model(tiny_models["bert"], "cls", 32)
    loss = losses.DenoisingAutoEncoderLoss(model, tie_encoder_decoder=True)
    encoder, decoder = model[0].auto_model, loss.decoder
    shared = decoder.bert.embeddings.word_embeddings.weight
    assert shared.data_ptr() == encoder.embeddings.word_embeddings.weight.data_ptr()
    assert (
        decoder.bert.encoder.layer[0].attention.self.query.weight
        is encoder.encoder.layer[0].attention.self.query.weight
    )
    optimizer = torch.optim.AdamW(loss.parameters(), lr=1e-3)
    before = encoder.encoder.layer[0].attention.self.query.weight.detach().clone()
    features = [model.tokenize(["a cat sat"]), model.tokenize(["a cat sat on the mat"])]
    loss(features, None).backward()
    optimizer.step()
    after = decoder.bert.encoder.layer[0].attention.self.query.weight
    assert not torch.equal(before, after)
    assert torch.equal(after, encoder.encoder.layer[0].attention.self.query.weight)


def test_deletion_noise_is_sentence_transformers_own(monkeypatch, stsb_sentences):
    """Same numpy seed -> the same noisy sentences as `DenoisingAutoEncoderDataset.delete`, whose
    NLTK tokenizer is made to skip the punkt sentence splitter (its data is not installable offline)."""
    import functools

    import nltk
    import numpy as np
    from sentence_transformers.sentence_transformer.datasets import DenoisingAutoEncoderDataset

    from trainables.methods.tsdae.noise import DELETE_RATIOS, noisy

    monkeypatch.setattr(nltk, "word_tokenize", functools.partial(nltk.word_tokenize, preserve_line=True))
    sentences = [*stsb_sentences[:300], 'He said "don\'t go." Then (really) he left, e.g. at 5 p.m.', "one", ""]
    for ratio in (*DELETE_RATIOS.values(), 0.999):
        np.random.seed(7)
        theirs = [DenoisingAutoEncoderDataset.delete(s, ratio) for s in sentences]
        rng = np.random.RandomState(7)
        ours = [noisy(s, ratio, rng) for s in sentences]
        assert ours == theirs
        assert sum(a != b for a, b in zip(ours, sentences)) > 200  # the noise did something


def test_deletion_noise_drops_the_ratio_and_keeps_a_word():
    import numpy as np

    from trainables.methods.tsdae.noise import DELETE_RATIOS, noisy

    rng = np.random.RandomState(0)
    words = " ".join(f"w{i}" for i in range(1000))
    for variant, ratio in DELETE_RATIOS.items():
        kept = noisy(words, ratio, rng).split()
        assert abs(len(kept) / 1000 - (1 - ratio)) < 0.05, variant
        assert kept == [w for w in words.split() if w in set(kept)]  # order kept
    assert noisy("one", 0.999, rng) == "one"


def test_report_table_has_method_by_model_per_corpus_with_gains_over_the_untrained_encoder(tmp_path):
    """The TSDAE contract (corpus, model, objective, seed; reference rows objective=none by corpus and model)
    through the
    analysis: one scores table, mean ± std over seeds on every set, and each objective's gain over
    the untrained encoder of the same corpus and model."""
    from argparse import Namespace

    import pandas as pd
    from analysis_helpers import log_runs

    from analysis.report import build_report
    from trainables.methods.tsdae.method import TSDAE

    contract = {"method": "tsdae", **TSDAE.metrics(Namespace(eval_sets=["stsb", "sickr"])).params()}
    untrained = {"m1": 50.0, "m2": 60.0}
    rows = []
    for corpus, shift in (("wiki", 0.0), ("mine.txt", 10.0)):
        for model, base in untrained.items():
            rows.append(
                {
                    "corpus": corpus,
                    "model": model,
                    "objective": "none",
                    "seed": 0,
                    "best_dev_spearman": base,
                    "stsb_spearman": base,
                    "sickr_spearman": base + 1.0,
                }
            )
            for objective, gain in (("tsdae", 5.0), ("simcse", -2.0)):
                for seed in (0, 1, 2):
                    score = base + gain + shift + seed  # mean over seeds: base + gain + shift + 1, std 1
                    rows.append(
                        {
                            "corpus": corpus,
                            "model": model,
                            "objective": objective,
                            "seed": seed,
                            "best_dev_spearman": score,
                            "stsb_spearman": score,
                            "sickr_spearman": score + 1.0,
                        }
                    )
    report = build_report(log_runs(tmp_path, contract, rows), tmp_path / "report")
    table = pd.read_csv(tmp_path / "report" / "tables" / "scores_tsdae_all.csv")
    assert list(table.columns[:3]) == ["corpus", "model", "objective"] and len(table) == 2 * 2 * 3
    row = table[(table["corpus"] == "mine.txt") & (table["model"] == "m2") & (table["objective"] == "tsdae")].iloc[0]
    assert row["stsb_spearman"] == 76.0 and row["stsb_spearman_std"] == 1.0
    assert row["stsb_spearman_vs_reference"] == 16.0 and row["sickr_spearman_vs_reference"] == 16.0
    none = table[table["objective"] == "none"]
    assert (none["stsb_spearman_vs_reference"] == 0).all() and none["is_reference"].all()
    markdown = (tmp_path / "report" / "tables" / "scores_tsdae_all.md").read_text()
    assert "76.00 ± 1.00 (max 77.00) (Δ +16.00)" in markdown and "(Δ +6.00)" in markdown and "(Δ -1.00)" in markdown
    assert "none (reference)" in markdown and "with the same corpus, model" in markdown
    assert report.index.read_text().count("scores_tsdae_all.md") >= 1


def _training(model_path, objective, sentences, **flags):
    """A `Training` of `objective` at its own paper's settings (settings.py) but for the flags given
    (`lr`, `batch_size`, `max_length`, `pooling`, `steps`, `shared_settings`, ...), as a sweep plans it."""
    from argparse import Namespace

    from trainables.methods.tsdae.training import Training, objective_settings

    args = Namespace(**{"steps": 4, "eval_steps": 2, "ct_variant": "official", **flags})
    config = {
        "objective": objective,
        "seed": 0,
        "_model_path": model_path,
        "noise": "delete",
        "ct_variant": args.ct_variant,
        **objective_settings(objective, args, len(sentences), 64),
    }
    return Training(config, sentences, "cpu")


def test_official_ct_is_two_models_groups_of_8_pairs_rmsprop_schedule_and_no_dropout(tiny_models, stsb_sentences):
    import torch
    from sentence_transformers import losses

    from trainables.methods.tsdae.settings import CT_RATES, learning_rate

    training = _training(tiny_models["bert"], "ct", stsb_sentences[:200])
    assert (training.config["batch_size"], training.config["pooling"], training.config["max_length"]) == (
        16,
        "mean",
        64,
    )
    assert isinstance(training.loss, losses.ContrastiveTensionLoss) and isinstance(
        training.optimizer, torch.optim.RMSprop
    )
    assert training.loss.model1 is not training.loss.model2 and training.loss.model2 is training.st
    first, second = training.features()
    assert first["input_ids"].shape[0] == 16
    same = [
        torch.equal(a[m.bool()], b[n.bool()])
        for a, m, b, n in zip(
            first["input_ids"], first["attention_mask"], second["input_ids"], second["attention_mask"]
        )
    ]
    assert same == [i % 8 == 0 for i in range(16)]  # 1 positive, then 7 negatives, twice
    copy_before = training.loss.model1[0].auto_model.encoder.layer[0].output.dense.weight.detach().clone()
    training.run(2)
    assert not training.loss.training and not training.st.training  # dropout off while training
    assert not torch.equal(copy_before, training.loss.model1[0].auto_model.encoder.layer[0].output.dense.weight)
    assert training.optimizer.param_groups[0]["lr"] == CT_RATES[0]
    ct = {"lr": CT_RATES[0], "schedule": "ct-piecewise"}  # M5's piecewise-constant rate at optimiser step s
    assert [learning_rate(ct, s) for s in (0, 499, 500, 1999, 2000, 10_000)] == [1e-5, 1e-5, 8e-6, 4e-6, 2e-6, 2e-6]
    in_batch = _training(tiny_models["bert"], "ct", stsb_sentences[:200], ct_variant="in-batch", batch_size=8)
    assert isinstance(in_batch.loss, losses.ContrastiveTensionLossInBatchNegatives)
    assert isinstance(in_batch.optimizer, torch.optim.AdamW) and in_batch.features()[0]["input_ids"].shape[0] == 8


def test_cost_grows_with_steps_and_tsdae_costs_more_than_mlm(tiny_models, stsb_sentences):
    from argparse import Namespace

    from trainables.methods.tsdae.method import trial_cost
    from trainables.methods.tsdae.training import objective_settings

    def cost(objective, steps):
        args = Namespace(
            steps=steps, eval_steps=100, batch_size=8, ct_variant="official", max_length=128, gpu_tflops=None
        )
        return trial_cost(
            tiny_models["bert"],
            {**objective_settings(objective, args), "objective": objective},
            args,
            stsb_sentences,
            1500,
            0,
        )

    assert cost("tsdae", 2000).seconds > 1.5 * cost("tsdae", 1000).seconds
    assert cost("tsdae", 1000).seconds > cost("mlm", 1000).seconds
    assert cost("tsdae", 1000).memory_bytes > cost("mlm", 1000).memory_bytes
    assert cost("none", 1000).seconds < cost("mlm", 1000).seconds


def _stsb_corpus(data_dir) -> list[str]:
    from trainables.data.stsb import load_stsb

    train = load_stsb(data_dir, splits=("train",))["train"]
    return list(dict.fromkeys([e.sentence1 for e in train] + [e.sentence2 for e in train]))


def _dev_spearman(training, dev) -> float:
    training.st.eval()
    return dev.score(training.st.encode(dev.sentences, batch_size=128, convert_to_numpy=True))["stsb_dev_spearman"]


@pytest.fixture
def one_thread():
    """torch on one thread while the test runs: a 128-wide model's ops are too small to share out (300 steps: 13.3 s
    of CPU on one thread, 17.9 s on two, and no faster)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow  # about 2 minutes on one core; the default run has the held-out loss test below
def test_tsdae_raises_stsb_dev_spearman_of_a_tiny_random_bert_above_the_untrained(tmp_path, data_dir, one_thread):
    """A random BERT's CLS vector is no weak baseline (~45 Spearman on STS-B dev: a random
    transformer hashes the bag of words), and TSDAE first lowers it (~23 after 250 steps) before it
    learns. With a word-level vocabulary (the 8,000 most frequent STS-B training words; the fixtures'
    600 words spell most content words in characters, and then 3,000 steps are not enough), a
    128-wide, 2-layer BERT at lr 1e-3 passes the untrained score by ~2,500 steps (57.7 after 4,000 in a scratch run)."""
    from trainables.encoders.tiny import build_tiny_model
    from trainables.evaluation.sets import load_suite
    from trainables.training.device import seed_everything

    corpus = _stsb_corpus(data_dir)
    seed_everything(0)
    model = build_tiny_model("bert", tmp_path / "bert128", layers=2, hidden=128, sentences=corpus, words=8000)
    dev = load_suite(["stsb_dev"], data_dir)
    training = _training(str(model), "tsdae", corpus, lr=1e-3, max_length=64, batch_size=8)
    untrained = _dev_spearman(training, dev)
    scores = []
    for _ in range(8):  # at most 4,000 steps; done once the score has passed
        training.run(500)
        scores.append(_dev_spearman(training, dev))
        if scores[-1] > untrained + 3:
            break
    assert max(scores) > untrained + 3, (untrained, scores)


@pytest.mark.sweep
def test_tsdae_learns_to_reconstruct_held_out_sentences_through_the_tied_decoder(tmp_path, data_dir, stsb_sentences):
    """100 steps at lr 1e-3 lower the reconstruction loss of held-out sentences (fixed noise) well
    below the untrained model's."""
    import numpy as np
    import torch

    from trainables.encoders.tiny import build_tiny_model
    from trainables.methods.tsdae.noise import noisy

    model = build_tiny_model("bert", tmp_path / "bert", sentences=stsb_sentences)
    corpus = _stsb_corpus(data_dir)
    held_out, train = corpus[:64], corpus[64:]
    training = _training(str(model), "tsdae", train, lr=1e-3, max_length=64, batch_size=8)
    rng = np.random.RandomState(1)
    batches = [([noisy(s, 0.6, rng) for s in held_out[i : i + 16]], held_out[i : i + 16]) for i in range(0, 64, 16)]

    def held_out_loss() -> float:
        training.loss.eval()
        with torch.no_grad():
            return float(
                np.mean(
                    [float(training.loss([training._tokenize(a), training._tokenize(b)], None)) for a, b in batches]
                )
            )

    before = held_out_loss()
    training.run(100)
    after = held_out_loss()
    assert after < before - 1.0, (before, after)
