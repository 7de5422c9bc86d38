"""Upstream stages in the sweep driver: computed once before the trials, recorded in MLflow.

A method's plan may carry stage specs (`MethodPlan.stages`, keyed by stage key; see
trainables/stages/upstream.py for a spec and trainables/methods/tmft/improvements.py for a method that uses them)
and trials that name their stage by `stage_key` (one key, or a list of keys for a trial that
reads several stages, e.g. one per meta-embedding source). `prepare_stages(plan, specs)` runs in
the driver after the sweep's MLflow parent run exists and before any trial starts:
- a stage already in the store is reused (its MLflow run is found, or recorded again in a store
  that does not have it);
- every missing stage gets an MLflow run (method = the stage kind, tag `embsweep.role` = "stage",
  child of the sweep's parent run, param and tag `stage_key`; written through the sweep's
  spooling `MlflowWriter`, like the trials' runs) and is computed as a Ray task with
  the trial's CPUs and a whole GPU when the trials use GPUs (`--stage-cpus`, `--stage-gpus`), all
  missing stages at once as resources allow, each under the store's lock, or claim on an object
  store (a second sweep asking for the same stage at the same time waits for it and reuses it);
- the trials then get `upstream_run_id` = that run's id (a list of ids, in order, for a list of
  keys). A trial whose stage failed is dropped (and reported); the sweep exits non-zero.

Why in the driver rather than inside trials: a trial that waited for a stage would hold its CPU
or GPU share idle for the whole stage (hours for DAPT), and with every slot held by waiters the
stage itself could never be scheduled; stage runs are created by the driver like every other
MLflow write (sweeps/engine/tracking.py), so workers never talk to the store; and the trials'
`upstream_run_id` is known before they start, so it is part of their config and params.
The cost is a barrier: trials start when all stages are done.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from trainables.core import schema
from trainables.stages.progress import progress_line, read_progress

TAG_STAGE_KEY = "embsweep.stage_key"
TAG_STAGE_COPY_OF = "embsweep.stage_copy_of"
ROLE_STAGE = "stage"
PROGRESS_INTERVAL_S = float(os.environ.get("EMBSWEEP_PROGRESS_S", 15.0))  # a line per running stage this often


class StageError(RuntimeError):
    """Every trial of the sweep lost its upstream stage."""


# --- MLflow runs of stages (written by the driver) -------------------------------------------
def _client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def stage_params(spec: dict, static: dict) -> dict:
    """Params of a stage's run: the sweep-wide facts, the stage config (`stage_<key>`), what
    every stage records, and what its kind adds (trainables/stages/upstream.py `StageKind.params`)."""
    from trainables.stages.upstream import STAGES

    kind, config = STAGES.get(spec["kind"]), spec["config"]
    params = {k: v for k, v in static.items() if not k.startswith("data_sha_")}
    params.update({f"stage_{k}": v for k, v in config.items()})
    params.update(
        {
            "method": spec["kind"],
            "model": spec["model"],
            "task": kind.task,
            "stage_key": spec["key"],
            "model_identity": spec["model_identity"],
            "data_sha": spec["data_checksum"],
            "random_init": config.get("random_init", False),
        }
    )
    # the trial params its config holds (seed, epochs, lr, batch_size, ...): a stage's run reads like a trial's
    params.update({k: config[k] for k in schema.PARAMS if k in config and k not in params})
    params.update(kind.params(config))
    return params


def create_stage_run(writer, parent_run_id: str, sweep: str, spec: dict, static: dict) -> str | None:
    """Find or create this sweep's run of a stage (keyed by parent and stage key, so a resumed sweep
    continues its unfinished one); None while the store is unreachable (the write is spooled)."""
    from sweeps.engine.tracking import _param_value

    writer.submit(
        {
            "op": "run",
            "parent": parent_run_id,
            "key": spec["key"],
            "role": ROLE_STAGE,
            "name": stage_label(spec, ":"),
            "tags": {TAG_STAGE_KEY: spec["key"], schema.TAG_SWEEP: sweep},
            "params": {k: _param_value(v) for k, v in stage_params(spec, static).items()},
        }
    )
    return writer.run_id(parent_run_id, spec["key"])


def log_stage_result(writer, parent_run_id: str, key: str, result: dict, tags: dict | None = None) -> None:
    """Per-epoch history (step = epoch), final metrics, and what the stage reports about itself."""
    now = int(time.time() * 1000)
    history = result.get("history") or []
    metrics = [
        [k, float(v), now, int(row["epoch"])]
        for row in history
        for k, v in row.items()
        if k != "epoch" and isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    last = int(history[-1]["epoch"]) if history else 0
    metrics += [
        [k, float(v), now, last]
        for k, v in (result.get("final") or {}).items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    params = {
        k: str(result[k])
        for k in ("params_truncated", "sentences", "corpus", "head_source", "train_pairs", "device")
        if result.get(k) is not None
    }
    writer.submit(
        {"op": "log", "parent": parent_run_id, "key": key, "metrics": metrics, "params": params, "tags": tags or {}}
    )


def finish_stage_run(writer, parent_run_id: str, key: str, status: str) -> None:
    writer.submit(
        {"op": "status", "parent": parent_run_id, "key": key, "status": status, "time": int(time.time() * 1000)}
    )


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
    found = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{TAG_STAGE_KEY}` = '{manifest['key']}' and "
        f"tags.`{schema.TAG_ROLE}` = '{ROLE_STAGE}' and attributes.status = 'FINISHED'",
        max_results=1,
    )
    return found[0].info.run_id if found else None


def reused_stage_run(client, writer, plan, spec: dict, manifest: dict) -> str | None:
    """The stage's run in this store; a stage computed for another store is recorded here once,
    as a copy (tag `embsweep.stage_copy_of`), so `upstream_run_id` always names a run of this store."""
    experiment_id = client.get_run(plan.parent_run_id).info.experiment_id
    found = _existing_stage_run(client, experiment_id, manifest, plan.mlflow_uri)
    if found:
        run = client.get_run(found)
        if run.info.status == "RUNNING" and run.data.tags.get("mlflow.parentRunId") == plan.parent_run_id:
            # this sweep's stage finished after its driver was stopped: record it now (a resume)
            log_stage_result(writer, plan.parent_run_id, spec["key"], manifest.get("result") or {})
            finish_stage_run(writer, plan.parent_run_id, spec["key"], "FINISHED")
        return found
    result = manifest.get("result") or {}
    run_id = create_stage_run(writer, plan.parent_run_id, plan.name, spec, plan.static_params)
    log_stage_result(
        writer,
        plan.parent_run_id,
        spec["key"],
        result,
        tags={TAG_STAGE_COPY_OF: f"{result.get('mlflow_uri')}#{result.get('mlflow_run_id')}"},
    )
    finish_stage_run(writer, plan.parent_run_id, spec["key"], "FINISHED")
    return run_id


def stage_label(spec: dict, separator: str = " ") -> str:
    """e.g. `dapt bert-base-cased` or `ws all-MiniLM-L6-v2 L3` (the stage kind's own label)."""
    from trainables.stages.upstream import STAGES

    extra = STAGES.get(spec["kind"]).label(spec["config"])
    return f"{spec['kind']}{separator}{Path(str(spec['model'])).name}" + (f"{separator}{extra}" if extra else "")


# --- the driver hook --------------------------------------------------------------------------
def stage_keys(config: dict) -> list[str]:
    """The stage keys a trial config names: `stage_key` is one key, or a list of keys for a trial
    that reads several stages (its `upstream_run_id` is then the list of their runs, in order)."""
    keys = config["stage_key"]
    return [str(k) for k in keys] if isinstance(keys, (list, tuple)) else [str(keys)]


def _stage_resources(plan) -> tuple[float, float]:
    import ray

    a = plan.args
    cpus = a.get("stage_cpus") or float(plan.resources["cpu"])
    gpus = a.get("stage_gpus")
    if gpus is None:
        trial_gpu = plan.resources["gpu"]
        uses_gpus = trial_gpu not in (None, 0, 0.0, "0")
        # a cluster (--address) may start with no GPU node and add them for this demand (cluster.yaml's
        # GPU workers start at 0): as for the trials (runner.resolve_resources), its stages ask for a GPU
        scales = bool(a.get("address"))
        gpus = 1.0 if uses_gpus and (scales or ray.cluster_resources().get("GPU", 0) >= 1) else 0.0
    return float(cpus), float(gpus)


def execute_stage(spec: dict, run_id: str, mlflow_uri: str) -> dict:
    """`trainables.stages.upstream.execute` in a Ray worker, once the methods (which register the
    stage kinds they own) are imported there."""
    from trainables.methods import load
    from trainables.stages.upstream import execute

    load()

    manifest = execute(spec, run_id, mlflow_uri)
    return {**manifest, "ran_on": ran_on()}


def ran_on() -> dict:
    """The node and GPU ids a stage task runs on (recorded as its run's tags, as a trial's)."""
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "gpu_ids": ",".join(map(str, ray.get_gpu_ids()))}


