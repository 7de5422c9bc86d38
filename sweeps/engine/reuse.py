"""Reuse: a finished trial is never computed twice.

Before a grid sweep schedules anything (`apply`), it computes every trial's key (sweeps/engine/trial_keys.py)
and looks up FINISHED trial runs with the same key in its MLflow store and in the stores named with
`--reuse-from` (MLflow's `search_runs`). A run found is reused only when:

- it is not deleted, and neither is the run it was itself reused from (a link is followed to the run
  that computed it);
- the key recomputed from that run's recorded settings (`trial_keys.key_of_run`) is the key it is tagged
  with and the key wanted: a key read from a store is never trusted;
- its checkpoint (tag `embsweep.checkpoint`) is still there.

Otherwise the trial is computed again, with one line saying why; and only once: a trial that another
sweep is computing right now (its key claimed, sweeps/engine/trial_claims.py) is not scheduled but linked
when that sweep has finished it (`settle`, after the sweep's own trials). The trials reused are taken out of the
plan (and the upstream stages only they needed); once the sweep's parent run exists, each gets a child run of
its own (sweeps/engine/reuse_links.py). `--recompute` runs every trial.
The report counts a reused trial once (analysis/loader.py drops a link whose computing run it also reads).
"""

from __future__ import annotations

import os
import time
from argparse import Namespace
from dataclasses import dataclass, field

from sweeps.engine import reuse_links, trial_keys
from trainables.core import object_storage, schema
from trainables.core.errors import SweepInputError

STORE_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}  # a store that may not answer
TAG_REUSED_STORE = reuse_links.TAG_REUSED_STORE
POLL_S = 2.0  # how often a sweep looks for the trials another sweep computes


@dataclass
class Reused:
    """One trial linked, not run: its config, key, and the run (in `store`) that computed it."""

    config: dict
    key: str
    record: dict
    store: str
    run: object  # mlflow.entities.Run

    @property
    def sweep(self) -> str:
        return self.run.data.params.get("sweep", "?")


@dataclass
class Waiting:
    """A trial another sweep is computing: linked once it has finished (`settle`)."""

    config: dict
    key: str
    record: dict
    sweep: str


@dataclass
class Decision:
    """What `decide` found for a plan's configs: the ones reused, the ones to run, and the lines that say
    why a trial found in a store is computed again."""

    reused: list[Reused] = field(default_factory=list)
    run: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    run_keys: list[tuple[str, dict]] = field(default_factory=list)  # (key, record) of each of `run`


def _client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _sqlite_missing(uri: str) -> bool:
    return uri.startswith("sqlite:///") and not os.path.isfile(uri[len("sqlite:///") :])


def check_store(uri: str, flag: str = "--reuse-from") -> None:
    """A store named with --reuse-from answers (SweepInputError naming it otherwise), before anything starts."""
    if _sqlite_missing(uri):
        raise SweepInputError(f"{flag} {uri}: no MLflow database there; name the store of the sweeps to reuse")
    saved = {k: os.environ.get(k) for k in STORE_ENV}
    os.environ.update(STORE_ENV)
    try:
        _client(uri).search_experiments(max_results=1)
    except Exception as error:
        text = " ".join(str(error).split())[:200]
        raise SweepInputError(f"{flag} {uri}: the MLflow store does not answer ({text}); start it or drop the flag")
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _paged(search, **kwargs) -> list:
    items, token = [], None
    while True:
        page = search(max_results=1000, page_token=token, **kwargs)
        items.extend(page)
        token = page.token
        if not token:
            return items


