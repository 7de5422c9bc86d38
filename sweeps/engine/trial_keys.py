"""Trial keys: a content hash of everything that decides a trial's result, by which a finished trial is
found again and reused instead of computed twice (sweeps/engine/reuse.py).

A trial's key is the sha256 of the canonical JSON of:

- `settings`: every entry of the trial config whose setting changes the result (`Setting.result`,
  trainables/core/settings.py; config keys no setting declares, such as the axes' one value, the method's
  name and the upstream stage's `stage_key`, always count), each as its MLflow param text. A config's
  private `_...` entries (local paths) and `upstream_run_id` (a run id of one store: `stage_key` stands for
  the stage) are left out. A model named by a setting is replaced by its identity:
- `models`: the identity of each model the config names (its `model`, and any value, list item or
  comma-separated part that is one of --models, a `runs:/` reference or a local folder): a hub id with
  the revision of its local copy (`<id>@<revision>`), or, for a local folder or a `runs:/` checkpoint,
  `sha256:` of the folder's files (names and bytes);
- `data`: the data files' checksums the method's plan computed (`MethodPlan.checksums`);
- `code`: `sha256:` of the source of the project modules the trial's Trainable imports, followed
  through every `import` of the project's packages (at module level or inside a function);
- `device`: the device kind the trials run on, as the `auto` precision resolves by it: `cpu`,
  `cuda:<what auto runs under on this GPU>` (tf32 from Ampere on, fp16 before), `cluster` where the driver
  cannot know (a cluster's trials: pass an explicit --precision there to pin it), `simulated` for a
  `--simulate` sweep.

Every trial run records its key (tag `embsweep.trial_key`) and what it was made of (params
`trial_key_fields`, `model_identity`, `code_hash`, `device_kind`, beside the config's own params and the
`data_sha_*` params), so a key read back from a store is recomputed from the run's recorded settings
(`key_of_run`) and never trusted as it stands.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from argparse import Namespace
from dataclasses import dataclass, field
from pathlib import Path

from sweeps.engine.mlflow_writes import _param_value
from trainables.core.errors import SweepInputError
from trainables.core.paths import PROJECT_ROOT
from trainables.core.schema import TAG_TRIAL_KEY, TRIAL_KEY_PARAMS

PROJECT_PACKAGES = ("trainables", "sweeps", "analysis")
RUN_BOUND = ("upstream_run_id",)  # names a run of one store; the config's `stage_key` stands for the stage
FIELDS_PARAM, MODELS_PARAM, CODE_PARAM, DEVICE_PARAM = TRIAL_KEY_PARAMS
DATA_PREFIX = "data_sha_"


@dataclass(frozen=True)
class KeyFacts:
    """What every trial of one sweep shares in its key: the settings declared (to read `result`), the
    identities of its models by name, its data checksums, its code's hash and its device kind."""

    not_result: frozenset
    models: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    code: str = ""
    device: str = ""


def result_fields(config: dict, not_result) -> list[str]:
    """The config entries that are part of the key, sorted."""
    return sorted(k for k in config if not k.startswith("_") and k not in not_result and k not in RUN_BOUND)


