"""MLflow logging from the sweep driver: one parent run per sweep, one child run per trial
configuration, written by a Ray Tune callback (trials themselves never talk to MLflow, so
workers need no access to the store and a SQLite file has a single writer).

A child run is found by (parent run, `embsweep.config_hash`) before one is created, so a
retried, restored or resumed trial continues its own run; a metric is never logged twice at the
same step (a run's logged steps are read back once). Schema: trainables/core/schema.py.

The writes themselves, their thread and their spool through outages: sweeps/engine/mlflow_writes.py
(its names stay importable from here).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from pathlib import Path

from ray import tune

from sweeps.engine.mlflow_writes import (  # noqa: F401  (importable from here, as before the split)
    HTTP_ENV_DEFAULTS,
    POSTGRES_ENV_DEFAULTS,
    SPOOL_FILE,
    SYNC_COMMAND,
    BackgroundWriter,
    MlflowWriter,
    _client,
    _param_value,
    _short,
    configure_http,
    is_http,
    is_postgres,
    is_transient,
    merge_logs,
    queued_path,
    read_spool,
    recover_queued,
    spool_path,
)
from trainables.core import schema


def ensure_experiment(tracking_uri: str, name: str) -> str:
    """The experiment's id, created if missing. A local SQLite store keeps its artifacts (the reports
    logged to a sweep's run) in `mlartifacts/` beside the database, not in `./mlruns` of whichever
    folder the sweep was started from; a server or a database store uses its own artifact root."""
    client = _client(tracking_uri)
    experiment = client.get_experiment_by_name(name)
    if experiment:
        for key, value in schema.EXPERIMENT_KIND_TAGS.items():
            if key not in experiment.tags:  # one made before the tag was set; a kind chosen in the UI stays
                client.set_experiment_tag(experiment.experiment_id, key, value)
        return experiment.experiment_id
    location = None
    if str(tracking_uri).startswith("sqlite:///"):
        location = (Path(str(tracking_uri)[len("sqlite:///") :]).parent / "mlartifacts").resolve().as_uri()
    return client.create_experiment(name, artifact_location=location, tags=schema.EXPERIMENT_KIND_TAGS)


def training_view(ui: str, tracking_uri: str, parent_run_id: str | None) -> str:
    """The UI address of the sweep's runs in MLflow 3's model-training view. MLflow 3.17's UI shows an
    experiment in GenAI or model-training mode by a switch of its own (GenAI unless the address says
    `workflowType=machine_learning`), whatever the experiment's kind tag; without the sweep's
    experiment (a store that does not answer) it is the experiment list in that view."""
    ui, view = ui.rstrip("/"), "workflowType=machine_learning"
    try:
        experiment = _client(tracking_uri).get_run(parent_run_id).info.experiment_id
    except Exception:  # only a link: the store's trouble is reported where it is written to
        return f"{ui}/#/experiments?{view}"
    return f"{ui}/#/experiments/{experiment}/runs?{view}"


@contextlib.contextmanager
def store_lock(tracking_uri: str):
    """Held while a sweep creates or upgrades a local SQLite store and its experiment, so that
    sweeps started together do not race in MLflow's schema migration (`<db>.lock`, flock); a fresh
    store is created whole, and a half-migrated one repaired or named (sweeps/engine/sqlite_store.py)."""
    if not str(tracking_uri).startswith("sqlite:///"):
        yield
        return
    import fcntl

    from sweeps.engine import sqlite_store

    database = Path(str(tracking_uri)[len("sqlite:///") :])
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{database}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            sqlite_store.prepare(database)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _open_store(tracking_uri: str, experiment: str, attempts: int = 3):
    """(client, experiment id), the store created or upgraded under `store_lock`. Another program
    that opens a fresh SQLite store at the same moment (an MLflow UI, a script) does not take the
    lock, so a failed creation is tried again once that one has finished."""
    for attempt in range(1, attempts + 1):
        try:
            with store_lock(tracking_uri):  # the first client of a fresh store creates its tables
                client = _client(tracking_uri)
                return client, ensure_experiment(tracking_uri, experiment)
        except Exception as error:
            if is_transient(error) or attempt == attempts or not str(tracking_uri).startswith("sqlite:"):
                raise
            time.sleep(2.0 * attempt)


def start_parent_run(tracking_uri: str, experiment: str, sweep_name: str, params: dict) -> str:
    """Create the sweep's parent run. An unreachable store stops the sweep before it starts."""
    configure_http(tracking_uri)
    try:
        client, experiment_id = _open_store(tracking_uri, experiment)
        tags = {schema.TAG_ROLE: "sweep", schema.TAG_SWEEP: sweep_name}
        if params.get("simulated") == "true":
            tags[schema.TAG_SIMULATED] = "true"
        run = client.create_run(experiment_id, run_name=sweep_name, tags=tags)
        from mlflow.entities import Param

        client.log_batch(run.info.run_id, params=[Param(k, _param_value(v)) for k, v in params.items()])
    except Exception as error:
        if not is_transient(error):
            raise
        from trainables.core.errors import SweepInputError

        hint = " (start one with: python -m sweeps.mlflow_server)" if is_http(tracking_uri) else ""
        raise SweepInputError(
            f"--mlflow-uri {tracking_uri}: the MLflow store is unreachable, so the sweep did not start{hint}: "
            f"{_short(error)}"
        ) from error
    return run.info.run_id


