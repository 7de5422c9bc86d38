"""Upstream stages (the first half of WS+TMFT, DAPT+TMFT and TSDAE+TMFT, ...), executed in the stage store.

A stage is described by a plain-JSON `spec`:

    {"kind": "ws" | "dapt" | "tsdae" | ..., "key": <stage key>, "root": <stage store dir>, "model": <model id>,
     "model_path": <local folder>, "data_dir": ..., "data_checksum": ..., "config": {...}}

`key = stage_key(model id + weights fingerprint, config, data checksum)` (`make_spec` in trainables/stages.py), so
every trial and every later sweep with the same storage path that needs the same stage finds the
same directory `<root>/<key>/`. `execute(spec, run_id, mlflow_uri)` returns the stage's manifest:
it computes the stage under the store's lock unless it is already there (one process computes,
concurrent callers wait and reuse). Each computation appends one line to
`<root>/executions.jsonl` (key, kind, model, layer, seconds, host, pid): the record of how often
stages really ran, which the tests and `benchmarks/stage_reuse.py` read. While it computes, a
stage reports its steps in `<root>/<key>.progress.json` for the driver (trainables/stage_progress.py).

The MLflow run of a stage is created by the sweep driver (sweeps/engine/stages_plan.py), which passes its
id in; the manifest's `result` keeps it (`mlflow_run_id`, `mlflow_uri`) with the per-epoch history.
"""
from __future__ import annotations

import json
import math
import os
import socket
import time
from pathlib import Path

from trainables.registry import Registry

EXECUTION_LOG = "executions.jsonl"


class StageKind:
    """A kind of upstream stage: the module whose `compute(spec, out_dir) -> result` builds it,
    the method of the trials that start from it, the task its MLflow run records, and the params
    of that run beyond the stage config (`stage_<key>`) and the common ones."""

    name = ""
    module = ""
    downstream = ""
    task = ""

    @staticmethod
    def params(config: dict) -> dict:
        return {}

    @staticmethod
    def label(config: dict) -> str:
        """What tells two stages of one model apart in run names and progress lines."""
        return ""


STAGES = Registry("stage", StageKind)


@STAGES.register("ws")
class WordSimilarityStage(StageKind):
    module, downstream, task = "trainables.word_similarity", "ws+tmft", "wordsim"

    @staticmethod
    def params(config: dict) -> dict:
        return {"layer": config["layer"], "ws_selection": config["selection"]}

    @staticmethod
    def label(config: dict) -> str:
        return f"L{config['layer']}"


@STAGES.register("dapt")
class DaptStage(StageKind):
    module, downstream, task = "trainables.dapt", "dapt+tmft", "mlm"

    @staticmethod
    def params(config: dict) -> dict:
        return {"dapt_corpus": config["corpus"], "dapt_head": config["head"]}


@STAGES.register("tsdae")
class TsdaeStage(StageKind):
    module, downstream, task = "trainables.tsdae", "tsdae+tmft", "denoising"

    @staticmethod
    def params(config: dict) -> dict:
        return {"tsdae_corpus": config["corpus"], "tsdae_steps": config["steps"]}


@STAGES.register("sed-targets")
class SedTargetsStage(StageKind):
    module, downstream, task = "trainables.sed", "sed", "distillation"

    @staticmethod
    def params(config: dict) -> dict:
        return {"sed_corpus": config["corpus"], "sed_teachers": len(config["teachers"]),
                "train_pool_layers": config["train_pool_layers"], "eval_pool_layers": config["eval_pool_layers"]}


@STAGES.register("embeddings")
class EmbeddingsStage(StageKind):
    module, downstream, task = "trainables.layer_embeddings", "evaluate", "zero-shot"

    @staticmethod
    def params(config: dict) -> dict:
        return {"layers": ",".join(map(str, config["layers"])), "pooling": ",".join(config["poolings"]), "sets": ",".join(config["sets"])}


@STAGES.register("token-embeddings")
class TokenEmbeddingsStage(StageKind):
    module, downstream, task = "trainables.token_embeddings", "meta-embeddings", "source-encoding"

    @staticmethod
    def params(config: dict) -> dict:
        return {"sets": ",".join(config["sets"]), "max_length": config["max_length"],
                "max_train_samples": config["max_train_samples"]}


def _finite(value):
    """JSON-safe: NaN and infinities become None (the manifest is strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def append_execution(root, record: dict) -> None:
    line = json.dumps(record, sort_keys=True) + "\n"
    fd = os.open(Path(root) / EXECUTION_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_executions(root) -> list[dict]:
    path = Path(root) / EXECUTION_LOG
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _set_threads() -> None:
    import torch

    cpus = os.cpu_count() or 1
    try:
        import ray

        if ray.is_initialized():  # in a Ray task: the CPUs it was given
            cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", cpus)
    except Exception:
        pass
    torch.set_num_threads(max(1, int(cpus)))


def execute(spec: dict, run_id: str | None = None, mlflow_uri: str | None = None) -> dict:
    """The stage's manifest, computing the stage first unless the store already holds it."""
    import importlib

    from trainables.stage_progress import clear_progress
    from trainables.stages import StageStore

    store = StageStore(spec["root"])
    module = importlib.import_module(STAGES.get(spec["kind"]).module)
    if store.lookup(spec["key"]) is None:  # imports outside the timed compute (a fresh worker pays them once)
        import transformers  # noqa: F401

        import trainables.tmft  # noqa: F401

    def compute(out_dir: Path) -> dict:
        clear_progress(spec)  # an earlier attempt's, until this one writes its own
        _set_threads()
        started = time.time()
        result = module.compute(spec, out_dir)
        seconds = time.time() - started
        append_execution(spec["root"], {
            "key": spec["key"], "kind": spec["kind"], "model": spec["model"], "layer": spec["config"].get("layer"),
            "seconds": seconds, "host": socket.gethostname(), "pid": os.getpid(), "finished": time.time(),
            "mlflow_run_id": run_id,
        })
        (Path(out_dir) / "spec.json").write_text(json.dumps(spec, indent=2, sort_keys=True))
        return _finite({**result, "mlflow_run_id": run_id, "mlflow_uri": mlflow_uri, "seconds": seconds})

    metadata = {k: spec[k] for k in ("kind", "model", "model_identity", "data_checksum", "config")}
    store.get_or_compute(spec["key"], compute, metadata)
    return store.read_manifest(spec["key"])
