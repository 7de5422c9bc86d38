"""The adaptive-layer method: its loss is AdaptiveLayerLoss around TMFT's pair loss as the definition
writes it (checked against a computation by hand from truncated copies of the model), and every
layer's scores from its one forward pass equal those of the model truncated to that layer."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr

from analysis.one_run import comparison, sections
from trainables.encoders.loading import encode, truncate
from trainables.methods.adaptive_layer.training import AdaptiveLayerFineTuning
from trainables.training.batches import pad
from trainables.training.tokenized import TokenizedPairs

CONFIG = {"seed": 0, "batch_size": 8, "weight_decay": 0.01, "lr": 2e-5, "warmup_ratio": 0.1, "precision": "fp32"}


@pytest.fixture(scope="module")
def small_task(tiny_task):
    """The tiny task with 30 dev pairs (scoring every layer of 300 takes seconds on a busy CPU)."""
    dev = tiny_task.splits["dev"]
    return replace(
        tiny_task, splits={**tiny_task.splits, "dev": TokenizedPairs(dev.s1[:30], dev.s2[:30], dev.labels[:30])}
    )


WEIGHTS = dict(n_layers_per_step=-1, last_layer_weight=0.7, prior_layers_weight=1.3, kl_div_weight=0.5)


@pytest.fixture(scope="module")
def tuning(small_task):
    """One adaptive-layer loop on the tiny model (built once: a SentenceTransformer takes seconds)."""
    tuning = AdaptiveLayerFineTuning()
    tuning.init_adaptive(small_task, {**CONFIG, **WEIGHTS, "kl_temperature": 0.3}, "cpu", 1)
    return tuning


def _embed(model, sequences, pad_id):
    ids, mask = pad(sequences, pad_id)
    return encode(model, ids, mask)


def test_the_loss_is_the_weighted_task_loss_of_every_layer_plus_the_kl_term(tuning, small_task):
    tuning.st_model.eval()  # no dropout: the loss and the reference see the same embeddings
    data, rows = small_task.splits["train"], list(range(8))
    s1, s2 = [data.s1[i] for i in rows], [data.s2[i] for i in rows]
    labels = torch.tensor([data.labels[i] for i in rows], dtype=torch.float32)
    with torch.no_grad():
        loss = tuning.adaptive_loss([tuning._features(s1), tuning._features(s2)], labels)
        depth, pad_id, temperature = tuning.depth, small_task.pad_id, 0.3
        per_layer = [
            (_embed(truncate(tuning.model, layer), s1, pad_id), _embed(truncate(tuning.model, layer), s2, pad_id))
            for layer in range(depth + 1)
        ]
        task_loss = [F.mse_loss(F.cosine_similarity(u, v), labels / 5.0) for u, v in per_layer]
        last = F.softmax(torch.cat(per_layer[depth]) / temperature, dim=-1)
        kl = [
            F.kl_div(F.log_softmax(torch.cat(per_layer[layer]) / temperature, dim=-1), last, reduction="batchmean")
            for layer in range(depth)
        ]
        expected = 0.7 * task_loss[depth] + sum(
            1.3 * task_loss[layer] / depth + 0.5 * temperature * kl[layer] for layer in range(depth)
        )
    assert float(loss) == pytest.approx(float(expected), rel=1e-4)


def test_every_layer_scores_as_the_model_truncated_to_it(tuning, small_task):
    scores = tuning.layer_metrics(("dev",))
    dev = small_task.splits["dev"]
    gold = np.asarray(dev.labels)
    with torch.no_grad():
        for layer in range(tuning.depth + 1):
            truncated = truncate(tuning.model, layer).eval()
            u, v = _embed(truncated, dev.s1, small_task.pad_id), _embed(truncated, dev.s2, small_task.pad_id)
            reference = 100 * spearmanr(F.cosine_similarity(u, v).numpy(), gold).statistic
            assert scores[f"layer{layer}_dev_spearman"] == pytest.approx(reference, abs=1e-3)
    mean = np.mean([scores[f"layer{layer}_dev_spearman"] for layer in range(tuning.depth + 1)])
    assert scores["dev_spearman"] == pytest.approx(mean)


def _runs():
    """Two adaptive-layer seeds and TMFT trials of layers 0-2 (two seeds), as the loader's rows."""
    rows = []
    for seed, base in ((0, 60.0), (1, 62.0)):
        rows.append(
            {
                "method": "adaptive-layer",
                "status": "FINISHED",
                "model": "m",
                "task": "stsb",
                "seed": seed,
                "layer": pd.NA,
                "metric_report": "test_spearman_at_best_dev",
                "wall_time_s": 30.0 + seed,
                **{f"layer{k}_test_spearman_at_best_dev": base + 5 * k for k in range(3)},
                **{f"layer{k}_cka_tmft": 0.9 - 0.1 * k for k in range(3)},
            }
        )
        for layer in range(3):
            rows.append(
                {
                    "method": "tmft",
                    "status": "FINISHED",
                    "model": "m",
                    "task": "stsb",
                    "seed": seed,
                    "layer": layer,
                    "metric_report": "test_spearman_at_best_dev",
                    "test_spearman_at_best_dev": 70.0 + layer + seed,
                    "wall_time_s": 10.0 * (layer + 1),
                }
            )
    rows.append({**rows[1], "status": "FAILED", "test_spearman_at_best_dev": 0.0})  # left out
    return pd.DataFrame(rows)