def keyed_runs(uri: str, keys: set) -> dict[str, list]:
    """{key: FINISHED trial runs of the store tagged with it (deleted ones too, to say so)}; a local
    SQLite store that does not exist yet holds none (and is not created)."""
    from mlflow.entities import ViewType

    if _sqlite_missing(uri) or not keys:
        return {}
    client = _client(uri)
    experiments = [e.experiment_id for e in _paged(client.search_experiments, view_type=ViewType.ALL)]
    found: dict[str, list] = {}
    for start in range(0, len(experiments), 100):  # search_runs takes at most 100 experiments
        runs = _paged(
            client.search_runs,
            experiment_ids=experiments[start : start + 100],
            filter_string=(  # MLflow's search takes no list of tag values: every keyed run, picked here
                f"tags.`{schema.TAG_ROLE}` = 'trial' and attributes.status = 'FINISHED' "
                f"and tags.`{schema.TAG_TRIAL_KEY}` LIKE '%'"
            ),
            run_view_type=ViewType.ALL,
        )
        for run in runs:
            key = run.data.tags.get(schema.TAG_TRIAL_KEY)
            if key in keys:
                found.setdefault(key, []).append(run)
    return found


def checkpoint_exists(location: str) -> bool:
    import pyarrow.fs

    try:
        filesystem, path = object_storage.filesystem(location)
        return filesystem.get_file_info(path).type != pyarrow.fs.FileType.NotFound
    except Exception:  # a store or a path that cannot be read: the trial is computed again
        return False


def _origin(store: str, run):
    """(the store, the run) that computed `run`: itself, or the run a link was reused from (in the store the
    link names); the run None when it is gone."""
    source = run.data.tags.get(schema.TAG_REUSED_FROM)
    if not source:
        return store, run
    where = run.data.tags.get(TAG_REUSED_STORE) or store
    try:
        return where, _client(where).get_run(source)
    except Exception:  # deleted for good (gc), or never in that store
        return where, None


def choose(key: str, candidates: list[tuple[str, object]], own_parent: str | None) -> tuple[object, str, str]:
    """(the run to reuse, its store, '') or (None, '', why the candidates cannot be reused: '' for none)."""
    why = ""
    computed_first = sorted(candidates, key=lambda c: (bool(c[1].data.tags.get(schema.TAG_REUSED_FROM)),))
    for store, run in computed_first:
        if own_parent and run.data.tags.get(schema.TAG_PARENT) == own_parent:
            continue
        store, origin = _origin(store, run)
        if origin is None or origin.info.lifecycle_stage == "deleted" or run.info.lifecycle_stage == "deleted":
            gone = origin if origin is not None and run.info.lifecycle_stage != "deleted" else None
            run_id = gone.info.run_id if gone else run.data.tags.get(schema.TAG_REUSED_FROM) or run.info.run_id
            sweep = (gone or run).data.tags.get(schema.TAG_REUSED_SWEEP) or (gone or run).data.params.get("sweep", "?")
            why = why or f"its run {run_id} (sweep {sweep}) was deleted"
            continue
        if trial_keys.key_of_run(origin) != key or trial_keys.recorded_key(origin) != key:
            why = why or f"the settings recorded on run {origin.info.run_id} do not give its key"
            continue
        checkpoint = origin.data.tags.get(schema.TAG_CHECKPOINT)
        if not checkpoint or not checkpoint_exists(checkpoint):
            why = why or f"the checkpoint of run {origin.info.run_id} is gone ({checkpoint or 'none recorded'})"
            continue
        return origin, store, ""
    return None, "", why


def decide(configs: list[dict], keys: list[tuple[str, dict]], stores: list[str], own_parent=None) -> Decision:
    """Which of `configs` (with their `keys`: (key, record) each) are reused from `stores`, in order."""
    from sweeps.engine.tracking import run_name

    wanted = {key for key, _ in keys}
    found: dict[str, list] = {}
    for store in stores:
        for key, runs in keyed_runs(store, wanted).items():
            found.setdefault(key, []).extend((store, run) for run in runs)
    decision = Decision()
    for config, (key, record) in zip(configs, keys):
        run, store, why = choose(key, found.get(key, []), own_parent)
        if run is not None:
            decision.reused.append(Reused(config, key, record, store, run))
            continue
        decision.run.append(config)
        decision.run_keys.append((key, record))
        if why:
            decision.notes.append(f"recomputing {run_name(config)} {_label(config)}: {why}")
    return decision


def _label(config: dict) -> str:
    return " ".join(f"{k}={config[k]}" for k in ("model", "layer", "seed") if k in config)


