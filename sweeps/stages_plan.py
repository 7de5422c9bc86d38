"""Chained sweeps: upstream stages (WS, DAPT) computed once in the sweep driver, then TMFT trials.

`plan_improvements(args, prog)` extends the TMFT sweep plan (sweeps/runner.py `plan_sweep`): for
every (model, layer, seed) and every improvement it adds a trial with method `ws+tmft` or
`dapt+tmft`, the key of the stage it starts from (`stage_key`), the stage settings as params
(`ws_*`, `dapt_*`) and the stage's directory (`_upstream_path`). One WS stage per (model, layer)
(seed 0 only, as the paper; shared by every seed), one DAPT stage per model (shared by every layer
and seed). Stages live in the content-addressed store `<storage-path>/stages/` (or `--stage-dir`),
shared by every sweep that uses the same storage path.

`prepare_stages(plan)` runs in the driver after the sweep's MLflow parent run exists and before
any trial starts (`SweepPlan.prepare`):
- a stage already in the store is reused (its MLflow run is found, or recorded again in a store
  that does not have it);
- every missing stage gets an MLflow run (method `ws` / `dapt`, tag `embsweep.role` = "stage",
  child of the sweep's parent run, param and tag `stage_key`) and is computed as a Ray task with
  the trial's CPUs and a whole GPU when the trials use GPUs (`--stage-cpus`, `--stage-gpus`), all
  missing stages at once as resources allow, each under the store's lock (a second sweep asking
  for the same stage at the same time waits for it and reuses it);
- the trials then get `upstream_run_id` = that run's id. A trial whose stage failed is dropped
  (and reported); the sweep exits non-zero.

Why in the driver rather than inside trials: a trial that waited for a stage would hold its CPU
or GPU share idle for the whole stage (hours for DAPT), and with every slot held by waiters the
stage itself could never be scheduled; stage runs are created by the driver like every other
MLflow write (trainables/tracking.py), so workers never talk to the store; and the trials'
`upstream_run_id` is known before they start, so it is part of their config and params.
The cost is a barrier: TMFT trials start when all stages are done.
"""
from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

from trainables import schema
from trainables.errors import SweepInputError
from trainables.upstream import METHODS, TASKS

TAG_STAGE_KEY = "embsweep.stage_key"
TAG_STAGE_COPY_OF = "embsweep.stage_copy_of"
ROLE_STAGE = "stage"
IMPROVEMENTS = {"ws": ("ws",), "dapt": ("dapt",), "both": ("ws", "dapt")}
# --smoke-test also shrinks the stages.
STAGE_SMOKE = {"ws_epochs": 2, "ws_max_train_samples": 256, "dapt_epochs": 1, "dapt_max_sentences": 384,
               "dapt_batch_size": 16, "dapt_accumulation": 2}


class StageError(RuntimeError):
    """Every trial of the sweep lost its upstream stage."""


