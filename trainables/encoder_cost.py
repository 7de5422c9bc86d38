"""The cost model of a trial that trains (or runs) a truncated transformer encoder: its GPU memory
and its time, from the model's config, the layer, the batch and the tokenised data. Methods turn
it into their `TrialCost` (trainables/method.py); the engine packs trials by the memory
(sweeps/engine/packing.py) and plans GPU-hours and the start order by the time.

Memory, per trial (model, layer, batch):

    memory = 16 B x params            fp32 weights + gradients + AdamW's two moments
           + activations              2 x batch sentences x S tokens x l layers x (34 H + 5 A S) x 2 B
                                      (the per-layer activation count of Korthikanti et al. 2022,
                                      stored in fp32), S = the longest training pair in tokens
           + 1 GiB                    CUDA context and allocator slack

Time: FLOPs from the tokenised data (6 x non-embedding params x training tokens per epoch +
2 x params x evaluation tokens per epoch) at `gpu_tflops` effective throughput (default 25, an
A10G-class GPU in fp32 with TF32 matmuls). It is a planning figure, not a measurement.
"""
from __future__ import annotations

from dataclasses import dataclass

GIB = 1024 ** 3


@dataclass(frozen=True)
class TrialShape:
    hidden: int
    heads: int
    layer: int
    params: int           # parameters of the truncated model
    layer_params: int     # parameters of the transformer layers kept (non-embedding)
    batch_size: int
    seq_len: int


def shape_from_config(config, layer: int, batch_size: int, seq_len: int) -> TrialShape:
    h, inter = config.hidden_size, config.intermediate_size
    per_layer = 4 * (h * h + h) + 2 * h + (h * inter + inter) + (inter * h + h) + 2 * h
    embedding_size = getattr(config, "embedding_size", h) or h
    embeddings = (config.vocab_size + config.max_position_embeddings + getattr(config, "type_vocab_size", 0) + 2) * embedding_size
    if embedding_size != h:
        embeddings += embedding_size * h + h  # ELECTRA's projection from embedding to hidden size
    return TrialShape(h, config.num_attention_heads, layer, embeddings + layer * per_layer, layer * per_layer, batch_size, seq_len)


def trial_memory_bytes(shape: TrialShape) -> float:
    sentences = 2 * shape.batch_size
    activations = sentences * shape.seq_len * shape.layer * (34 * shape.hidden + 5 * shape.heads * shape.seq_len) * 2
    embeddings_out = sentences * shape.seq_len * shape.hidden * 4 * 4
    return 16 * shape.params + activations + embeddings_out + GIB


def trial_seconds(shape: TrialShape, train_tokens: int, eval_tokens: int, epochs: int, gpu_tflops: float = 25.0) -> float:
    flops = max(1, epochs) * (6 * shape.layer_params * train_tokens + 2 * shape.layer_params * eval_tokens)
    return flops / (gpu_tflops * 1e12)
