"""`--gpus-per-trial auto`: the packing rule, and a sweep on logical GPUs that follows it."""

import pytest
from mlflow_helpers import runs_by_role
from sweep_helpers import hold_all, sweep_args
from transformers import BertConfig

from sweeps.electra_layers import main
from sweeps.engine import packing
from trainables.encoders import cost

BERT_BASE = BertConfig()  # 12 layers, hidden 768, 12 heads, vocabulary 30522: built locally, nothing fetched


def test_shallow_layers_and_small_batches_pack_more_trials_per_gpu():
    per_layer = [
        packing.trials_per_gpu(cost.trial_memory_bytes(cost.shape_from_config(BERT_BASE, layer, 32, 128)))
        for layer in range(13)
    ]
    assert per_layer == sorted(per_layer, reverse=True), per_layer
    assert per_layer[0] == 4 and per_layer[12] < per_layer[0]
    big_batch = packing.trials_per_gpu(cost.trial_memory_bytes(cost.shape_from_config(BERT_BASE, 12, 256, 128)))
    assert big_batch <= per_layer[12] and big_batch >= 1


def test_memory_rule_matches_the_documented_formula():
    shape = cost.shape_from_config(BERT_BASE, 12, 32, 128)
    from transformers import BertModel

    from trainables.encoders.loading import count_parameters

    assert shape.params == count_parameters(BertModel(BERT_BASE, add_pooling_layer=False))
    units = 64 * 128 * 12 * (34 * 768 + 5 * 12 * 128)
    embeddings_out = 64 * 128 * 768 * 16
    fp32 = 0.6 * cost.GIB + 1.15 * (16 * shape.params + 2.0 * units + embeddings_out)
    bf16 = 0.6 * cost.GIB + 1.15 * (16 * shape.params + 2 * shape.layer_params + 1.2 * units + embeddings_out)
    assert cost.trial_memory_bytes(shape, "fp32") == pytest.approx(fp32)
    assert cost.trial_memory_bytes(shape, "tf32") == pytest.approx(fp32)
    assert cost.trial_memory_bytes(shape, "bf16") == pytest.approx(bf16) and bf16 < fp32
    assert packing.trials_per_gpu(fp32, gpu_memory_gb=24) == int(0.9 * 24 * cost.GIB // fp32)
    assert packing.trials_per_gpu(fp32, gpu_memory_gb=80, cap=3) == 3
    assert packing.trials_per_gpu(fp32, gpu_memory_gb=1) == 1


def test_time_is_the_larger_of_gpu_work_and_kernel_launches():
    shape = cost.shape_from_config(BERT_BASE, 12, 32, 20)
    flops = 6 * shape.layer_params * 200_000 + 2 * shape.layer_params * 80_000
    launch_bound = cost.trial_seconds(shape, 200_000, 80_000, 1, None, "tf32", train_steps=180, eval_batches=46)
    assert launch_bound == pytest.approx((3 * 180 + 46) * 13 * cost.LAUNCH_SECONDS["tf32"])
    gpu_bound = cost.trial_seconds(shape, 200_000, 80_000, 1, 1.0, "tf32", train_steps=180, eval_batches=46)
    assert gpu_bound == pytest.approx(flops / 1e12)
    assert (
        cost.trial_seconds(shape, 200_000, 80_000, 1, None, "auto", 180, 46) == launch_bound
    )  # auto is priced as tf32


@pytest.mark.sweep
def test_auto_packing_on_logical_gpus(sweep_env, tiny_models, edit_trials, capsys):
    """Tiny models pack to the cap: with --max-trials-per-gpu 2, four overlapping trials on the
    session's four logical GPUs use two of them, two trials each."""
    edit_trials(hold_all(8))
    flags = list(sweep_env["flags"])
    flags[flags.index("--gpus-per-trial") + 1] = "auto"
    flags[flags.index("--cpus-per-trial") + 1] = "0.25"
    sweep = "--layers 0,1 --seeds 0,1 --epochs 1 --max-trials-per-gpu 2 --name auto"
    code = main(sweep_args(tiny_models["bert"], sweep, *flags))
    assert code == 0
    out = capsys.readouterr().out
    assert "4 trials at 0.5 GPU (2 per GPU)" in out and "GPU-hours" in out
    _, children = runs_by_role(sweep_env["uri"])
    gpu_ids = [c.data.tags["gpu_ids"] for c in children]
    assert sorted(gpu_ids.count(g) for g in set(gpu_ids)) == [2, 2], gpu_ids


@pytest.mark.parametrize("value", ["lots", "-1", "1.5"])
def test_bad_gpu_values_are_refused(value):
    from sweeps.engine.cli import ENGINE
    from trainables.core.errors import SweepInputError

    gpus = next(s for s in ENGINE if s.name == "gpus_per_trial")
    with pytest.raises(SweepInputError, match="--gpus-per-trial must be"):
        gpus.parse(value)
    assert gpus.parse("0.25") == 0.25 and gpus.parse("2") == 2 and gpus.parse("auto") == "auto"
