"""The cost model of a trial that trains (or runs) a truncated transformer encoder: its GPU memory
and its time, from the model's config, the layer, the batch, the precision and the tokenised
data. Methods turn it into their `TrialCost` (trainables/core/method.py); the engine packs trials by
the memory (sweeps/engine/packing.py) and plans GPU-hours and the start order by the time.

Calibrated on an H100 with `benchmarks/gpu.py` (BERT-base and ELECTRA-base-generator shapes, layer
12, STS-B, batch 32; figures in the issue's note):

Memory, per trial (model, layer, batch, precision):

    memory = 0.6 GiB                      the process's CUDA context (measured)
           + 1.15 x ( 16 B x params       fp32 weights + gradients + AdamW's two moments
                    + 2 B x layer params  the half-precision weight copies autocast makes (bf16, fp16)
                    + activations )       f x 2 x batch sentences x S x l x (34 H + 5 A S) bytes
                                          (Korthikanti et al. 2022's per-layer count, in 16-bit units),
                                          f = 2 in fp32/tf32, 1.2 under autocast (norms and softmax
                                          stay fp32); S = the longest training sentence in tokens

The allocator runs with expandable segments (`CUDA_ALLOCATOR_ENV`, set for every trial): without
them, BERT-base's varying batch shapes left 8.1 GiB reserved for 4.3 GiB allocated. The 1.15 is
the allocator's slack over the allocated peak that was measured with them.

Time, per trial alone on a GPU: the larger of the GPU's work and the CPU's work of launching it
(eager PyTorch at batch 32 is launch-bound on a fast GPU: measured CPU-seconds ~ wall-seconds),

    seconds = max( FLOPs / effective TFLOP/s,   launch units x launch seconds per unit )
    FLOPs   = epochs x (6 x layer params x training tokens + 2 x layer params x evaluation tokens)
    units   = epochs x (3 x training steps + evaluation batches) x (l + 1)

with the H100 figures per precision in `GPU_TFLOPS` (the flag --gpu-tflops scales them for another
GPU) and `LAUNCH_SECONDS` (a CPU like the benchmark machine's). A planning figure, not a promise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 1024**3
CUDA_CONTEXT_BYTES = 0.6 * GIB
ALLOCATOR_SLACK = 1.15
ACTIVATION_FACTOR = {"fp32": 2.0, "tf32": 2.0, "bf16": 1.2, "fp16": 1.2}
# Effective throughput of a whole trial on one H100 (benchmarks/gpu.py): fp32 measured GPU-bound;
# tf32 and bf16 are lower bounds (their trials were launch-bound even 4 and 8 to a GPU).
GPU_TFLOPS = {"fp32": 11.7, "tf32": 29.0, "bf16": 34.0, "fp16": 34.0}
# CPU seconds to launch one layer's kernels of one step (fp32/tf32 measured 0.81 ms; autocast's
# casts double the launches: 1.77 ms).
LAUNCH_SECONDS = {"fp32": 0.81e-3, "tf32": 0.81e-3, "bf16": 1.77e-3, "fp16": 1.77e-3}
# The allocator setting of every trial process (set before CUDA starts in it).
CUDA_ALLOCATOR_ENV = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
# The precision a plan prices when the sweep asks for `auto` (trainables/encoders/precision.py: tf32 on
# the GPUs the project is calibrated on).
AUTO_PRICED_AS = "tf32"


@dataclass(frozen=True)
class TrialShape:
    hidden: int
    heads: int
    layer: int
    params: int  # parameters of the truncated model
    layer_params: int  # parameters of the transformer layers kept (non-embedding)
    batch_size: int
    seq_len: int


def shape_from_config(config, layer: int, batch_size: int, seq_len: int) -> TrialShape:
    h, inter = config.hidden_size, config.intermediate_size
    per_layer = 4 * (h * h + h) + 2 * h + (h * inter + inter) + (inter * h + h) + 2 * h
    embedding_size = getattr(config, "embedding_size", h) or h
    embeddings = (
        config.vocab_size + config.max_position_embeddings + getattr(config, "type_vocab_size", 0) + 2
    ) * embedding_size
    if embedding_size != h:
        embeddings += embedding_size * h + h  # ELECTRA's projection from embedding to hidden size
    return TrialShape(
        h, config.num_attention_heads, layer, embeddings + layer * per_layer, layer * per_layer, batch_size, seq_len
    )


def weight_bytes(shape: TrialShape) -> float:
    """The saved model's size: fp32 weights of the truncated encoder."""
    return 4.0 * shape.params