def _digest(settings: dict, models: dict, data: dict, code: str, device: str) -> str:
    content = {
        "settings": {name: models.get(text, text) for name, text in settings.items()},
        "models": sorted(set(models.values())),  # identities only: a local model is its files, wherever it is
        "data": {name: str(data[name]) for name in sorted(data)},
        "code": code,
        "device": device,
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def trial_key(config: dict, facts: KeyFacts) -> tuple[str, dict]:
    """(the trial's key, the params that record what it was made of)."""
    fields = result_fields(config, facts.not_result)
    settings = {name: _param_value(config[name]) for name in fields}
    named = {part for name in fields for part in _parts(config[name])}
    models = {name: identity for name, identity in facts.models.items() if name in named}
    record = {
        FIELDS_PARAM: ",".join(fields),
        MODELS_PARAM: json.dumps(models, sort_keys=True),
        CODE_PARAM: facts.code,
        DEVICE_PARAM: facts.device,
    }
    return _digest(settings, models, facts.data, facts.code, facts.device), record


def _parts(value) -> set[str]:
    """The texts a config value may name a model by: itself, its list's items, its comma-separated parts."""
    items = value if isinstance(value, (list, tuple)) else [value]
    texts = {str(item) for item in items}
    return texts | {part.strip() for text in texts for part in text.split(",") if part.strip()}


def key_of_run(run) -> str | None:
    """The key recomputed from what a trial run recorded (its params), or None when it recorded too little
    to say (a run from before keys, or one whose params were cut)."""
    params = run.data.params
    try:
        fields = [f for f in params[FIELDS_PARAM].split(",") if f]
        models = json.loads(params[MODELS_PARAM])
        code, device = params[CODE_PARAM], params[DEVICE_PARAM]
        settings = {name: params[name] for name in fields}
    except (KeyError, ValueError, TypeError):
        return None
    data = {k[len(DATA_PREFIX) :]: v for k, v in params.items() if k.startswith(DATA_PREFIX)}
    return _digest(settings, models, data, code, device)


def recorded_key(run) -> str | None:
    return run.data.tags.get(TAG_TRIAL_KEY)


# --- the parts ---------------------------------------------------------------------------------
def _module_file(name: str) -> Path | None:
    base = PROJECT_ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def project_modules(module: str) -> dict[str, Path]:
    """The project modules `module` imports, itself included, followed through every import statement
    (wherever it stands) and every package a module lives in; {dotted name: file}."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen or name.split(".")[0] not in PROJECT_PACKAGES:
            continue
        path = _module_file(name)
        if path is None:
            continue
        seen[name] = path
        todo.append(name.rpartition(".")[0])  # the package it lives in runs first
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]  # what relative imports start at
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                todo.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    up = parts[: len(parts) - (node.level - 1)]
                    base = ".".join([*up, *([base] if base else [])])
                todo.append(base)
                todo.extend(f"{base}.{alias.name}" for alias in node.names)
    return seen


@functools.lru_cache(maxsize=None)
def code_hash(module: str) -> str:
    """`sha256:` of the source of `module` and of every project module it imports (paths and bytes)."""
    digest = hashlib.sha256()
    for name, path in sorted(project_modules(module).items()):
        digest.update(f"{path.relative_to(PROJECT_ROOT).as_posix()}\n".encode())
        digest.update(path.read_bytes())
    return "sha256:" + digest.hexdigest()


@functools.lru_cache(maxsize=256)
def _folder_digest(folder: str, stamp: tuple) -> str:
    digest = hashlib.sha256()
    root = Path(folder)
    for relative, _, _ in stamp:
        digest.update(f"{relative}\n".encode())
        with open(root / relative, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def folder_digest(folder) -> str:
    """sha256 of a folder's files: their relative names and bytes (hidden files left out)."""
    root = Path(folder)
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    stamp = tuple((p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _folder_digest(str(root), stamp)


def hub_revision(path: Path) -> str | None:
    """The revision of a hub cache copy (`.../models--org--name/snapshots/<revision>`), else None."""
    parts = Path(path).resolve().parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-1]
    return None


@functools.lru_cache(maxsize=64)
def model_identity(name: str, mlflow_uri: str | None) -> str:
    """A hub id's `<id>@<revision>` (its local copy's), else `sha256:<the folder's files>`."""
    from trainables.encoders.loading import resolve_model
    from trainables.encoders.run_refs import is_run_reference

    local = is_run_reference(name) or Path(name).expanduser().exists()
    try:
        path = resolve_model(name, mlflow_uri)
    except SweepInputError:
        if not Path(name).expanduser().is_dir():
            raise
        return f"sha256:{folder_digest(Path(name).expanduser())}"  # a folder that is no model: its files all the same
    revision = None if local else hub_revision(path)
    return f"{name}@{revision}" if revision else f"sha256:{folder_digest(path)}"


def device_kind(args: dict) -> str:
    if args.get("simulate"):
        return "simulated"
    from trainables.encoders.precision import trials_on_gpu

    on_gpu = trials_on_gpu(Namespace(**args))
    if on_gpu is None:
        return "cluster"
    if not on_gpu:
        return "cpu"
    import torch

    from trainables.encoders.precision import resolve

    return f"cuda:{resolve('auto', torch.device('cuda')).name}"  # what `auto` runs under on this GPU


def _is_folder(text: str) -> bool:
    return text.startswith(("/", "~", ".")) and Path(text).expanduser().is_dir()


def facts_of(method_cls, args: dict, configs: list[dict], mlflow_uri: str) -> KeyFacts:
    """The facts the keys of a sweep's trials share, from its plan (its configs, typed args and store)."""
    from sweeps.engine.cli import build_parser

    settings = build_parser("x", "", method_cls).settings
    given = {str(m) for m in (args.get("models") or [])}
    names = {
        part
        for config in configs
        for name, value in config.items()
        if not name.startswith("_")
        for part in _parts(value)
        if name == "model" or part in given or part.startswith("runs:/") or _is_folder(part)
    }
    module = "sweeps.engine.simulated_trial" if args.get("simulate") else method_cls.trainable_class().__module__
    return KeyFacts(
        not_result=frozenset(s.name for s in settings if not s.result),
        models={name: model_identity(name, mlflow_uri) for name in sorted(names)},
        data={k: str(v) for k, v in (args.get("data_checksums") or {}).items()},
        code=code_hash(module),
        device=device_kind(args),
    )


def keys_of(plan) -> dict[str, tuple[str, dict]]:
    """{config_hash of each of the plan's configs: (its trial key, the params recording it)}."""
    from trainables.core.schema import config_hash

    facts = facts_of(plan.method_cls, plan.args, plan.configs, plan.mlflow_uri)
    return {config_hash(c): trial_key(c, facts) for c in plan.configs}