def add_stage_arguments(parser) -> None:
    """`--improvement` and the stage settings (defaults: METHODS.md M2, M3)."""
    from trainables import dapt, word_similarity

    group = parser.add_argument_group("improvements (upstream stages)")
    group.add_argument("--improvement", choices=sorted(IMPROVEMENTS), default="both",
                       help="ws: word-similarity TMFT at layer l, then STS TMFT; dapt: MLM pre-training, then TMFT; both")
    ws = word_similarity.STAGE_DEFAULTS
    group.add_argument("--ws-epochs", type=int, default=ws["epochs"], help="word-similarity stage epochs (best dev epoch kept)")
    group.add_argument("--ws-batch-size", type=int, default=ws["batch_size"])
    group.add_argument("--ws-lr", type=float, default=ws["lr"])
    group.add_argument("--ws-selection", choices=word_similarity.SELECTIONS, default=ws["selection"],
                       help="best-epoch rule: dev Spearman of the cosine (the paper), or the authors' max over cosine, Euclidean, Manhattan and dot")
    group.add_argument("--ws-max-train-samples", type=int, default=None, help="train the WS stage on a deterministic subset of word pairs")
    dp = dapt.STAGE_DEFAULTS
    group.add_argument("--dapt-epochs", type=int, default=dp["epochs"])
    group.add_argument("--dapt-batch-size", type=int, default=dp["batch_size"])
    group.add_argument("--dapt-accumulation", type=int, default=dp["accumulation"], help="gradient accumulation steps (effective batch = batch x this)")
    group.add_argument("--dapt-lr", type=float, default=dp["lr"])
    group.add_argument("--dapt-corpus", default="sick,stsb-train,wiki",
                       help="comma-separated sentence sources: sick, stsb-train, wiki, allnli (the paper's SNLI+MultiNLI), snli, multinli")
    group.add_argument("--dapt-max-sentences", type=int, default=None, help="a deterministic subset of the corpus (quick runs)")
    group.add_argument("--dapt-head", choices=dapt.HEADS, default=dp["head"],
                       help="auto: the checkpoint's MLM head, or a new tied one if it has none; authors: always a new head, only its tied decoder trained")
    group.add_argument("--stage-dir", default=None, help="the stage store (default: <storage-path>/stages; must be a local or shared file system)")
    group.add_argument("--stage-cpus", type=float, default=None, help="CPUs per stage task (default: --cpus-per-trial)")
    group.add_argument("--stage-gpus", type=float, default=None, help="GPUs per stage task (default: 1 when trials use GPUs, else 0)")


def _check_stage_numbers(a: dict) -> None:
    for flag in ("ws_batch_size", "dapt_batch_size", "dapt_accumulation"):
        if a[flag] <= 0:
            raise SweepInputError(f"--{flag.replace('_', '-')} must be a positive integer, got {a[flag]}")
    for flag in ("ws_epochs", "dapt_epochs"):
        if a[flag] < 0:
            raise SweepInputError(f"--{flag.replace('_', '-')} must be 0 or more, got {a[flag]}")
    for flag in ("ws_lr", "dapt_lr"):
        if not a[flag] > 0:
            raise SweepInputError(f"--{flag.replace('_', '-')} must be positive, got {a[flag]}")
    for flag in ("ws_max_train_samples", "dapt_max_sentences"):
        if a[flag] is not None and a[flag] <= 0:
            raise SweepInputError(f"--{flag.replace('_', '-')} must be a positive integer, got {a[flag]}")


def stage_root(a: dict, storage_path: str) -> Path:
    from sweeps import storage

    if a.get("stage_dir"):
        return Path(a["stage_dir"]).expanduser().resolve()
    if storage.is_uri(storage_path):
        raise SweepInputError("--storage-path is a URI, but the stage store needs a file system with locks: pass --stage-dir (e.g. an NFS mount)")
    return Path(storage_path) / "stages"


def _downstream_params(kind: str, a: dict) -> dict:
    """Stage settings recorded in every downstream trial's params."""
    if kind == "ws":
        return {"ws_selection": a["ws_selection"], "ws_epochs": a["ws_epochs"], "ws_batch_size": a["ws_batch_size"],
                "ws_lr": a["ws_lr"], "ws_max_train_samples": a["ws_max_train_samples"]}
    from trainables.data.sentences import parse_sources

    return {"dapt_corpus": "+".join(parse_sources(a["dapt_corpus"])), "dapt_epochs": a["dapt_epochs"],
            "dapt_batch_size": a["dapt_batch_size"], "dapt_accumulation": a["dapt_accumulation"], "dapt_lr": a["dapt_lr"],
            "dapt_max_sentences": a["dapt_max_sentences"], "dapt_head": a["dapt_head"]}