def priced_precision(precision: str) -> str:
    return AUTO_PRICED_AS if precision == "auto" else precision


def trial_memory_bytes(shape: TrialShape, precision: str = "fp32") -> float:
    precision = priced_precision(precision)
    sentences = 2 * shape.batch_size
    units = sentences * shape.seq_len * shape.layer * (34 * shape.hidden + 5 * shape.heads * shape.seq_len)
    activations = ACTIVATION_FACTOR[precision] * units
    embeddings_out = sentences * shape.seq_len * shape.hidden * 4 * 4
    copies = 2 * shape.layer_params if ACTIVATION_FACTOR[precision] < 2 else 0
    return CUDA_CONTEXT_BYTES + ALLOCATOR_SLACK * (16 * shape.params + copies + activations + embeddings_out)


def second_copy_bytes(shape: TrialShape) -> float:
    """A second trained copy of the encoder (CT's): its fp32 weights, gradients and two optimiser
    moments. Its activations are already in `trial_memory_bytes`, which counts two sentences a pair."""
    return ALLOCATOR_SLACK * 16 * shape.params


def trial_seconds(
    shape: TrialShape,
    train_tokens: int,
    eval_tokens: int,
    epochs: int,
    gpu_tflops: float | None = None,
    precision: str = "fp32",
    train_steps: int = 0,
    eval_batches: int = 0,
) -> float:
    """`gpu_tflops`: None for the H100 figure of the precision."""
    precision = priced_precision(precision)
    epochs = max(1, epochs)
    flops = epochs * (6 * shape.layer_params * train_tokens + 2 * shape.layer_params * eval_tokens)
    gpu = flops / ((gpu_tflops or GPU_TFLOPS[precision]) * 1e12)
    launches = epochs * (3 * train_steps + eval_batches) * (shape.layer + 1) * LAUNCH_SECONDS[precision]
    return max(gpu, launches)


def pair_task_cost(
    config,
    task,
    layer: int,
    batch_size: int,
    epochs: int,
    gpu_tflops: float | None,
    precision: str = "fp32",
    eval_batch_size: int = 64,
) -> tuple[float, float, float]:
    """(GPU memory in bytes, seconds, saved weights in bytes) of one trial fine-tuning `config`'s
    encoder at `layer` on a tokenised pair task (trainables/training/tokenized.py)."""
    train = task.splits["train"]
    seq_len = max(max(map(len, train.s1)), max(map(len, train.s2)))
    train_tokens = sum(map(len, train.s1)) + sum(map(len, train.s2))
    tokens = {s: sum(map(len, task.splits[s].s1)) + sum(map(len, task.splits[s].s2)) for s in ("dev", "test")}
    batches = {s: math.ceil(len(task.splits[s]) / eval_batch_size) for s in ("dev", "test")}
    # dev after every epoch; dev and test once more with the best-dev weights at the end, spread over the epochs
    share = 1 / max(1, epochs)
    eval_tokens = tokens["dev"] + share * (tokens["dev"] + tokens["test"])
    eval_batches = math.ceil(batches["dev"] + share * (batches["dev"] + batches["test"]))
    steps = math.ceil(len(train) / batch_size)
    shape = shape_from_config(config, layer, batch_size, seq_len)
    return (
        trial_memory_bytes(shape, precision),
        trial_seconds(shape, train_tokens, eval_tokens, epochs, gpu_tflops, precision, steps, eval_batches),
        weight_bytes(shape),
    )
