"""The encoder a TMFT trial trains, without Ray: the pretrained (or random) model truncated to the
trial's layer, or an upstream stage's weights (WS loaded into it with `strict=False`, as the
authors; DAPT's or TSDAE's encoder folder truncated). Full pretrained models are kept in the
worker between trials, so each is loaded once per worker."""

from __future__ import annotations

import sys
from collections import OrderedDict
from pathlib import Path

from trainables.encoders.loading import load_pretrained, random_init, truncate
from trainables.stages.store import local_stage

# Full pretrained models kept in this worker between trials (actors are reused): loading is
# done once per model per worker, each trial copies only the layers it needs.
_PRETRAINED: OrderedDict = OrderedDict()


_PRETRAINED_CAPACITY = 2


STAGE_ENCODER_DIR = "encoder"  # a stage's weights: <stage dir>/encoder/ (a model folder)


ZERO_SHOT_STAGE = "embeddings"  # a zero-epoch trial's scores come from the one-pass embeddings stage


def pretrained(path: str):
    if path in _PRETRAINED:
        _PRETRAINED.move_to_end(path)
        return _PRETRAINED[path]
    model = load_pretrained(path)
    _PRETRAINED[path] = model
    while len(_PRETRAINED) > _PRETRAINED_CAPACITY:
        _PRETRAINED.popitem(last=False)
    return model


def build_encoder(
    model_path: str,
    layer: int,
    seed: int,
    random_weights: bool = False,
    upstream_method: str | None = None,
    upstream_path: str | None = None,
):
    """The layer-`layer` encoder: pretrained (or random) weights, or an upstream stage's."""
    if upstream_method in ("dapt", "tsdae", "ws"):
        upstream_path = local_stage(upstream_path)
    if upstream_method in ("dapt", "tsdae"):  # a whole encoder: start from the stage's weights
        return truncate(pretrained(str(Path(upstream_path) / STAGE_ENCODER_DIR)), layer)
    encoder = random_init(model_path, layer, seed) if random_weights else truncate(pretrained(model_path), layer)
    if upstream_method == "ws":
        from safetensors.torch import load_file

        state = load_file(str(Path(upstream_path) / STAGE_ENCODER_DIR / "model.safetensors"))
        result = encoder.load_state_dict(state, strict=False)  # as the authors (docs/methods/electra.md M2)
        if result.missing_keys:
            print(
                f"warning: {len(result.missing_keys)} encoder weights not in the WS stage {upstream_path} "
                f"(kept as they were): {result.missing_keys[:4]}",
                file=sys.stderr,
            )
    elif upstream_method not in (None, ZERO_SHOT_STAGE):
        raise ValueError(f"unknown upstream method {upstream_method!r}; expected 'ws', 'dapt' or 'tsdae'")
    return encoder
