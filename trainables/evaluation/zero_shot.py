"""Pooled sentence embeddings of an encoder, for evaluation: every requested layer from ONE
forward pass (`pooled_layers`), or a single model's output (`encode_sentences`).

Layer l is `hidden_states[l]` of the full model (0 = embedding output), the same numbers as the
model physically truncated to l layers (trainables/encoders.truncate), which a layer sweep would
otherwise run once per layer. Pooling: `mean` = masked mean over every non-pad token ([CLS] and
[SEP] included, as sentence-transformers' mean pooling), `cls` = the first token. Sentences are
batched by length (the order of the output is the input's).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import torch

from trainables.core.errors import SweepInputError
from trainables.encoders.loading import mean_pool, model_depth, truncate

POOLINGS = ("mean", "cls")


def default_max_length(model_path, tokenizer=None) -> int:
    """The folder's `sentence_bert_config.json` max_seq_length, else the tokenizer's limit capped
    at 512 (the tokenizer is loaded from `model_path` when not given)."""
    config = Path(model_path) / "sentence_bert_config.json"
    if model_path and config.is_file():
        length = json.loads(config.read_text()).get("max_seq_length")
        if length:
            return int(length)
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    return int(min(tokenizer.model_max_length or 512, 512))


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    if pooling == "mean":
        return mean_pool(hidden, attention_mask)
    if pooling == "cls":
        return hidden[:, 0]
    raise ValueError(f"unknown pooling {pooling!r}; known: {', '.join(POOLINGS)}")


def _batches(tokenizer, sentences: list[str], batch_size: int, max_length: int):
    """(rows, tokenised batch) from the longest sentences to the shortest."""
    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        encoded = tokenizer(
            [sentences[i] for i in rows], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        )
        yield rows, encoded


def _check_request(model, layers: list[int], poolings: list[str]) -> None:
    depth = model_depth(model.config)
    outside = [layer for layer in layers if not 0 <= layer <= depth]
    if not layers or outside:
        raise SweepInputError(f"layers {outside or layers} are not within 0..{depth} for this model ({depth} layers)")
    unknown = [p for p in poolings if p not in POOLINGS]
    if not poolings or unknown:
        raise ValueError(f"poolings {unknown or poolings} not understood; known: {', '.join(POOLINGS)}")


@torch.inference_mode()
def pooled_layers(
    model,
    tokenizer,
    sentences: list[str],
    layers: list[int],
    poolings: list[str],
    *,
    batch_size: int = 64,
    max_length: int | None = None,
    device=None,
    on_batch=None,
) -> dict[tuple[int, str], np.ndarray]:
    """{(layer, pooling): float32 [n, hidden]} from one forward pass per batch with all hidden
    states, rows in the order of `sentences`. Only the layers up to max(layers) run (a truncated
    copy when that is less than the model's depth). `device`: where the model already is unless
    given (then the model is moved there); `max_length`: `default_max_length` of the model's
    folder; `on_batch()` is called after each batch (progress). The model's train/eval mode is kept."""
    _check_request(model, layers, poolings)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    max_length = max_length or default_max_length(model.name_or_path, tokenizer)
    top = max(layers)
    runner = model if top == model_depth(model.config) else truncate(model, top)
    was_training = runner.training
    runner.to(device).eval()
    takes_token_types = "token_type_ids" in inspect.signature(runner.forward).parameters
    out = {
        (layer, p): np.zeros((len(sentences), int(runner.config.hidden_size)), dtype=np.float32)
        for layer in layers
        for p in poolings
    }
    try:
        for rows, encoded in _batches(tokenizer, sentences, batch_size, max_length):
            inputs = {k: v.to(device) for k, v in encoded.items() if k != "token_type_ids" or takes_token_types}
            output = runner(**inputs, output_hidden_states=True)
            states = output.hidden_states or (output.last_hidden_state,)  # a model of 0 layers records none
            for layer in layers:
                for p in poolings:
                    out[(layer, p)][rows] = pool(states[layer].float(), inputs["attention_mask"], p).cpu().numpy()
            if on_batch is not None:
                on_batch()
    finally:
        runner.train(was_training)
    return out


def encode_sentences(
    model,
    tokenizer,
    sentences: list[str],
    pooling: str,
    *,
    batch_size: int = 64,
    max_length: int | None = None,
    device=None,
) -> np.ndarray:
    """The model's own output (its last layer), pooled: float32 [n, hidden]."""
    layer = model_depth(model.config)
    return pooled_layers(
        model, tokenizer, sentences, [layer], [pooling], batch_size=batch_size, max_length=max_length, device=device
    )[(layer, pooling)]
