"""What makes a sweep faster without changing its results: the costliest trials start first, a
batch encoded in length-sorted chunks (the same embeddings, loss and gradients), evaluation that
encodes each distinct sentence once, and length grouping that keeps the epoch random."""

import dataclasses

import numpy as np
import pytest
import torch
from mlflow_helpers import runs_by_role
from scipy.stats import spearmanr
from sweep_helpers import SMALL_DAPT, sweep_args

from sweeps.electra_layers import main
from trainables.training.batches import CPU_FORWARD_CHUNK, forward_chunks, resolve_forward_chunk, train_batches


def _lengths(n=1600, seed=0):
    return np.random.default_rng(seed).integers(6, 80, size=n).tolist()


def _padded_tokens(batches, lengths):
    return sum(len(b) * max(lengths[i] for i in b) for b in batches)


def test_length_grouping_pads_less_and_keeps_the_epoch_random():
    lengths, batch = _lengths(), 32
    grouped = train_batches(lengths, batch, torch.Generator().manual_seed(1), length_grouped=True)
    plain = train_batches(lengths, batch, torch.Generator().manual_seed(1), length_grouped=False)
    assert sorted(i for b in grouped for i in b) == list(range(len(lengths)))
    assert sum(len(b) < batch for b in grouped) <= 1
    assert _padded_tokens(grouped, lengths) < 0.8 * _padded_tokens(plain, lengths)
    # batches alternate short and long at random: no trend from short to long through the epoch
    longest = [max(lengths[i] for i in b) for b in grouped]
    assert abs(spearmanr(range(len(longest)), longest).statistic) < 0.2
    # transformers' sampler runs each mega-batch (a quarter of this epoch) from long to short
    from transformers.trainer_pt_utils import LengthGroupedSampler

    order = list(LengthGroupedSampler(batch, lengths=lengths, generator=torch.Generator().manual_seed(1)))
    theirs = [max(lengths[i] for i in order[k : k + batch]) for k in range(0, len(order), batch)]
    assert sum(a >= b for a, b in zip(theirs, theirs[1:])) > 0.8 * len(theirs)
    assert sum(a >= b for a, b in zip(longest, longest[1:])) < 0.7 * len(longest)
    for b in grouped:  # sorted inside
        assert [lengths[i] for i in b] == sorted((lengths[i] for i in b), reverse=True)


def test_forward_chunks_sort_a_batch_by_length_and_cover_it():
    lengths = _lengths(64)
    chunks = forward_chunks(lengths, 16)
    assert sorted(i for c in chunks for i in c) == list(range(64)) and [len(c) for c in chunks] == [16] * 4
    assert [lengths[i] for c in chunks for i in c] == sorted(lengths)
    assert _padded_tokens(chunks, lengths) < 0.8 * 64 * max(lengths)
    assert forward_chunks(lengths, 0) == [list(range(64))]
    assert forward_chunks(lengths[:10], 16) == [list(range(10))]  # a batch within one chunk keeps its order


def test_auto_chunks_on_the_cpu_only_and_bad_values_are_refused():
    assert resolve_forward_chunk("auto", "cpu") == CPU_FORWARD_CHUNK
    assert resolve_forward_chunk("auto", torch.device("cuda", 0)) == 0
    assert resolve_forward_chunk(8, "cuda") == 8 and resolve_forward_chunk("0", "cpu") == 0
    with pytest.raises(ValueError, match="forward_chunk"):
        resolve_forward_chunk(-1, "cpu")


def _fine_tuning(task, forward_chunk):
    from transformers import AutoModel

    from trainables.training.pair_training import PairFineTuning

    torch.manual_seed(0)
    trial = PairFineTuning()
    config = {"seed": 0, "batch_size": 16, "lr": 1e-4, "weight_decay": 0.01, "warmup_ratio": 0.1}
    trial.init_fine_tuning(
        AutoModel.from_pretrained(task.model_path), task, {**config, "forward_chunk": forward_chunk}, "cpu", 1
    )
    return trial