def prepare_stages(plan, specs: dict) -> None:
    """Compute missing stages (Ray tasks), record every stage's MLflow run, fill `upstream_run_id`.
    A line per stage when it starts and ends, and one per running stage every PROGRESS_INTERVAL_S
    (its steps, read from the stage store: trainables/stages/progress.py)."""
    import ray

    from sweeps.engine.tracking import MlflowWriter, spool_path
    from trainables.stages.store import open_store

    client = _client(plan.mlflow_uri)
    writer = MlflowWriter(plan.mlflow_uri, spool_path(plan.sweep_dir, plan.parent_run_id))
    parent = plan.parent_run_id
    run_ids, failures, missing = {}, {}, []
    stores = {}
    for key, spec in specs.items():
        if spec["root"] not in stores:
            stores[spec["root"]] = open_store(spec["root"])
        manifest = stores[spec["root"]].read_manifest(key)
        if manifest is not None:
            run_ids[key] = reused_stage_run(client, writer, plan, spec, manifest)
        else:
            missing.append(spec)
    kinds = sorted({s["kind"] for s in specs.values()})
    print(
        f"Stages ({', '.join(kinds)}): {len(specs)} needed, {len(specs) - len(missing)} reused, "
        f"{len(missing)} to compute; store {next(iter(stores))}"
        if stores
        else "Stages: none needed",
        flush=True,
    )

    cpus, gpus = _stage_resources(plan)
    own_runs, waiting, queue, shown = {}, {}, list(missing), {}
    if plan.args.get("simulate"):
        from sweeps.engine.simulate import simulated_stage as task

        wait = plan.args.get("simulate_seconds") or 0.0
        queue = [{**spec, "simulate_seconds": wait} for spec in queue]
    else:
        task = execute_stage
    remote = ray.remote(task).options(num_cpus=cpus, num_gpus=gpus, max_retries=0)
    limit = plan.args.get("max_concurrent") or len(missing) or 1
    started = time.time()
    report_at = started + PROGRESS_INTERVAL_S
    while queue or waiting:
        while queue and len(waiting) < limit:
            spec = queue.pop(0)
            own_runs[spec["key"]] = create_stage_run(writer, parent, plan.name, spec, plan.static_params)
            writer.submit({"op": "status", "parent": parent, "key": spec["key"], "status": "RUNNING"})
            waiting[remote.remote(spec, own_runs[spec["key"]], plan.mlflow_uri)] = spec
            print(progress_line(stage_label(spec), None), flush=True)
        done, _ = ray.wait(list(waiting), num_returns=1, timeout=max(0.0, report_at - time.time()))
        if time.time() >= report_at:  # on time even while other stages keep finishing
            for ref, running in waiting.items():
                record = read_progress(running)
                if ref not in done and record != shown.get(ref):  # nothing new: no line
                    print(progress_line(stage_label(running), record), flush=True)
                    shown[ref] = record
            report_at = time.time() + PROGRESS_INTERVAL_S
        if not done:
            continue
        spec = waiting.pop(done[0])
        key, own = spec["key"], own_runs[spec["key"]]
        try:
            manifest = ray.get(done[0])
        except Exception as error:  # the stage failed: its trials are dropped
            failures[key] = f"{type(error).__name__}: {str(error).strip().splitlines()[-1][:300]}"
            writer.submit({"op": "log", "parent": parent, "key": key, "tags": {"error": failures[key][:5000]}})
            finish_stage_run(writer, parent, key, "FAILED")
            print(f"  stage {stage_label(spec)} failed: {failures[key]}", file=sys.stderr, flush=True)
            continue
        result = manifest.get("result") or {}
        computer = result.get("mlflow_run_id")
        if computer and computer != own and result.get("mlflow_uri") == plan.mlflow_uri:
            # another sweep of this store computed it while this one waited on the lock: its run is the one
            writer.submit({"op": "delete", "parent": parent, "key": key})
            run_ids[key] = computer
            print(f"  stage {stage_label(spec)} ready (computed by another sweep: run {computer})", flush=True)
            continue
        copy = {} if computer == own else {TAG_STAGE_COPY_OF: f"{result.get('mlflow_uri')}#{computer}"}
        copy.update(manifest.get("ran_on") or {})
        if manifest.get("simulated"):
            copy[schema.TAG_SIMULATED] = "true"
        log_stage_result(writer, parent, key, result, tags=copy)
        finish_stage_run(writer, parent, key, "FINISHED")
        run_ids[key] = own
        print(f"  stage {stage_label(spec)} ready ({result.get('seconds', 0):.1f} s)", flush=True)
    if missing:
        print(f"Stages computed in {time.time() - started:.1f} s", flush=True)

    _start_trials_from(plan, run_ids, failures, writer)