def stores_of(args: dict, mlflow_uri: str) -> list[str]:
    from trainables.core import endpoints

    return [mlflow_uri, *(endpoints.mlflow_store(uri, "--reuse-from") for uri in (args.get("reuse_from") or []))]


def applies(args: dict, restoring: bool) -> bool:
    """Reuse looks up the trials of a grid (unless --recompute) that Tune does not restore itself."""
    return args.get("search") == "grid" and not args.get("recompute") and not restoring


def apply(plan) -> Decision:
    """Take the reusable trials out of `plan` (and the upstream stages only they needed); keep them in
    `plan.reused` to link once the parent run exists. Prints one line per trial found but recomputed."""
    if not applies(plan.args, plan.restore_tune):
        return Decision(run=list(plan.configs))
    facts = trial_keys.facts_of(plan.method_cls, plan.args, plan.configs, plan.mlflow_uri)
    keys = [trial_keys.trial_key(c, facts) for c in plan.configs]
    decision = decide(plan.configs, keys, stores_of(plan.args, plan.mlflow_uri), own_parent=plan.parent_run_id)
    for note in decision.notes:
        print(note, flush=True)
    print(plan_line(decision.reused, len(plan.configs), plan.costs, plan.method_cls.cost_axes).strip(), flush=True)
    if plan.args.get("seeds_by_need"):  # its rounds read every config; the reused ones count as known values
        plan.reused = decision.reused
    else:
        plan.configs, plan.reused = _claimed(plan, decision), decision.reused
    needed = set()
    for config in plan.configs:
        stage = config.get("stage_key")
        needed.update(stage if isinstance(stage, (list, tuple)) else [stage] if stage else [])
    plan.stages = {key: spec for key, spec in plan.stages.items() if key in needed}
    return decision


def _claimed(plan, decision: Decision) -> list[dict]:
    """The trials of `decision.run` this sweep computes: those whose key it claimed; the others, claimed by a
    sweep that runs now, go to `plan.waiting` (sweeps/engine/trial_claims.py)."""
    from sweeps.engine import trial_claims

    if object_storage.is_uri(plan.storage_path) and object_storage.split(plan.storage_path)[0] != "s3":
        return decision.run  # conditional writes need a folder or S3
    mine = []
    for config, (key, record) in zip(decision.run, decision.run_keys):
        live = trial_claims.claim(plan.storage_path, key, plan.name)
        if live is None:
            mine.append(config)
        else:
            plan.waiting.append(Waiting(config, key, record, str(live.get("sweep", "?"))))
    if plan.waiting:
        sweeps = ", ".join(sorted({w.sweep for w in plan.waiting}))
        print(f"{len(plan.waiting)} trial(s) are being computed by sweep {sweeps}: linked once it finishes them")
    return mine


def settle(plan) -> list[str]:
    """Wait for the trials other sweeps were computing (`plan.waiting`) and link them; one line per trial
    whose sweep ended without finishing it (run the sweep again to compute it)."""
    from sweeps.engine import trial_claims

    failures, pending, released = [], list(plan.waiting), set()
    while pending:
        found = keyed_runs(plan.mlflow_uri, {w.key for w in pending})
        still = []
        for item in pending:
            run, store, _ = choose(item.key, [(plan.mlflow_uri, r) for r in found.get(item.key, [])], None)
            if run is not None:
                plan.reused.append(Reused(item.config, item.key, item.record, store, run))
            elif (held := trial_claims.still_held(plan.storage_path, item.key)) or item.key not in released:
                if not held:  # released just now: its run may have reached the store since the look-up
                    released.add(item.key)
                still.append(item)
            else:
                failures.append(
                    f"  {_label(item.config)}: sweep {item.sweep} claimed it and ended without finishing it; run "
                    "this sweep again to compute it"
                )
        pending = still
        if pending:
            time.sleep(POLL_S)
    plan.waiting = []
    reuse_links.link(plan)
    return failures