def trial_params(config: dict, static: dict) -> dict:
    """Params of a child run: the trial config (private `_` keys dropped) and sweep-wide facts."""
    params = {k: v for k, v in config.items() if not k.startswith("_")}
    params.update(static)
    params["config_hash"] = schema.config_hash(config)
    return params


def finish_parent_run(tracking_uri: str, parent_run_id: str, status: str, sweep_dir: str | None) -> str | None:
    """Mark the sweep's parent run finished (through the spool if need be) after one last try to
    send whatever is spooled. Returns a warning to print when writes are still spooled."""
    BackgroundWriter.close_all()  # the trials' writes first: the spool they may add to is read next
    recover_queued(spool_path(sweep_dir, parent_run_id))  # a killed driver's, after a --resume with no trial left
    writer = MlflowWriter(tracking_uri, spool_path(sweep_dir, parent_run_id))
    writer._warned = writer.pending() > 0
    writer.maybe_drain(force=True)
    writer.submit({"op": "parent_status", "parent": parent_run_id, "status": status, "time": int(time.time() * 1000)})
    left = writer.pending()
    if not left:
        return None
    why = f"the store refused one: {writer.refused}" if writer.refused else "the store is unreachable"
    return (
        f"WARNING: {left} MLflow write(s) could not be sent to {tracking_uri} ({why}); they are kept in "
        f"{writer.spool}.\n"
        f"Upload them when the store is reachable (safe to run more than once): {SYNC_COMMAND} {writer.spool}"
    )


# --- the Tune callback ----------------------------------------------------------------------
def run_name(config: dict, contract=None) -> str:
    """A child run's display name: the method and the contract's label of the config, e.g.
    `tmft electra-base-discriminator L6 s2` (params hold the full ids)."""
    method = config.get("method", "trial")
    if contract is None:
        return str(method)
    label = contract.label_of(config)
    return label if "method" in contract.axes else f"{method} {label}"


def checkpoint_location(checkpoint, sweep_dir: str | None = None) -> str:
    """Where a Tune checkpoint lives: a local path, or `<scheme>://path` on a remote filesystem, with
    the endpoint query of the sweep's storage URI (so a reader reaches the same S3-compatible store)."""
    from trainables.core.object_storage import with_query_of

    filesystem = getattr(checkpoint, "filesystem", None)
    scheme = getattr(filesystem, "type_name", "local") if filesystem is not None else "local"
    return str(checkpoint.path) if scheme == "local" else with_query_of(str(checkpoint.path), scheme, sweep_dir or "")


