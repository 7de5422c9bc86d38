"""TSDAE and its baselines (trainables/tsdae.py): every objective through the real sweep script,
refusal of encoders without a causal-LM decoder, decoder weight tying, and learning on a tiny BERT."""
import pytest

from mlflow_helpers import runs_by_role
from trainables.errors import SweepInputError


def _flags(sweep_env):
    return ["--storage-path", str(sweep_env["storage"]), "--mlflow-uri", sweep_env["uri"], "--experiment", "test",
            "--data-dir", sweep_env["flags"][sweep_env["flags"].index("--data-dir") + 1],
            "--cpus-per-trial", "0.5", "--gpus-per-trial", "0"]


@pytest.mark.slow  # the default run has the script's --smoke-test in tests/test_sweep_scripts.py
def test_every_objective_runs_through_the_sweep_script(sweep_env):
    from sweeps import tsdae

    assert tsdae.main(["--smoke-test", "--name", "smoke-tsdae", *_flags(sweep_env)]) == 0
    parents, children = runs_by_role(sweep_env["uri"])
    assert len(parents) == 1
    assert sorted(c.data.params["objective"] for c in children) == ["ct", "mlm", "simcse", "tsdae"]
    for child in children:
        assert child.info.status == "FINISHED"
        assert "best_dev_spearman" in child.data.metrics
        params = child.data.params
        assert (params["noise"], params["pooling"], params["lr"], params["batch_size"]) == ("delete", "cls", "3e-05", "8")


@pytest.mark.parametrize("kind", ["mpnet"])
def test_encoders_without_a_causal_decoder_are_refused(kind, tiny_models):
    from trainables.tsdae import check_decoder

    with pytest.raises(SweepInputError, match="no causal-LM decoder.*--method mlm,simcse,ct"):
        check_decoder(tiny_models[kind], "my-mpnet")
    check_decoder(tiny_models["bert"], "bert")


def test_decoder_weights_are_tied_after_a_step(tiny_models):
    import torch
    from sentence_transformers import losses

    from trainables.tsdae import sentence_model

    model = sentence_model(tiny_models["bert"], "cls", 32)
    loss = losses.DenoisingAutoEncoderLoss(model, tie_encoder_decoder=True)
    encoder, decoder = model[0].auto_model, loss.decoder
    shared = decoder.bert.embeddings.word_embeddings.weight
    assert shared.data_ptr() == encoder.embeddings.word_embeddings.weight.data_ptr()
    assert decoder.bert.encoder.layer[0].attention.self.query.weight is encoder.encoder.layer[0].attention.self.query.weight
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

    from trainables.tsdae import DELETE_RATIOS, noisy

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

    from trainables.tsdae import DELETE_RATIOS, noisy

    rng = np.random.RandomState(0)
    words = " ".join(f"w{i}" for i in range(1000))
    for variant, ratio in DELETE_RATIOS.items():
        kept = noisy(words, ratio, rng).split()
        assert abs(len(kept) / 1000 - (1 - ratio)) < 0.05, variant
        assert kept == [w for w in words.split() if w in set(kept)]  # order kept
    assert noisy("one", 0.999, rng) == "one"
