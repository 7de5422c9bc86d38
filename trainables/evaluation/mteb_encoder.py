"""Any of the project's encoders as an mteb model, so mteb's own tasks and evaluators run on it.

`MtebEncoder(embed, name, ...)` wraps any function from texts to embedding rows (a meta-embedding's
encoder, a cached embedding table) in mteb's encoder protocol (`mteb.models.AbsEncoder`: `encode`
over mteb's data loader, cosine `similarity`, `mteb_model_meta`). `from_reference(model, layer,
pooling)` builds one from a hub id, a model folder, a best-dev folder or `runs:/<run id>`, truncated
to `layer` and scored as the suite scores it (trainables/evaluation/zero_shot.py: `own`, the default, is
the model's own pipeline, its kept Dense layer included, e.g. a SimCSE run's MLP), so its embeddings are
the suite's. `model_name(model, layer, pooling, depth, own)` is the name its results go under: the bare
hub id only for a hub model's own pipeline (mean pooling where it has no sentence-transformers config, as
sentence-transformers and so mteb load it) at its last layer; any other encoder is `embsweep/...`, with a
truncated layer (`-L<layer>`) and a pooling other than the model's own (`-<pooling>`) in the name, so no
truncated, re-pooled or trained encoder sits under the hub model's name, and two layers of one model never
share a results folder.

mteb is an optional dependency (the `mteb` extra): importing this module without it fails with
the install command.
"""

from __future__ import annotations

import re
from pathlib import Path
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


def is_hub_id(model: str) -> bool:
    """`owner/name`: not a folder, not a run reference."""
    return model.count("/") == 1 and not model.startswith((".", "/", "~", "runs:/"))


def model_name(
    model: str, layer: int | None = None, pooling: str = "own", depth: int | None = None, own: bool = False
) -> str:
    """`owner/name` of the results (see the module docstring): `own` says the pooling is the model's own
    pipeline (from its sentence-transformers config; mean pooling for a model without one, as
    sentence-transformers itself loads it); `depth` is the model's, None where not known (then
    any layer given is named)."""
    hub = is_hub_id(model)
    last = layer is None or layer == depth
    if hub and own and last:
        return model
    if model.startswith("runs:/"):
        base = f"embsweep/run-{model[len('runs:/') :].strip('/')}"
    else:
        base = "embsweep/" + re.sub(r"[^A-Za-z0-9._-]+", "-", model.strip("/") if hub else Path(model).name)
    if not last:
        base += f"-L{layer}"
    if not own:
        base += "-" + re.sub(r"[^A-Za-z0-9._-]+", "-", pooling)
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
    pooling: str = "own",
    *,
    mlflow_uri: str | None = None,
    batch_size: int = 64,
    max_length: int | None = None,
    revision: str | None = None,
) -> MtebEncoder:
    """The encoder `model` (hub id, folder, `runs:/<id>`) at `layer` (default: its last), scored by
    `pooling` (`own`: its own pipeline); its name from `model_name`, its base model the hub id it adapts."""
    from transformers import AutoModel, AutoTokenizer

    from trainables.encoders.loading import count_parameters, model_depth, resolve_model, truncate
    from trainables.evaluation.zero_shot import OWN, POOLINGS, apply_head, load_head, own_pipeline, pooled_layers

    if pooling not in (OWN, *POOLINGS):
        raise SweepInputError(f"pooling {pooling!r} not understood; known: {', '.join((OWN, *POOLINGS))}")
    path = resolve_model(model, mlflow_uri)
    mine = own_pipeline(path, model)
    pipeline = mine if pooling == OWN else mine if (pooling, ()) == (mine.pooling, mine.head) else None
    own = pipeline is not None and pipeline.source != "asked"
    base = pipeline.pooling if pipeline is not None else pooling
    head = load_head(path, pipeline.head) if pipeline is not None else []
    encoder, tokenizer = AutoModel.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))
    depth = model_depth(encoder.config)
    layer = depth if layer is None else int(layer)
    if not 0 <= layer <= depth:
        raise SweepInputError(f"layer {layer} is not within 0..{depth} for {model} ({depth} layers)")
    if layer < depth:
        encoder = truncate(encoder, layer)  # once, so the parameter count is the truncated model's

    def embed(texts: list[str]) -> np.ndarray:
        pooled = pooled_layers(encoder, tokenizer, texts, [layer], [base], batch_size=batch_size, max_length=max_length)
        return apply_head(head, pooled[(layer, base)]) if head else pooled[(layer, base)]

    name = model_name(model, layer, pipeline.name if pipeline is not None else pooling, depth, own)
    hub = name != model and is_hub_id(model)
    return MtebEncoder(
        embed,
        name,
        revision,
        dim=int(encoder.config.hidden_size),
        n_parameters=count_parameters(encoder) + sum(count_parameters(m) for m in head),
        **({"adapted_from": model} if hub else {}),
    )