def best_digest(checkpoint) -> str | None:
    """The digest of the checkpoint's best-dev folder as its trial listed it (`best.files.json`), which
    `runs:/` readers check their copies against; None when the checkpoint lists none."""
    from trainables.core.verified_copies import listing_digest

    try:
        with checkpoint.filesystem.open_input_stream(f"{checkpoint.path}/{schema.BEST_FILES}") as stream:
            return listing_digest(json.loads(stream.read().decode())["files"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


class MlflowSweepCallback(tune.Callback):
    """Logs every trial of a sweep as a child run of `parent_run_id` (spooling in `sweep_dir`
    while the store is unreachable): params, per-step metrics, status, and the latest checkpoint
    (tag `embsweep.checkpoint`, which `runs:/<run id>` model references resolve through)."""

    def __init__(
        self,
        tracking_uri: str,
        parent_run_id: str,
        static_params: dict | None = None,
        sweep_dir: str | None = None,
        contract=None,
        trial_records: dict | None = None,
    ):
        self.tracking_uri = tracking_uri
        self.parent_run_id = parent_run_id
        self.static_params = dict(static_params or {})
        self.sweep_dir = sweep_dir
        self.contract = contract
        self.trial_records = dict(trial_records or {})  # config hash -> {"params", "tags"}: each trial's key
        self._writer = None
        self._seen: dict[str, set] = {}

    @property
    def writer(self) -> BackgroundWriter:
        if self._writer is None:
            self._writer = BackgroundWriter(
                MlflowWriter(self.tracking_uri, spool_path(self.sweep_dir, self.parent_run_id))
            )
        return self._writer

    def __getstate__(self):  # Tune pickles callbacks into its experiment state
        state = dict(self.__dict__)
        state.update(_writer=None, _seen={})
        return state

    def __setstate__(self, state):
        state.update(_writer=None, _seen={})
        state.setdefault("sweep_dir", None)
        state.setdefault("contract", None)
        state.setdefault("trial_records", {})
        self.__dict__.update(state)

    def _op(self, kind: str, config: dict, **fields) -> dict:
        return {"op": kind, "parent": self.parent_run_id, "key": schema.config_hash(config), **fields}

    def run_for(self, config: dict) -> None:
        """Make sure the trial's child run exists (or is spooled to be created)."""
        key = schema.config_hash(config)
        if key in self._seen:
            return
        record = self.trial_records.get(key, {})
        params = {
            k: _param_value(v)
            for k, v in {**trial_params(config, self.static_params), **record.get("params", {})}.items()
        }
        name = run_name(config, self.contract)
        self.writer.submit(self._op("run", config, name=name, params=params, tags=record.get("tags", {})))
        self._seen[key] = set()

    # --- Tune hooks -----------------------------------------------------------------------
    def on_trial_start(self, iteration, trials, trial, **info):
        self.run_for(trial.config)
        self.writer.submit(self._op("status", trial.config, status="RUNNING"))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.run_for(trial.config)
        seen = self._seen[schema.config_hash(trial.config)]
        step = int(result["epoch"])
        if result.get("trial_failed"):  # its last result: the reason, no metrics
            self.writer.submit(
                self._op("log", trial.config, tags={schema.TAG_FAILURE: str(result["trial_failed"])[:4000]})
            )
            return
        if step in seen:
            return
        now = int(time.time() * 1000)
        metrics = [[k, float(v), now, step] for k, v in result.items() if _is_metric(k, v)]
        params, tags = {}, self._placement_tags(trial.config, result, step)
        if not seen:
            params = {k: str(result[k]) for k in schema.RESULT_PARAMS if k in result}
            tags.update(
                {"trial_id": trial.trial_id, **({schema.TAG_SIMULATED: "true"} if result.get("simulated") else {})}
            )
        self.writer.submit(self._op("log", trial.config, metrics=metrics, params=params, tags=tags))
        seen.add(step)

    def _placement_tags(self, config: dict, result: dict, step: int) -> dict:
        """Where this epoch ran: the current `node_id`, `gpu_ids`, `device` tags, and the epoch's entry of the
        placement history (schema.placement_history). Written with every epoch, so an epoch run again elsewhere
        (a trial restored from an earlier checkpoint, by this driver or a resumed one) replaces its old entry."""
        placement = {k: str(result[k]) for k in schema.PLACEMENT_KEYS if k in result}
        if not placement:
            return {}
        return {**placement, schema.placement_tag(step): json.dumps(placement, sort_keys=True)}

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        self.run_for(trial.config)
        tags = {schema.TAG_CHECKPOINT: checkpoint_location(checkpoint, self.sweep_dir)}
        digest = best_digest(checkpoint)
        if digest:
            tags[schema.TAG_BEST_DIGEST] = digest
        self.writer.submit(self._op("log", trial.config, tags=tags))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.run_for(trial.config)
        status = "FAILED" if (trial.last_result or {}).get("trial_failed") else "FINISHED"
        self.writer.submit(self._op("status", trial.config, status=status, time=int(time.time() * 1000)))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.run_for(trial.config)
        self.writer.submit(self._op("status", trial.config, status="FAILED", time=int(time.time() * 1000)))

    def on_experiment_end(self, trials, **info):  # also after an error or Ctrl-C: nothing queued is lost
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()


def _is_metric(key: str, value) -> bool:
    """Every number a trial reports, but Tune's own bookkeeping and what is logged as a param."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    if isinstance(value, float) and math.isnan(value):
        return False
    return key not in schema.NOT_METRICS and key not in schema.RESULT_PARAMS