def test_a_chunked_forward_gives_the_whole_batch_embeddings_loss_and_gradients(tiny_task):
    trial = _fine_tuning(tiny_task, 0)
    trial.model.eval()  # no dropout: both forwards must see the same network
    train = tiny_task.splits["train"]
    batch = list(range(24))
    sequences = [train.s1[i] for i in batch] + [train.s2[i] for i in batch]
    assert len({len(s) for s in sequences}) > 5, "the test needs sentences of many lengths"
    labels = torch.tensor([train.labels[i] for i in batch], dtype=torch.float32)
    results = {}
    for chunk in (0, 5):
        trial.forward_chunk = chunk
        trial.model.zero_grad()
        embeddings = trial._embed(sequences)
        loss = trial.task_def.loss(embeddings[:24], embeddings[24:], labels, None)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in trial.model.named_parameters() if p.grad is not None}
        results[chunk] = embeddings.detach(), loss.detach(), grads
    (whole, whole_loss, whole_grads), (chunked, chunked_loss, chunked_grads) = results[0], results[5]
    torch.testing.assert_close(chunked, whole, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(chunked_loss, whole_loss, rtol=1e-4, atol=1e-6)
    assert whole_grads.keys() == chunked_grads.keys() and len(whole_grads) > 10
    for name, grad in whole_grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, rtol=1e-3, atol=1e-6, msg=name)


def test_evaluation_encodes_each_distinct_sentence_once_and_scores_as_pair_by_pair(tiny_task, monkeypatch):
    from trainables.encoders.loading import encode
    from trainables.training import pair_training
    from trainables.training.batches import pad

    trial = _fine_tuning(tiny_task, "auto")
    trial.eval_batch_size = 7
    dev = tiny_task.splits["dev"]
    # 60 pairs, then 20 whose sentences all appear among them (a sentence on either side, and a pair again)
    s1 = dev.s1[:60] + dev.s2[:10] + dev.s1[10:20]
    s2 = dev.s2[:60] + dev.s1[20:30] + dev.s2[10:20]
    split = dataclasses.replace(dev, s1=s1, s2=s2, labels=dev.labels[:80])
    distinct = {tuple(s) for s in split.s1 + split.s2}
    assert len(distinct) <= 120 < len(split.s1 + split.s2)
    encoded = []

    def counting(model, ids, mask):
        encoded.append(len(ids))
        return encode(model, ids, mask)

    monkeypatch.setattr(pair_training, "encode", counting)
    outputs = trial.predict(split)
    assert sum(encoded) == len(distinct) and max(encoded) == 14
    with torch.no_grad():  # the reference: each pair's two sentences encoded on their own, in the data's order
        reference = [
            torch.nn.functional.cosine_similarity(
                *(encode(trial.model, *pad([sentence], tiny_task.pad_id)) for sentence in (a, b))
            ).item()
            for a, b in zip(split.s1, split.s2)
        ]
    np.testing.assert_allclose(outputs, reference, rtol=1e-4, atol=1e-5)


def test_the_epochs_differ_and_a_seed_repeats_its_epoch():
    lengths = _lengths(200)
    one = train_batches(lengths, 16, torch.Generator().manual_seed(3), True)
    again = train_batches(lengths, 16, torch.Generator().manual_seed(3), True)
    other = train_batches(lengths, 16, torch.Generator().manual_seed(4), True)
    assert one == again and one != other


@pytest.mark.sweep
def test_the_costliest_trials_start_first(sweep_env, tiny_models):
    sweep = "--layers 0,1,2 --seeds 0 --epochs 1 --max-concurrent 1 --name ordered"
    assert main(sweep_args(tiny_models["bert"], sweep, *sweep_env["flags"])) == 0
    _, children = runs_by_role(sweep_env["uri"])
    started = sorted(children, key=lambda c: c.info.start_time)
    assert [c.data.params["layer"] for c in started] == ["2", "1", "0"]
    # the default chunking, resolved for the device the trials ran on, is recorded in every run
    assert {(c.data.params["forward_chunk"], c.data.params["forward_chunk_used"]) for c in children} == {
        ("auto", str(CPU_FORWARD_CHUNK))
    }