def plan_improvements(args, prog: str = "improvements"):
    """The sweep plan of WS+TMFT and/or DAPT+TMFT trials, with a `prepare` that computes stages."""
    from sweeps.runner import plan_sweep
    from trainables import dapt, word_similarity
    from trainables.data.sentences import dapt_corpus_checksum, parse_sources
    from trainables.data.word_similarity import ws_checksum
    from trainables.upstream import make_spec

    plan = plan_sweep(args, method="tmft", prog=prog)
    a = plan.args  # on --resume: the saved flags
    if a.get("smoke_test"):
        a.update(STAGE_SMOKE)
    _check_stage_numbers(a)
    if a["search"] == "optuna" and a["improvement"] == "both":
        raise SweepInputError("--search optuna tunes one method: pass --improvement ws or --improvement dapt")
    kinds = IMPROVEMENTS[a["improvement"]]
    root = stage_root(a, plan.storage_path)
    paths = {model: task.model_path for model, task in plan.data.items()}
    data_dir = a["data_dir"]
    checksums = {}
    if "ws" in kinds:
        checksums["ws"] = ws_checksum(data_dir)  # raises DataFormatError naming a missing file
    if "dapt" in kinds:
        sources = parse_sources(a["dapt_corpus"])
        checksums["dapt"] = dapt_corpus_checksum(data_dir, sources)
        for path in set(paths.values()):
            dapt.check_model(path)
    specs, configs = {}, []
    for base in plan.configs:
        for kind in kinds:
            if kind == "ws":
                config = word_similarity.stage_config(
                    base["layer"], epochs=a["ws_epochs"], batch_size=a["ws_batch_size"], lr=a["ws_lr"],
                    selection=a["ws_selection"], random_init=a["random_init"],
                    max_train_samples=a["ws_max_train_samples"], max_eval_samples=a["max_eval_samples"])
            else:
                config = dapt.stage_config(
                    corpus="+".join(sources), epochs=a["dapt_epochs"], batch_size=a["dapt_batch_size"],
                    accumulation=a["dapt_accumulation"], lr=a["dapt_lr"], head=a["dapt_head"],
                    random_init=a["random_init"], max_sentences=a["dapt_max_sentences"])
            spec = make_spec(kind, base["model"], paths[base["model"]], root, data_dir, checksums[kind], config)
            specs.setdefault(spec["key"], spec)
            configs.append({
                **base, "method": METHODS[kind], "upstream_method": kind, "stage_key": spec["key"],
                "upstream_run_id": None, **_downstream_params(kind, a), "_upstream_path": str(root / spec["key"]),
            })
    plan.configs = configs
    plan.method = ",".join(METHODS[k] for k in kinds)
    plan.static_params["stage_dir"] = str(root)
    plan.prepare = functools.partial(prepare_stages, specs=specs)
    plan.failed_stages = {}
    return plan


# --- MLflow runs of stages (written by the driver) -------------------------------------------
def _client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def stage_params(spec: dict, static: dict) -> dict:
    config = spec["config"]
    params = {k: v for k, v in static.items() if not k.startswith("data_sha_")}
    params.update({f"stage_{k}": v for k, v in config.items()})
    params.update({
        "method": spec["kind"], "model": spec["model"], "task": TASKS[spec["kind"]], "seed": config["seed"],
        "epochs": config["epochs"], "lr": config["lr"], "batch_size": config["batch_size"],
        "stage_key": spec["key"], "model_identity": spec["model_identity"], "data_sha": spec["data_checksum"],
        "random_init": config.get("random_init", False),
    })
    if "layer" in config:
        params["layer"] = config["layer"]
    if spec["kind"] == "ws":
        params["ws_selection"] = config["selection"]
    else:
        params["dapt_corpus"] = config["corpus"]
        params["dapt_head"] = config["head"]
    return params


def create_stage_run(client, parent_run_id: str, spec: dict, static: dict) -> str:
    from mlflow.entities import Param

    from trainables.tracking import _param_value

    parent = client.get_run(parent_run_id)
    layer = f":L{spec['config']['layer']}" if "layer" in spec["config"] else ""
    run = client.create_run(
        parent.info.experiment_id, run_name=f"{spec['kind']}:{Path(str(spec['model'])).name}{layer}",
        tags={schema.TAG_PARENT: parent_run_id, schema.TAG_ROLE: ROLE_STAGE, TAG_STAGE_KEY: spec["key"],
              schema.TAG_SWEEP: parent.data.tags.get(schema.TAG_SWEEP, "")},
    )
    params = stage_params(spec, static)
    client.log_batch(run.info.run_id, params=[Param(k, _param_value(v)) for k, v in params.items()])
    return run.info.run_id


