"""Pooled sentence embeddings of an encoder, for evaluation: every requested layer from ONE
forward pass (`pooled_layers`), or a single model's output (`encode_sentences`).

Layer l is `hidden_states[l]` of the full model (0 = embedding output), the same numbers as the
model physically truncated to l layers (trainables/encoders.truncate), which a layer sweep would
otherwise run once per layer. Pooling: `mean` = masked mean over every non-pad token ([CLS] and
[SEP] included, as sentence-transformers' mean pooling), `cls` = the first token, `max` = the masked
maximum (sentence-transformers' max pooling). Sentences are batched by length (the order of the output
is the input's).

`pipelines(folder, asked)` turns `--pooling` into what scores a model: `own` (the default) is the model's
own pipeline from its sentence-transformers config (trainables/encoders/st_folder.py `own_pipeline`: its
pooling, then its Dense layer where it keeps one, e.g. SimCSE's MLP), any other name that pooling. A
pipeline with a head (named e.g. `cls+dense`) pools, then runs the model's own modules (`load_head`,
`apply_head`) on the pooled vectors of every layer, as sentence-transformers' own truncation of a model
(its AdaptiveLayerLoss) keeps the modules after the transformer.
"""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trainables.core.errors import SweepInputError
from trainables.encoders.loading import mean_pool, model_depth, truncate
from trainables.encoders.st_folder import Pipeline, own_pipeline

if TYPE_CHECKING:
    import torch

POOLINGS = ("mean", "cls", "max")
OWN = "own"  # --pooling's word for the model's own pipeline


def _inference_mode(function):
    """`torch.inference_mode()` as a decorator, torch imported when the function is first called."""

    @functools.wraps(function)
    def run(*args, **kwargs):
        import torch

        with torch.inference_mode():
            return function(*args, **kwargs)

    return run


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
    if pooling == "max":
        return hidden.masked_fill(attention_mask.unsqueeze(-1) == 0, -1e9).max(dim=1).values
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


@_inference_mode
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
    import torch

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


def pipelines(folder, asked: list[str], name: str | None = None) -> list[Pipeline]:
    """The pipelines `asked` (pooling names, `own` among them) of a model folder, each distinct one once (in
    the order asked); `own` is `own_pipeline` (mean pooling where the folder has no sentence-transformers
    config), SweepInputError where it cannot be computed."""
    found = [own_pipeline(folder, name) if word == OWN else Pipeline(word) for word in asked]
    unique: dict[str, Pipeline] = {}
    for pipeline in found:  # `own` wins where it names the same pipeline as a pooling asked beside it
        if pipeline.name not in unique or pipeline.source != "asked":
            unique[pipeline.name] = pipeline
    return list(unique.values())


def base_pooling(name: str) -> str:
    """The pooling of a pipeline's name (`cls+dense` -> `cls`)."""
    return name.split("+", 1)[0]


def load_head(folder, head) -> list:
    """The model's own modules after its pooling (`Pipeline.head`: their folders), loaded on the CPU."""
    if not head:
        return []
    from sentence_transformers import SentenceTransformer

    listing = json.loads((Path(folder) / "modules.json").read_text())
    loaded = list(SentenceTransformer(str(folder), device="cpu"))
    return [loaded[i].eval() for i, module in enumerate(listing) if str(module.get("path")) in set(head)]


@_inference_mode
def apply_head(modules: list, embeddings: np.ndarray) -> np.ndarray:
    """Pooled vectors [n, hidden] through the head's modules (float32 on the CPU), as the model's forward."""
    import torch

    features = {"sentence_embedding": torch.from_numpy(np.asarray(embeddings, dtype=np.float32))}
    for module in modules:
        features = module(features)
    return features["sentence_embedding"].float().numpy()
