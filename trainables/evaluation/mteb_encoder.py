"""Any of the project's encoders as an mteb model, so mteb's own tasks and evaluators run on it.

`MtebEncoder(embed, name, ...)` wraps any function from texts to embedding rows (a meta-embedding's
encoder, a cached embedding table) in mteb's encoder protocol (`mteb.models.AbsEncoder`: `encode`
over mteb's data loader, cosine `similarity`, `mteb_model_meta`). `from_reference(model, layer,
pooling)` builds one from a hub id, a model folder, a best-dev folder or `runs:/<run id>`, truncated
to `layer` and pooled as the suite pools (trainables/evaluation/zero_shot.py), so its embeddings are
the suite's. `model_name(model, layer, pooling, depth)` is the name its results go under: a
truncated layer or another pooling than the model's own is part of the name, so two layers of one
model never share a results folder.

mteb is an optional dependency (the `mteb` extra): importing this module without it fails with
the install command.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np

from trainables.core.errors import SweepInputError

try:
    from mteb.models import ModelMeta
    from mteb.models.abs_encoder import AbsEncoder
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise SweepInputError(f"mteb is not installed ({missing}); install it with: pip install -e '.[mteb]'") from None

Embed = Callable[[list[str]], np.ndarray]
NO_REVISION = "no_revision_available"  # mteb's own placeholder when a model has no hub revision


def model_name(model: str, layer: int | None = None, pooling: str = "mean", depth: int | None = None) -> str:
    """`owner/name` of the results: the hub id, or `embsweep/<folder or run id>`; with `-L<layer>`
    when the layer is not the model's last and `-<pooling>` when the pooling is not mean."""
    if model.startswith("runs:/"):
        base = f"embsweep/run-{model[len('runs:/') :].strip('/')}"
    elif "/" in model and not model.startswith((".", "/", "~")) and model.count("/") == 1:
        base = model
    else:
        base = "embsweep/" + re.sub(r"[^A-Za-z0-9._-]+", "-", model.rstrip("/").split("/")[-1])
    if layer is not None and layer != depth:
        base += f"-L{layer}"
    if pooling != "mean":
        base += f"-{pooling}"
    return base


def model_meta(name: str, revision: str | None, dim: int | None, n_parameters: int | None = None, **extra) -> ModelMeta:
    """mteb's metadata of an embsweep encoder: cosine similarity, PyTorch, no instructions."""
    return ModelMeta(
        loader=None,
        name=name,
        revision=revision or NO_REVISION,
        release_date=None,
        languages=None,
        n_parameters=n_parameters,
        memory_usage_mb=None,
        max_tokens=None,
        embed_dim=dim,
        license=None,
        open_weights=True,
        public_training_code=None,
        public_training_data=None,
        framework=["PyTorch"],
        similarity_fn_name="cosine",
        use_instructions=False,
        training_datasets=None,
        **extra,
    )


class MtebEncoder(AbsEncoder):
    """`embed(texts) -> rows` as an mteb encoder; every batch of mteb's loader is encoded through it."""

    def __init__(self, embed: Embed, name: str, revision: str | None = None, dim: int | None = None, **meta):
        self.embed = embed
        self.mteb_model_meta = model_meta(name, revision, dim, **meta)

    def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs) -> np.ndarray:
        texts = [text for batch in inputs for text in batch["text"]]
        return np.asarray(self.embed(texts), dtype=np.float32)


def from_reference(
    model: str,
    layer: int | None = None,
    pooling: str = "mean",
    *,
    mlflow_uri: str | None = None,
    batch_size: int = 64,
    max_length: int | None = None,
    revision: str | None = None,
) -> MtebEncoder:
    """The encoder `model` (hub id, folder, `runs:/<id>`) at `layer` (default: its last), pooled as
    the suite pools; its name from `model_name`."""
    from transformers import AutoModel, AutoTokenizer

    from trainables.encoders.loading import count_parameters, model_depth, resolve_model, truncate
    from trainables.evaluation.zero_shot import POOLINGS, pooled_layers

    if pooling not in POOLINGS:
        raise SweepInputError(f"pooling {pooling!r} not understood; known: {', '.join(POOLINGS)}")
    path = resolve_model(model, mlflow_uri)
    encoder, tokenizer = AutoModel.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))
    depth = model_depth(encoder.config)
    layer = depth if layer is None else int(layer)
    if not 0 <= layer <= depth:
        raise SweepInputError(f"layer {layer} is not within 0..{depth} for {model} ({depth} layers)")
    if layer < depth:
        encoder = truncate(encoder, layer)  # once, so the parameter count is the truncated model's

    def embed(texts: list[str]) -> np.ndarray:
        return pooled_layers(
            encoder, tokenizer, texts, [layer], [pooling], batch_size=batch_size, max_length=max_length
        )[(layer, pooling)]

    return MtebEncoder(
        embed,
        model_name(model, layer, pooling, depth),
        revision,
        dim=int(encoder.config.hidden_size),
        n_parameters=count_parameters(encoder),
    )