def test_the_comparison_puts_each_layer_of_the_one_run_beside_tmfts_model_of_that_layer():
    frame = comparison(_runs()).set_index("layer")
    for layer in range(3):
        one, tmft = [60.0 + 5 * layer, 62.0 + 5 * layer], [70.0 + layer, 71.0 + layer]
        row = frame.loc[layer]
        assert row["one_run_mean"] == pytest.approx(np.mean(one)) and row["one_run_std"] == pytest.approx(
            np.std(one, ddof=1)
        )
        assert row["tmft_mean"] == pytest.approx(np.mean(tmft)) and row["tmft_seeds"] == 2
        assert row["delta"] == pytest.approx(np.mean(one) - np.mean(tmft))
        assert row["tmft_seconds"] == pytest.approx(10.0 * (layer + 1)) and row["one_run_seconds"] == pytest.approx(
            30.5
        )
        assert row["cka"] == pytest.approx(0.9 - 0.1 * layer)


def test_the_report_section_shows_both_curves_and_the_compute(tmp_path):
    report = SimpleNamespace(files=[])
    written = []
    parts = SimpleNamespace(runs=_runs(), figures=tmp_path, tables=tmp_path, report=report)
    lines = sections(SimpleNamespace(**vars(parts), write_csv=lambda frame, path: written.append(path)))
    text = "\n".join(lines)
    assert "Adaptive layers (one run) beside TMFT" in text
    assert "TMFT 60 s for all 3 layers (one trial each), the one run 30 s for every layer (1.97x less)" in text
    assert "| 2 | 72.50 ± 0.71 | 71.00 ± 1.41 | -1.50 | 30 | 0.700 |" in text
    assert written == [tmp_path / "one_run_vs_tmft.csv"] and any(f.suffix == ".png" for f in report.files)
    alone = _runs()
    alone = alone[alone["method"] == "adaptive-layer"].drop(columns=["layer"])  # no TMFT sweep beside it
    assert sections(SimpleNamespace(**{**vars(parts), "runs": alone}, write_csv=lambda frame, path: None)) == []


def _parse(*flags):
    from sweeps.engine.runner import parser_for

    return parser_for("adaptive-layer").parse_args(list(flags))


def test_the_settings_are_typed_and_the_trial_config_keeps_its_keys_and_values():
    """Every flag typed with its old default; the trial config as runs have always recorded it (the
    same keys, values and types: MLflow params and config hashes of old runs must not change)."""
    from trainables.methods.adaptive_layer.method import AdaptiveLayer
    from trainables.methods.adaptive_layer.training import DEFAULTS

    args = _parse()
    assert args.models == ["sentence-transformers/all-MiniLM-L6-v2"] and args.seeds == [0] and args.task == "stsb"
    expected = {
        "method": "adaptive-layer",
        "task": "stsb",
        "epochs": 1,
        "lr": 2e-5,
        "batch_size": 32,
        "weight_decay": 0.01,
        "warmup_ratio": 0.1,
        "eval_batch_size": 64,
        "max_train_samples": None,
        "max_eval_samples": None,
        **DEFAULTS,
    }
    config = AdaptiveLayer.base_config(args)
    assert config == expected and {k: type(v) for k, v in config.items()} == {k: type(v) for k, v in expected.items()}
    args = _parse("--seeds", "0-2", "--n-layers-per-step", "-1", "--kl-temperature", "0", "--max-train-samples", "64")
    assert args.seeds == [0, 1, 2] and args.n_layers_per_step == -1 and args.kl_temperature == 0.0
    assert AdaptiveLayer.base_config(args)["max_train_samples"] == 64


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--n-layers-per-step", "0"), "--n-layers-per-step must be -1 \\(all\\) or 1 or more, got 0"),
        (("--n-layers-per-step", "-2"), "--n-layers-per-step must be at least -1, got -2"),
        (("--epochs", "0"), "--epochs must be a positive integer, got 0"),
        (("--lr", "0"), "--lr must be positive"),
        (("--warmup-ratio", "1"), "--warmup-ratio must be >= 0 and < 1"),
        (("--kl-div-weight", "-1"), "--kl-div-weight must be >= 0"),
        (("--max-eval-samples", "0"), "--max-eval-samples must be a positive integer"),
        (("--seeds", "x"), "--seeds 'x' is not a comma-separated list of integers"),
        (("--task", "nope"), "--task must be one of"),
    ],
)
def test_a_bad_value_is_refused_naming_its_flag(flags, message):
    from trainables.core.errors import SweepInputError

    with pytest.raises(SweepInputError, match=message):
        _parse(*flags)


@pytest.mark.sweep
def test_the_dry_run_prices_models_x_seeds_without_loading_a_model(data_dir, tiny_models):
    from sweeps.engine import dry_run
    from sweeps.engine.runner import check_sweep, parser_for
    from trainables.methods.adaptive_layer.method import AdaptiveLayer

    models = f"sentence-transformers/all-MiniLM-L6-v2,{tiny_models['bert']}"
    args = _parse("--models", models, "--seeds", "0-2", "--data-dir", str(data_dir), "--dry-run")
    estimate = AdaptiveLayer.estimate(args)
    assert estimate.trials == 6 and len(estimate.costs) == 6 and estimate.gpu_hours > 0
    assert all(c.gpu and c.memory_bytes > 0 and c.weight_bytes > 0 for c in estimate.costs)
    assert estimate.costs[0].weight_bytes > estimate.costs[3].weight_bytes  # MiniLM outweighs the tiny model
    text = dry_run.describe(check_sweep(args, AdaptiveLayer, "adaptive_layer"), parser_for("adaptive-layer"))
    assert "trials: 6" in text and "GPU-hours: unknown" not in text and "disk: about" in text, text
    unknown = AdaptiveLayer.estimate(_parse("--models", "no-such/model", "--seeds", "0,1"))
    assert unknown.trials == 2 and unknown.gpu_hours is None and "no-such/model" in unknown.note
