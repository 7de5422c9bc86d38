"""Task definitions (trainables/training/pair_tasks.py): F1 / macro-F1 / thresholds against hand computations,
the MRPC dev-threshold rule, the SICK head, word-similarity scores, the primary metric of each task,
labels of the real MRPC and SICK files, and the DAPT model's MLM head (new, tied)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainables.training.pair_tasks import (
    accuracy,
    best_threshold,
    binary_f1,
    get_task,
    macro_f1,
    primary_metric,
    task_names,
    threshold_cuts,
)


def test_binary_f1_accuracy_by_hand():
    gold = [1, 1, 1, 0, 0, 0, 1, 0]
    pred = [1, 0, 1, 1, 0, 0, 1, 0]
    # tp = 3, fp = 1, fn = 1 -> precision 3/4, recall 3/4, F1 = 0.75
    assert binary_f1(gold, pred) == pytest.approx(0.75)
    assert accuracy(gold, pred) == pytest.approx(6 / 8)
    assert binary_f1([0, 0], [0, 0]) == 0.0  # no positive anywhere: 0, as sklearn's zero_division default
    assert binary_f1([1, 0], [0, 0]) == 0.0


def test_macro_f1_by_hand():
    gold = [0, 0, 0, 1, 1, 2, 2, 2, 2]
    pred = [0, 1, 0, 1, 2, 2, 2, 0, 2]
    # class 0: tp 2, fp 1, fn 1 -> 2*2/(4+1+1) = 4/6
    # class 1: tp 1, fp 1, fn 1 -> 2/4
    # class 2: tp 3, fp 1, fn 1 -> 6/8
    assert macro_f1(gold, pred) == pytest.approx((4 / 6 + 2 / 4 + 6 / 8) / 3)
    # a class only predicted (never gold) counts with F1 0, as sklearn's average="macro"
    assert macro_f1([0, 0, 1], [0, 2, 1]) == pytest.approx((2 / 3 + 1 + 0) / 3)


def test_threshold_cuts_and_best_threshold_by_hand():
    scores = np.array([0.9, 0.8, 0.8, 0.4, 0.1])
    gold = np.array([1, 0, 1, 1, 0])
    thresholds, f1, acc = threshold_cuts(scores, gold)
    # cuts: nothing positive, top 1, top 3 (the tie 0.8/0.8 cannot be split), top 4, all
    assert thresholds == pytest.approx([1.9, 0.85, 0.6, 0.25, -0.9])
    assert f1 == pytest.approx([0.0, 2 * 1 / (1 + 3), 2 * 2 / (3 + 3), 2 * 3 / (4 + 3), 2 * 3 / (5 + 3)])
    assert acc == pytest.approx([2 / 5, 3 / 5, 3 / 5, 4 / 5, 3 / 5])
    assert best_threshold(scores, gold, "f1") == pytest.approx(0.25)
    assert best_threshold(scores, gold, "accuracy") == pytest.approx(0.25)
    # the threshold reproduces the F1 it was chosen for
    assert binary_f1(gold, scores > 0.25) == pytest.approx(6 / 7)


def test_mrpc_threshold_is_chosen_on_dev_and_applied_unchanged_to_test():
    task = get_task("mrpc")
    dev, dev_gold = np.array([0.9, 0.7, 0.6, 0.2]), np.array([1, 1, 0, 0])
    test, test_gold = np.array([0.95, 0.5, 0.66, 0.1]), np.array([1, 1, 0, 0])
    metrics = task.metrics({"dev": dev, "test": test}, {"dev": dev_gold, "test": test_gold})
    assert metrics["dev_threshold_f1"] == pytest.approx(0.65)  # between 0.7 and 0.6
    assert metrics["dev_f1"] == pytest.approx(100.0) and metrics["dev_accuracy"] == pytest.approx(100.0)
    # test at 0.65: predicted [1, 0, 1, 0] -> tp 1, fp 1, fn 1 -> F1 0.5; accuracy 2/4
    assert metrics["test_f1"] == pytest.approx(50.0) and metrics["test_accuracy"] == pytest.approx(50.0)


def test_mrpc_loss_is_bce_on_the_raw_cosine():
    u, v = torch.tensor([[1.0, 0.0], [1.0, 1.0]]), torch.tensor([[1.0, 0.0], [-1.0, -1.0]])
    labels = torch.tensor([1.0, 0.0])
    expected = -(np.log(1 / (1 + np.exp(-1.0))) + np.log(1 - 1 / (1 + np.exp(1.0)))) / 2
    assert float(get_task("mrpc").loss(u, v, labels, None)) == pytest.approx(expected, rel=1e-5)


def test_sick_head_and_macro_f1():
    task = get_task("sick")
    head = task.build_head(4)
    assert isinstance(head, torch.nn.Linear) and head.in_features == 12 and head.out_features == 3
    u, v = torch.randn(5, 4), torch.randn(5, 4)
    logits = task.outputs(u, v, head)
    manual = head(torch.cat([u, v, (u - v).abs()], dim=1)).detach()
    assert torch.allclose(logits, manual)
    labels = torch.tensor([0.0, 1.0, 2.0, 1.0, 0.0])
    assert float(task.loss(u, v, labels, head).detach()) == pytest.approx(
        float(torch.nn.functional.cross_entropy(manual, labels.long()).detach())
    )
    out = np.eye(3)[[0, 1, 2, 2]]
    metrics = task.metrics({"dev": out, "test": out}, {"dev": np.array([0, 1, 2, 1]), "test": np.array([0, 1, 2, 2])})
    assert metrics["test_f1"] == pytest.approx(100.0)
    assert metrics["dev_f1"] == pytest.approx(100 * (1 + 2 / 3 + 2 / 3) / 3)
    assert metrics["dev_accuracy"] == pytest.approx(75.0)


def test_word_similarity_scores_and_selection_rule():
    task = get_task("wordsim")
    u, v = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]), torch.tensor([[1.0, 0.0], [1.0, 0.0], [2.0, 0.0]])
    out = task.outputs(u, v, None).numpy()
    assert out.shape == (3, 4)
    assert out[:, 1] == pytest.approx([0.0, -np.sqrt(5), -np.sqrt(2)], rel=1e-6)  # -euclidean
    assert out[:, 2] == pytest.approx([0.0, -3.0, -2.0])  # -manhattan
    assert out[:, 3] == pytest.approx([1.0, 0.0, 2.0])  # dot
    gold = np.array([0.9, 0.1, 0.5])
    metrics = task.metrics({"dev": out, "test": out}, {"dev": gold, "test": gold})
    assert metrics["dev_spearman_max4"] == max(
        metrics[f"dev_spearman{s}"] for s in ("", "_euclidean", "_manhattan", "_dot")
    )
    assert task.primary_for({"ws_selection": "cosine"}) == "spearman"
    assert task.primary_for({"ws_selection": "max4"}) == "spearman_max4"


def test_primary_metric_per_task_and_the_method_contract_agrees():
    from sweeps.engine.runner import parser_for
    from trainables.methods.tmft.method import TMFT

    assert primary_metric("stsb") == "spearman" and primary_metric("mrpc") == "f1" and primary_metric("sick") == "f1"
    for task, primary in (("stsb", "spearman"), ("mrpc", "f1"), ("sick", "f1")):
        contract = TMFT.metrics(parser_for("tmft").parse_args(["--task", task]))
        assert (contract.primary, contract.report, contract.epoch) == (
            f"best_dev_{primary}",
            f"test_{primary}_at_best_dev",
            f"dev_{primary}",
        )
    from trainables.core.paths import default_data_dir
    from trainables.data.multilingual_stsb import release_languages

    released = {f"stsb-{language}" for language in release_languages(default_data_dir())}  # found in the data folder
    assert set(task_names()) == {"stsb", "mrpc", "sick", "korsts", "stsb-de", "stsb-es", *released}


def test_tokenised_labels_of_the_real_mrpc_and_sick(data_dir, tiny_models):
    from trainables.training.tokenized import load_task, subset, tokenize_task

    for task, allowed in (("mrpc", {0.0, 1.0}), ("sick", {0.0, 1.0, 2.0})):
        examples, checksums = load_task(task, data_dir)
        examples = {s: subset(rows, 50) for s, rows in examples.items()}
        data = tokenize_task(task, tiny_models["bert"], examples, checksums)
        labels = set(data.splits["train"].labels)
        assert labels == allowed, (task, labels)
        assert len(data.splits["dev"]) == 50 and data.task == task


@pytest.mark.parametrize("kind", ["bert", "electra-discriminator", "mpnet"])
def test_dapt_model_gets_a_new_mlm_head_tied_to_the_input_embeddings(tiny_models, kind):
    from trainables.encoders.mlm import mlm_model

    model, source = mlm_model(tiny_models[kind], "auto")
    assert source == "new"  # the tiny models are saved as AutoModel: no MLM head
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    head = [n for n, p in model.named_parameters() if not n.startswith(model.base_model_prefix + ".")]
    assert head and all(p.requires_grad for p in model.parameters())
    model, _ = mlm_model(tiny_models[kind], "authors")
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen and all(not n.startswith(model.base_model_prefix + ".") for n in frozen)
    assert model.get_input_embeddings().weight.requires_grad  # the tied decoder is trained
