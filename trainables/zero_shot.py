"""Pooled sentence embeddings of an encoder, for evaluation: every requested layer from ONE
forward pass (`pooled_layers`), or a single model's output (`encode_sentences`).

Layer l is `hidden_states[l]` of the full model (0 = embedding output), the same numbers as the
model physically truncated to l layers (trainables/encoders.truncate), which a layer sweep would
otherwise run once per layer. Pooling: `mean` = masked mean over every non-pad token ([CLS] and
[SEP] included, as sentence-transformers' mean pooling), `cls` = the first token. Sentences are
batched by length (the order of the output is the input's).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from trainables.encoders import mean_pool, truncate

POOLINGS = ("mean", "cls")


def default_max_length(model_path) -> int:
    """The folder's `sentence_bert_config.json` max_seq_length, else the tokenizer's limit (<= 512)."""
    config = Path(model_path) / "sentence_bert_config.json"
    if config.is_file():
        length = json.loads(config.read_text()).get("max_seq_length")
        if length:
            return int(length)
    from transformers import AutoTokenizer

    limit = AutoTokenizer.from_pretrained(str(model_path)).model_max_length
    return int(min(limit, 512)) if limit else 512


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    if pooling == "mean":
        return mean_pool(hidden, attention_mask)
    if pooling == "cls":
        return hidden[:, 0]
    raise ValueError(f"unknown pooling {pooling!r}; known: {', '.join(POOLINGS)}")


def _batches(tokenizer, sentences: list[str], batch_size: int, max_length: int | None):
    lengths = [len(s) for s in sentences]
    order = sorted(range(len(sentences)), key=lambda i: -lengths[i])
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        encoded = tokenizer([sentences[i] for i in chunk], padding=True, truncation=True,
                            max_length=max_length, return_tensors="pt")
        yield chunk, encoded


@torch.inference_mode()
def pooled_layers(model, tokenizer, sentences: list[str], layers: list[int], poolings: list[str], *,
                  batch_size: int = 64, max_length: int | None = None, device=None,
                  on_batch=None) -> dict[tuple[int, str], np.ndarray]:
    """{(layer, pooling): float32 [n, hidden]} from one forward pass per batch with all hidden
    states; `on_batch()` is called after each batch (progress)."""
    device = torch.device(device or "cpu")
    top = max(layers)
    runner = truncate(model, top) if top < int(model.config.num_hidden_layers) else model
    runner = runner.to(device).eval()
    hidden_size = int(runner.config.hidden_size)
    out = {(layer, p): np.zeros((len(sentences), hidden_size), dtype=np.float32) for layer in layers for p in poolings}
    for chunk, encoded in _batches(tokenizer, sentences, batch_size, max_length):
        ids, mask = encoded["input_ids"].to(device), encoded["attention_mask"].to(device)
        extra = {"token_type_ids": encoded["token_type_ids"].to(device)} if "token_type_ids" in encoded else {}
        output = runner(input_ids=ids, attention_mask=mask, output_hidden_states=True, **extra)
        states = output.hidden_states or (output.last_hidden_state,)  # a model without layers records none
        for layer in layers:
            for p in poolings:
                out[(layer, p)][chunk] = pool(states[layer].float(), mask, p).cpu().numpy()
        if on_batch is not None:
            on_batch()
    return out


def encode_sentences(model, tokenizer, sentences: list[str], pooling: str, *, batch_size: int = 64,
                     max_length: int | None = None, device=None) -> np.ndarray:
    """The model's own output (its last layer), pooled: float32 [n, hidden]."""
    was_training = model.training
    model_device = next(model.parameters()).device
    layer = int(model.config.num_hidden_layers)
    try:
        result = pooled_layers(model, tokenizer, sentences, [layer], [pooling], batch_size=batch_size,
                               max_length=max_length, device=device or model_device)
    finally:
        model.train(was_training)
    return result[(layer, pooling)]