def log_stage_result(client, run_id: str, result: dict) -> None:
    """Per-epoch history (step = epoch), final metrics, and what the stage reports about itself."""
    from mlflow.entities import Metric, Param

    now = int(time.time() * 1000)
    metrics = []
    history = result.get("history") or []
    for row in history:
        metrics += [Metric(k, float(v), now, int(row["epoch"])) for k, v in row.items()
                    if k != "epoch" and isinstance(v, (int, float)) and not isinstance(v, bool)]
    last = int(history[-1]["epoch"]) if history else 0
    metrics += [Metric(k, float(v), now, last) for k, v in (result.get("final") or {}).items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)]
    params = [Param(k, str(result[k])) for k in ("params_truncated", "sentences", "corpus", "head_source", "train_pairs", "device")
              if result.get(k) is not None]
    for start in range(0, len(metrics), 900):
        client.log_batch(run_id, metrics=metrics[start:start + 900], params=params if start == 0 else [])
    if not metrics and params:
        client.log_batch(run_id, params=params)


def _existing_stage_run(client, experiment_id: str, manifest: dict, uri: str) -> str | None:
    """The run that recorded this stage in this MLflow store, if any."""
    result = manifest.get("result") or {}
    run_id = result.get("mlflow_run_id")
    if run_id and result.get("mlflow_uri") == uri:
        try:
            if client.get_run(run_id).info.lifecycle_stage == "active":
                return run_id
        except Exception:
            pass
    found = client.search_runs([experiment_id], filter_string=f"tags.`{TAG_STAGE_KEY}` = '{manifest['key']}' and "
                               f"tags.`{schema.TAG_ROLE}` = '{ROLE_STAGE}' and attributes.status = 'FINISHED'", max_results=1)
    return found[0].info.run_id if found else None


def _unfinished_stage_run(client, parent_run_id: str, key: str) -> str | None:
    """This sweep's earlier run of a stage that never finished (a resumed sweep computes it again)."""
    experiment_id = client.get_run(parent_run_id).info.experiment_id
    found = client.search_runs([experiment_id], filter_string=f"tags.`{TAG_STAGE_KEY}` = '{key}' and "
                               f"tags.`{schema.TAG_PARENT}` = '{parent_run_id}' and attributes.status != 'FINISHED'",
                               max_results=1)
    return found[0].info.run_id if found else None


def reused_stage_run(client, plan, spec: dict, manifest: dict) -> str:
    """The stage's run in this store; a stage computed for another store is recorded here once,
    as a copy (tag `embsweep.stage_copy_of`), so `upstream_run_id` always names a run of this store."""
    experiment_id = client.get_run(plan.parent_run_id).info.experiment_id
    found = _existing_stage_run(client, experiment_id, manifest, plan.mlflow_uri)
    if found:
        return found
    run_id = create_stage_run(client, plan.parent_run_id, spec, plan.static_params)
    result = manifest.get("result") or {}
    client.set_tag(run_id, TAG_STAGE_COPY_OF, f"{result.get('mlflow_uri')}#{result.get('mlflow_run_id')}")
    log_stage_result(client, run_id, result)
    client.set_terminated(run_id, status="FINISHED")
    return run_id


# --- the driver hook --------------------------------------------------------------------------
def _stage_resources(plan) -> tuple[float, float]:
    import ray

    a = plan.args
    cpus = a.get("stage_cpus") or float(plan.resources["cpu"])
    gpus = a.get("stage_gpus")
    if gpus is None:
        trial_gpu = plan.resources["gpu"]
        uses_gpus = trial_gpu not in (None, 0, 0.0, "0")
        gpus = 1.0 if uses_gpus and ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
    return float(cpus), float(gpus)