def _start_trials_from(plan, run_ids: dict, failures: dict, writer) -> None:
    """Point each trial at its stages' MLflow runs (`upstream_run_id`); drop the trials of a failed stage
    (named in `plan.failed_stages`); StageError when no trial is left."""
    parent = plan.parent_run_id
    kept = []
    for config in plan.configs:
        if "stage_key" not in config:  # a trial that starts from no stage (e.g. --improvement none beside others)
            kept.append(config)
            continue
        keys = stage_keys(config)
        failed = [key for key in keys if key in failures]
        if failed:
            plan.failed_stages.setdefault(failed[0], failures[failed[0]])
            continue
        ids = [run_ids[key] for key in keys]
        config["upstream_run_id"] = ids if isinstance(config["stage_key"], (list, tuple)) else ids[0]
        kept.append(config)
    if failures:
        print(
            f"{len(failures)} stage(s) failed; {len(plan.configs) - len(kept)} trial(s) that need them are skipped.",
            file=sys.stderr,
            flush=True,
        )
    plan.configs[:] = kept
    if not kept:
        writer.submit({"op": "parent_status", "parent": parent, "status": "FAILED", "time": int(time.time() * 1000)})
        raise StageError(
            "every upstream stage failed; no trial can run: " + "; ".join(sorted(set(failures.values())))[:2000]
        )