@pytest.mark.parametrize("kind", ["bert", "electra-generator", "mpnet", "deberta-v2"])
def test_the_mlm_decoder_at_masked_positions_only_gives_the_full_logits_there(kind, tiny_models):
    from transformers import AutoModelForMaskedLM

    from trainables.methods.tmft.dapt import masked_positions_only

    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_pretrained(tiny_models[kind]).eval()
    ids = torch.randint(5, 50, (3, 9))
    mask = torch.ones_like(ids)
    mask[2, 6:] = 0
    rows = torch.zeros_like(ids, dtype=torch.bool)
    rows[0, 1], rows[1, 4], rows[2, 2], rows[2, 5] = True, True, True, True
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask).logits[rows]
        with masked_positions_only(model) as head:
            selected = head.select(rows)
            logits = head.masked_logits(model(input_ids=ids, attention_mask=mask).logits, selected)
    assert logits.shape == full.shape == (4, model.config.vocab_size)
    torch.testing.assert_close(logits, full, rtol=1e-5, atol=1e-5)
    if kind == "bert":
        assert head.fired  # the vocabulary projection really ran on the 4 rows alone


def test_a_dapt_batch_in_length_sorted_chunks_trains_as_one_batch(tiny_models, data_dir, tmp_path):
    """Without dropout, the stage's losses and weights are those of one forward per batch."""
    import json
    import shutil

    from safetensors.torch import load_file

    from trainables.methods.tmft import dapt

    model_dir = tmp_path / "no-dropout"
    shutil.copytree(tiny_models["bert"], model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (model_dir / "config.json").write_text(json.dumps(config))
    results = {}
    for chunks in (1, 4):
        stage = dapt.stage_config(corpus="sick+stsb-train", lr=1e-3, max_sentences=160, **SMALL_DAPT)
        out = tmp_path / f"chunks{chunks}"
        spec = {
            "model_path": str(model_dir),
            "data_dir": str(data_dir),
            "config": {**stage, "chunks": chunks},
            "root": str(out),
            "key": "k",
        }
        out.mkdir()
        results[chunks] = (dapt.compute(spec, out), load_file(str(out / "encoder" / "model.safetensors")))
    (one, weights_one), (four, weights_four) = results[1], results[4]
    assert one["length_chunks"] == 1 and four["length_chunks"] == 4
    for a, b in zip(one["history"], four["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-4)
        assert a["masked_accuracy"] == pytest.approx(b["masked_accuracy"], abs=1e-6)
    for name, tensor in weights_one.items():
        torch.testing.assert_close(weights_four[name], tensor, rtol=1e-4, atol=1e-5)


@pytest.mark.sweep
def test_tokenised_data_is_cached_across_sweeps_and_keyed_by_what_changes_it(
    tiny_models, data_dir, tmp_path, monkeypatch
):
    import shutil

    import transformers

    from trainables.training import tokenized
    from trainables.training.tokenized import load_task, tokenize_task, tokenized_cache_dir

    monkeypatch.setenv("EMBSWEEP_CACHE_DIR", str(tmp_path / "cache"))
    examples, checksums = load_task("stsb", data_dir)
    first = tokenize_task("stsb", tiny_models["bert"], examples, checksums, 200)
    assert len(list(tokenized_cache_dir().glob("*.json"))) == 1

    def no_tokenizer(*args, **kwargs):
        raise AssertionError("tokenised again although cached")

    with monkeypatch.context() as patch:
        patch.setattr(transformers.AutoTokenizer, "from_pretrained", no_tokenizer)
        again = tokenize_task("stsb", tiny_models["bert"], examples, checksums, 200)
    assert (
        again.splits["train"].s1 == first.splits["train"].s1
        and again.splits["test"].labels == first.splits["test"].labels
    )
    assert again.pad_id == first.pad_id and again.model_path == first.model_path

    tokenize_task("stsb", tiny_models["bert"], examples, checksums, 100)  # another subset
    other = tmp_path / "other-vocab"
    shutil.copytree(tiny_models["bert"], other)
    vocab = (other / "vocab.txt").read_text().splitlines()
    (other / "vocab.txt").write_text("\n".join(vocab[:-1] + ["zzzz"]) + "\n")  # a changed tokenizer file
    tokenize_task("stsb", other, examples, checksums, 200)
    files = sorted(tokenized_cache_dir().glob("*.json"))
    assert len(files) == 3
    for file in files:
        file.write_text("{broken")
    rebuilt = tokenize_task("stsb", tiny_models["bert"], examples, checksums, 200)  # a damaged file is replaced
    assert rebuilt.splits["dev"].s2 == first.splits["dev"].s2
    assert (
        tokenized._read_cache(files[0]) is not None
        or tokenized._read_cache(files[1]) is not None
        or tokenized._read_cache(files[2]) is not None
    )