def prepare_stages(plan, specs: dict) -> None:
    """Compute missing stages (Ray tasks), record every stage's MLflow run, fill `upstream_run_id`."""
    import ray

    from trainables.stages import StageStore
    from trainables.upstream import execute

    client = _client(plan.mlflow_uri)
    run_ids, failures, missing = {}, {}, []
    stores = {}
    for key, spec in specs.items():
        store = stores.setdefault(spec["root"], StageStore(spec["root"]))
        manifest = store.read_manifest(key)
        if manifest is not None:
            run_ids[key] = reused_stage_run(client, plan, spec, manifest)
        else:
            missing.append(spec)
    kinds = sorted({s["kind"] for s in specs.values()})
    print(f"Stages ({', '.join(kinds)}): {len(specs)} needed, {len(specs) - len(missing)} reused, "
          f"{len(missing)} to compute; store {next(iter(stores))}" if stores else "Stages: none needed", flush=True)

    cpus, gpus = _stage_resources(plan)
    remote = ray.remote(execute).options(num_cpus=cpus, num_gpus=gpus, max_retries=0)
    limit = plan.args.get("max_concurrent") or len(missing) or 1
    own_runs, waiting, queue = {}, {}, list(missing)
    started = time.time()
    while queue or waiting:
        while queue and len(waiting) < limit:
            spec = queue.pop(0)
            own_runs[spec["key"]] = (_unfinished_stage_run(client, plan.parent_run_id, spec["key"])
                                     or create_stage_run(client, plan.parent_run_id, spec, plan.static_params))
            client.update_run(own_runs[spec["key"]], status="RUNNING")
            waiting[remote.remote(spec, own_runs[spec["key"]], plan.mlflow_uri)] = spec
        done, _ = ray.wait(list(waiting), num_returns=1)
        spec = waiting.pop(done[0])
        key, own = spec["key"], own_runs[spec["key"]]
        try:
            manifest = ray.get(done[0])
        except Exception as error:  # the stage failed: its trials are dropped
            failures[key] = f"{type(error).__name__}: {str(error).strip().splitlines()[-1][:300]}"
            client.set_tag(own, "error", failures[key][:5000])
            client.set_terminated(own, status="FAILED")
            print(f"  stage {spec['kind']} {spec['model']} {spec['config'].get('layer', '')} failed: {failures[key]}", file=sys.stderr, flush=True)
            continue
        result = manifest.get("result") or {}
        if result.get("mlflow_run_id") == own:
            log_stage_result(client, own, result)
            client.set_terminated(own, status="FINISHED")
            run_ids[key] = own
        else:  # another sweep computed it while we waited on the lock: use its run
            client.delete_run(own)
            run_ids[key] = reused_stage_run(client, plan, spec, manifest)
        print(f"  stage {spec['kind']} {Path(str(spec['model'])).name}"
              + (f" L{spec['config']['layer']}" if "layer" in spec["config"] else "")
              + f" ready ({result.get('seconds', 0):.1f} s)", flush=True)
    if missing:
        print(f"Stages computed in {time.time() - started:.1f} s", flush=True)

    kept = []
    for config in plan.configs:
        if config["stage_key"] in failures:
            plan.failed_stages.setdefault(config["stage_key"], failures[config["stage_key"]])
            continue
        config["upstream_run_id"] = run_ids[config["stage_key"]]
        kept.append(config)
    if failures:
        print(f"{len(failures)} stage(s) failed; {len(plan.configs) - len(kept)} trial(s) that need them are skipped.",
              file=sys.stderr, flush=True)
    plan.configs[:] = kept
    if not kept:
        client.set_terminated(plan.parent_run_id, status="FAILED")
        raise StageError("every upstream stage failed; no trial can run: " + "; ".join(sorted(set(failures.values())))[:2000])
