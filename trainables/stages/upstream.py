"""Upstream stages (the first half of WS+TMFT, DAPT+TMFT and TSDAE+TMFT, ...), executed in the stage store.

A stage is described by a plain-JSON `spec`:

    {"kind": "ws" | "dapt" | "tsdae" | ..., "key": <stage key>, "root": <stage store dir>, "model": <model id>,
     "model_path": <local folder>, "data_dir": ..., "data_checksum": ..., "config": {...}}

`key = stage_key(model id + weights fingerprint, config, data checksum)` (`make_spec` in trainables/stages/store.py), so
every trial and every later sweep with the same storage path that needs the same stage finds the
same directory `<root>/<key>/` (`root` is a local folder or an s3:// URI: trainables/stages/store.py).
`execute(spec, run_id, mlflow_uri)` returns the stage's manifest: it computes the stage under the
store's lock (or claim, on an object store) unless it is already there (one process computes,
concurrent callers wait and reuse). Each computation records itself (key, kind, model, layer,
seconds, host, pid): a line of `<root>/executions.jsonl` in a folder, an object
`<root>/executions/<key>-<uuid>.json` on an object store (which cannot append); `read_executions`
reads both, the record of how often stages really ran, which the tests and `benchmarks/stage_reuse.py`
read. While it computes, a stage reports its steps in `<root>/<key>.progress.json` for the driver
(trainables/stages/progress.py).

The MLflow run of a stage is created by the sweep driver (sweeps/engine/stages_plan.py), which passes its
id in; the manifest's `result` keeps it (`mlflow_run_id`, `mlflow_uri`) with the per-epoch history.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
import uuid
from pathlib import Path

from trainables.core import object_storage
from trainables.core.registry import Registry
from trainables.core.settings import Float, Setting, Text

STAGE_GROUP = "upstream stages"  # the --help section of every stage setting


def stage_settings(kind: str, settings, defaults: dict | None = None) -> tuple[Setting, ...]:
    """The settings of the stage kind `kind` as a method's flags, each declared once by the stage under the
    name its stage config gives it (a shared declaration such as `LR`, or the stage's own): named
    `<kind>_<name>` (`LR` becomes `--dapt-lr`), in --help's upstream-stages section, out of the trial
    config (a stage's settings reach its trials through the params they record), and with the stage's
    default `defaults[name]` (its `STAGE_DEFAULTS`, written as the flag takes it) where it has one."""
    defaults = defaults or {}
    return tuple(
        setting.but(
            name=f"{kind}_{setting.name}",
            group=STAGE_GROUP,
            config=False,
            **({"default": setting.kind.to_config(defaults[setting.name])} if setting.name in defaults else {}),
        )
        for setting in settings
    )


# Where and on what stages run: settings of every method that runs upstream stages.
STORE_SETTINGS = (
    Setting(
        "stage_dir",
        Text(),
        None,
        "the stage store (default: <storage-path>/stages): a local or shared folder, or an s3:// URI",
        group=STAGE_GROUP,
        config=False,
    ),
    Setting(
        "stage_cpus",
        Float(above=0),
        None,
        "CPUs per stage task (default: --cpus-per-trial)",
        group=STAGE_GROUP,
        config=False,
    ),
    Setting(
        "stage_gpus",
        Float(low=0),
        None,
        "GPUs per stage task (default: 1 when trials use GPUs, else 0)",
        group=STAGE_GROUP,
        config=False,
    ),
)

EXECUTION_LOG = "executions.jsonl"
EXECUTIONS_DIR = "executions"


class StageKind:
    """A kind of upstream stage, registered (`@STAGES.register(name)`) by the package that owns it:
    `compute(spec, out_dir) -> result` builds it, `downstream` is the method of the trials that start
    from it, `task` what its MLflow run records, `params` that run's params beyond the stage config
    (`stage_<key>`) and the common ones: by default the config values named in `recorded`.
    `settings`: the settings (trainables/core/settings.py) a method that runs the stage takes, declared
    once by the stage and named `<kind>_...` by `stage_settings`; they are flags of that method's script,
    checked with its own."""

    name = ""
    downstream = ""
    task = ""
    recorded: dict[str, str] = {}  # {param: config key}; a list is recorded comma-separated
    settings: tuple = ()

    @staticmethod
    def compute(spec: dict, out_dir: Path) -> dict:
        raise NotImplementedError

    @classmethod
    def params(cls, config: dict) -> dict:
        return {param: _param_value(config[key]) for param, key in cls.recorded.items()}

    @staticmethod
    def label(config: dict) -> str:
        """What tells two stages of one model apart in run names and progress lines."""
        return ""


STAGES = Registry("stage", StageKind)


def _param_value(value):
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value


def encoding_result(sentences: int, device, started: float, **final) -> dict:
    """The result of a stage that only encodes `sentences` sentences: no history, and the seconds
    since `started` (a `time.time()`) as `encode_seconds` among its final metrics, with `final`."""
    return {
        "sentences": sentences,
        "device": str(device),
        "history": [],
        "final": {"encode_seconds": time.time() - started, **final},
    }


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
    """Record one computation of a stage: a line of the log in a folder, an object of its own on an object store."""
    if object_storage.is_uri(root):
        location = object_storage.join(root, EXECUTIONS_DIR, f"{record['key']}-{uuid.uuid4().hex[:12]}.json")
        object_storage.write_bytes(location, json.dumps(record).encode())
        return
    line = json.dumps(record, sort_keys=True) + "\n"
    fd = os.open(Path(root) / EXECUTION_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_executions(root) -> list[dict]:
    """Every recorded computation of the store at `root`: the log's lines, then the objects in finishing order."""
    log = object_storage.read_bytes(object_storage.join(root, EXECUTION_LOG))
    records = [json.loads(line) for line in (log or b"").decode().splitlines() if line.strip()]
    folder = object_storage.join(root, EXECUTIONS_DIR)
    objects = [object_storage.read_json(object_storage.join(folder, info.base_name)) for info in _files(folder)]
    return records + sorted((r for r in objects if r is not None), key=lambda r: r.get("finished") or 0)


def _files(folder) -> list:
    import pyarrow.fs

    return [info for info in object_storage.list_dir(folder) if info.type == pyarrow.fs.FileType.File]


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
    from trainables.stages.progress import clear_progress
    from trainables.stages.store import open_store

    store = open_store(spec["root"])
    kind = STAGES.get(spec["kind"])
    if store.lookup(spec["key"]) is None:  # imports outside the timed compute (paid once)
        import transformers  # noqa: F401

    def compute(out_dir: Path) -> dict:
        clear_progress(spec)  # an earlier attempt's, until this one writes its own
        _set_threads()
        started = time.time()
        result = kind.compute(spec, out_dir)
        seconds = time.time() - started
        append_execution(
            spec["root"],
            {
                "key": spec["key"],
                "kind": spec["kind"],
                "model": spec["model"],
                "layer": spec["config"].get("layer"),
                "seconds": seconds,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "finished": time.time(),
                "mlflow_run_id": run_id,
            },
        )
        (Path(out_dir) / "spec.json").write_text(json.dumps(spec, indent=2, sort_keys=True))
        return _finite({**result, "mlflow_run_id": run_id, "mlflow_uri": mlflow_uri, "seconds": seconds})

    metadata = {k: spec[k] for k in ("kind", "model", "model_identity", "data_checksum", "config")}
    store.get_or_compute(spec["key"], compute, metadata)
    return store.read_manifest(spec["key"])