def gpu_hours(reused: list[Reused], costs: dict, cost_axes: tuple) -> float:
    """The GPU-hours the reused trials would have cost, by the plan's cost model."""
    seconds = 0.0
    for item in reused:
        cost = costs.get(tuple(item.config.get(axis) for axis in cost_axes))
        seconds += float(cost.seconds) if cost is not None and cost.gpu else 0.0
    return seconds / 3600


def plan_line(reused: list[Reused], total: int, costs: dict, cost_axes: tuple) -> str:
    """`reused: N of M trials (from sweeps a, b), saving H GPU-hours`."""
    if not reused:
        return f"  reused: 0 of {total} trials (none finished with the same key)"
    sweeps = sorted({item.sweep for item in reused})
    return (
        f"  reused: {len(reused)} of {total} trials (from sweep{'s' if len(sweeps) > 1 else ''} {', '.join(sweeps)}), "
        f"saving {gpu_hours(reused, costs, cost_axes):.3g} GPU-hours; {total - len(reused)} to run"
    )


def records(plan) -> dict:
    """{config hash: the params and tag that record its key} for the trials the sweep runs."""
    facts = trial_keys.facts_of(plan.method_cls, plan.args, plan.configs, plan.mlflow_uri)
    out = {}
    for config in plan.configs:
        key, record = trial_keys.trial_key(config, facts)
        out[schema.config_hash(config)] = {"params": record, "tags": {schema.TAG_TRIAL_KEY: key}}
    return out


def check_stores(args) -> None:
    """Every store named with --reuse-from answers (SweepInputError naming the first that does not)."""
    from trainables.core import endpoints

    for uri in args.reuse_from or []:
        check_store(endpoints.mlflow_store(uri, "--reuse-from"))


def dry_run_lines(checked) -> list[str]:
    """`--dry-run`'s reuse figures: the plan's configs made as the real run makes them (in a scratch
    folder for the caches and a smoke model not yet built: nothing written), their keys looked up."""
    import tempfile

    from sweeps.engine.cli import TRIAL_SETTINGS
    from trainables.core.method import PlanContext
    from trainables.encoders.tiny import smoke_models_dir

    args = Namespace(**vars(checked.args))
    if not applies(vars(args), checked.saved is not None):  # a resumed sweep's plan: its own trials left
        return ["  reused: none (--recompute runs every trial)"] if args.recompute else []
    stores = stores_of(vars(args), checked.mlflow_uri)
    if all(_sqlite_missing(store) for store in stores):
        return ["  reused: 0 trials (no finished trials to reuse: the MLflow store does not exist yet)"]
    with tempfile.TemporaryDirectory(prefix="embsweep-dry-run-") as scratch:
        built = (smoke_models_dir(checked.storage_path) / "tiny-bert" / "config.json").is_file()
        where = checked.storage_path if built or not args.smoke_test else scratch
        saved_cache = os.environ.get("EMBSWEEP_CACHE_DIR")
        os.environ["EMBSWEEP_CACHE_DIR"] = scratch
        try:
            context = PlanContext(
                where, checked.mlflow_uri, smoke_test=bool(args.smoke_test), default_models=checked.default_models
            )
            planned = checked.method_cls.plan(args, context)
        except Exception as error:  # e.g. a hub model not here: the plan above priced it without loading it
            text = " ".join(str(error).split())[:200]
            return [f"  reused: unknown (the trials' keys need the plan's models and data, not available here: {text})"]
        finally:
            if saved_cache is None:
                os.environ.pop("EMBSWEEP_CACHE_DIR", None)
            else:
                os.environ["EMBSWEEP_CACHE_DIR"] = saved_cache
        for config in planned.configs:
            config.update({s.name: getattr(args, s.name) for s in TRIAL_SETTINGS})
        values = {**vars(args), "data_checksums": planned.checksums}
        facts = trial_keys.facts_of(checked.method_cls, values, planned.configs, checked.mlflow_uri)
        keys = [trial_keys.trial_key(c, facts) for c in planned.configs]
        decision = decide(planned.configs, keys, stores)
    lines = [f"  {note}" for note in decision.notes]
    return [*lines, plan_line(decision.reused, len(planned.configs), planned.costs, checked.method_cls.cost_axes)]
