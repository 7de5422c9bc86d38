"""The `embeddings` stage: every requested layer's pooled embeddings of an evaluation suite's
sentences, from one forward pass per model (trainables/evaluation/zero_shot.py `pooled_layers`), computed once in
the stage store and read by trials that only score them: zero-shot evaluation
(trainables/methods/evaluate/method.py) and TMFT with `--epochs 0` (trainables/methods/tmft/method.py).

Spec config: `layers`, `poolings`, `max_length`, `batch_size`, `sets` (the suite), and where a pooling
is a pipeline with the model's own head (e.g. `cls+dense`: trainables/evaluation/zero_shot.py
`pipelines`), `head` (its modules' folders) and `head_fingerprint`. The stage directory holds
`layer<l>_<pooling>.npy` (float32, rows = the suite's `sentences`) and `params.json` (the truncated
model's parameter count per layer).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from trainables.stages.store import local_stage
from trainables.stages.upstream import STAGES, StageKind, encoding_result

PARAMS_FILE = "params.json"


def embeddings_file(layer: int, pooling: str) -> str:
    return f"layer{int(layer)}_{pooling}.npy"


def stage_spec(
    model: str,
    path,
    layers: list[int],
    poolings: list[str],
    sets: list[str],
    max_length: int,
    batch_size: int,
    root,
    data_dir,
    suite,
    precision: dict | None = None,
    head: tuple[str, ...] = (),
) -> dict:
    """`precision`: trainables.encoders.precision.stage_precision of the sweep's flags; `head`: the folders
    of the model's modules after its pooling that a `<pooling>+dense` pooling runs."""
    from trainables.stages.store import make_spec, model_fingerprint

    config = {
        "stage": "embeddings",
        "layers": sorted(layers),
        "poolings": list(poolings),
        "max_length": int(max_length),
        "batch_size": int(batch_size),
        "sets": list(sets),
        **(precision or {}),
    }
    if head:  # absent otherwise: the keys of the stages computed before heads were scored stay as they were
        config["head"] = list(head)
        config["head_fingerprint"] = ",".join(model_fingerprint(Path(path) / folder) for folder in head)
    checksum = ",".join(f"{k}={v}" for k, v in sorted(suite.checksums.items()))
    return make_spec("embeddings", model, path, root, data_dir, checksum, config)


def load(stage_dir, layer: int, pooling: str) -> tuple[np.ndarray, int]:
    """(embeddings of the suite's sentences, parameter count) of one layer and pooling; `stage_dir` is a
    folder or a stage's URI (trainables/stages/store.py `local_stage`)."""
    stage_dir = local_stage(stage_dir)
    params = json.loads((stage_dir / PARAMS_FILE).read_text())
    return np.load(stage_dir / embeddings_file(layer, pooling)), int(params[str(int(layer))])


def compute(spec: dict, out_dir: Path) -> dict:
    import torch
    from transformers import AutoTokenizer

    from trainables.encoders.loading import count_parameters, load_pretrained, truncate
    from trainables.encoders.precision import resolve
    from trainables.evaluation.sets import load_suite
    from trainables.evaluation.zero_shot import apply_head, base_pooling, load_head, pooled_layers
    from trainables.stages.progress import StageProgress

    config = spec["config"]
    suite = load_suite(config["sets"], spec["data_dir"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = load_pretrained(spec["model_path"])
    tokenizer = AutoTokenizer.from_pretrained(spec["model_path"])
    started = time.time()
    progress = StageProgress(spec, math.ceil(len(suite.sentences) / config["batch_size"]))
    with resolve(config.get("precision", "fp32"), device).autocast():
        pooled = pooled_layers(
            model,
            tokenizer,
            suite.sentences,
            config["layers"],
            list(dict.fromkeys(base_pooling(p) for p in config["poolings"])),
            batch_size=config["batch_size"],
            max_length=config["max_length"],
            device=device,
            on_batch=progress.step,
        )
    progress.finish()
    head = load_head(spec["model_path"], config.get("head"))
    for layer in config["layers"]:
        for name in config["poolings"]:
            if name != base_pooling(name):
                pooled[(layer, name)] = apply_head(head, pooled[(layer, base_pooling(name))])
    pooled = {key: value for key, value in pooled.items() if key[1] in config["poolings"]}
    for (layer, pooling), embeddings in pooled.items():
        np.save(Path(out_dir) / embeddings_file(layer, pooling), np.asarray(embeddings, dtype=np.float32))
    params = {str(layer): count_parameters(truncate(model, layer)) for layer in config["layers"]}
    (Path(out_dir) / PARAMS_FILE).write_text(json.dumps(params))
    return encoding_result(len(suite.sentences), device, started)


@STAGES.register("embeddings")
class EmbeddingsStage(StageKind):
    downstream, task = "evaluate", "zero-shot"
    compute = staticmethod(compute)
    recorded = {"layers": "layers", "pooling": "poolings", "sets": "sets"}
