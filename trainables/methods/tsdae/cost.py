"""What one trial of a TSDAE sweep costs (for packing, the GPU-hours plan and --dry-run): the encoder
cost model (trainables/encoders/cost.py) with each objective's passes and memory. Read by the method's
plan and by the paper's estimate, which prices a grid from public configs."""

from __future__ import annotations

import math

from trainables.core.method import TrialCost

PASSES = {"tsdae": 0.4 + 1.5, "ct": 2.0, "simcse": 2.0}  # forward passes a batch: TSDAE's noisy input + decoder


def trial_memory_bytes(shape, objective: str) -> float:
    """GPU memory of one trial of `objective` (trainables/encoders/cost.py): TSDAE's decoder doubles the
    model; official CT adds a second copy (benchmarks/contrastive_memory.py)."""
    from trainables.encoders import cost as encoder_cost

    memory = encoder_cost.trial_memory_bytes(shape) * (2 if objective == "tsdae" else 1)
    if objective == "ct":  # two copies, each encoding one side of the pairs
        memory += encoder_cost.second_copy_bytes(shape)
    return memory


def trial_cost(
    model_path: str, settings: dict, args, sentences: list[str], dev_pairs: int, suite_pairs: int
) -> TrialCost:
    """The encoder cost model (trainables/encoders/cost.py) of one trial: the whole encoder trained
    for `steps` batches of the corpus's mean sentence length (TSDAE: the noisy input, ~40 % of
    the words, plus a decoder pass of the clean sentence; CT official: two models), dev every
    --eval-steps, the suite once."""
    from transformers import AutoConfig

    from trainables.encoders import cost as encoder_cost

    config = AutoConfig.from_pretrained(model_path)
    sample = sentences[:2000]
    words = sum(len(s.split()) for s in sample) / max(1, len(sample))
    limit = int(settings.get("max_length") or 512)
    tokens = min(limit, math.ceil(1.3 * words) + 2)  # ~1.3 WordPiece tokens a word, [CLS] [SEP]
    batch = int(settings.get("batch_size") or 1)
    shape = encoder_cost.shape_from_config(config, config.num_hidden_layers, batch, tokens)
    objective = settings.get("objective", "")
    passes = PASSES.get(objective, 1.0)  # decoder: + cross-attention
    steps, epochs = int(settings.get("steps") or 0), int(settings.get("epochs") or 0)
    train_tokens = int(passes * batch * tokens * steps / max(1, epochs))
    eval_tokens = 2 * tokens * (dev_pairs + suite_pairs / max(1, epochs))
    eval_batches = math.ceil(2 * (dev_pairs + suite_pairs / max(1, epochs)) / 64)
    seconds = encoder_cost.trial_seconds(
        shape,
        train_tokens,
        int(eval_tokens),
        epochs,
        args.gpu_tflops,
        train_steps=math.ceil(passes * steps / max(1, epochs)),
        eval_batches=eval_batches,
    )
    return TrialCost(
        memory_bytes=trial_memory_bytes(shape, objective),
        seconds=seconds,
        weight_bytes=encoder_cost.weight_bytes(shape),
    )
