"""MLflow logging from the sweep driver: one parent run per sweep, one child run per trial
configuration, written by a Ray Tune callback (trials themselves never talk to MLflow, so
workers need no access to the store and a SQLite file has a single writer).

A child run is found by (parent run, `embsweep.config_hash`) before one is created, so a
retried, restored or resumed trial continues its own run; an epoch already logged is never
logged twice (each run's logged steps are read back once). Schema: trainables/schema.py.
"""
from __future__ import annotations

import math
import time

from ray import tune

from trainables import schema


def _client(tracking_uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def ensure_experiment(tracking_uri: str, name: str) -> str:
    client = _client(tracking_uri)
    experiment = client.get_experiment_by_name(name)
    return experiment.experiment_id if experiment else client.create_experiment(name)


def start_parent_run(tracking_uri: str, experiment: str, sweep_name: str, params: dict) -> str:
    client = _client(tracking_uri)
    experiment_id = ensure_experiment(tracking_uri, experiment)
    run = client.create_run(
        experiment_id, run_name=sweep_name,
        tags={schema.TAG_ROLE: "sweep", schema.TAG_SWEEP: sweep_name},
    )
    for key, value in params.items():
        client.log_param(run.info.run_id, key, _param_value(value))
    return run.info.run_id


def _param_value(value) -> str:
    text = str(value)
    return text if len(text) <= 6000 else text[:5997] + "..."


def trial_params(config: dict, static: dict) -> dict:
    """Params of a child run: the trial config (private `_` keys dropped) and sweep-wide facts."""
    params = {k: v for k, v in config.items() if not k.startswith("_")}
    params.update(static)
    params["config_hash"] = schema.config_hash(config)
    return params


class MlflowSweepCallback(tune.Callback):
    """Logs every trial of a sweep as a child run of `parent_run_id`."""

    def __init__(self, tracking_uri: str, parent_run_id: str, static_params: dict | None = None):
        self.tracking_uri = tracking_uri
        self.parent_run_id = parent_run_id
        self.static_params = dict(static_params or {})
        self._runs: dict[str, str] = {}
        self._logged_steps: dict[str, set] = {}
        self._client = None

    @property
    def client(self):
        if self._client is None:
            self._client = _client(self.tracking_uri)
        return self._client

    def __getstate__(self):  # Tune pickles callbacks into its experiment state
        state = dict(self.__dict__)
        state.update(_client=None, _runs={}, _logged_steps={})
        return state

    # --- run lookup -----------------------------------------------------------------------
    def run_for(self, config: dict) -> str:
        key = schema.config_hash(config)
        if key in self._runs:
            return self._runs[key]
        parent = self.client.get_run(self.parent_run_id)
        found = self.client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.`{schema.TAG_PARENT}` = '{self.parent_run_id}' and tags.`{schema.TAG_CONFIG_HASH}` = '{key}'",
            max_results=2,
        )
        if found:
            run_id = found[0].info.run_id
            history = self.client.get_metric_history(run_id, "dev_" + _primary(config))
            self._logged_steps[run_id] = {m.step for m in history}
        else:
            name = "-".join(str(config.get(k)) for k in ("model", "layer", "seed") if k in config)
            run = self.client.create_run(
                parent.info.experiment_id, run_name=f"{config.get('method', 'trial')}:{name}",
                tags={schema.TAG_PARENT: self.parent_run_id, schema.TAG_ROLE: "trial", schema.TAG_CONFIG_HASH: key},
            )
            run_id = run.info.run_id
            self._logged_steps[run_id] = set()
            from mlflow.entities import Param

            params = trial_params(config, self.static_params)
            self.client.log_batch(run_id, params=[Param(k, _param_value(v)) for k, v in params.items()])
        self._runs[key] = run_id
        return run_id

    # --- Tune hooks -----------------------------------------------------------------------
    def on_trial_start(self, iteration, trials, trial, **info):
        run_id = self.run_for(trial.config)
        self.client.update_run(run_id, status="RUNNING")

    def on_trial_result(self, iteration, trials, trial, result, **info):
        from mlflow.entities import Metric, Param

        run_id = self.run_for(trial.config)
        step = int(result["epoch"])
        if step in self._logged_steps[run_id]:
            return
        now = int(time.time() * 1000)
        metrics = [
            Metric(k, float(v), now, step) for k, v in result.items()
            if _is_metric(k, v)
        ]
        params, tags = [], []
        if not self._logged_steps[run_id]:
            from mlflow.entities import RunTag

            params = [Param("params_truncated", str(result["params_truncated"]))] if "params_truncated" in result else []
            tags = [RunTag("trial_id", trial.trial_id)] + [
                RunTag(k, str(result[k])) for k in ("node_id", "device", "gpu_ids") if k in result
            ]
        self.client.log_batch(run_id, metrics=metrics, params=params, tags=tags)
        self._logged_steps[run_id].add(step)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.client.set_terminated(self.run_for(trial.config), status="FINISHED")

    def on_trial_error(self, iteration, trials, trial, **info):
        self.client.set_terminated(self.run_for(trial.config), status="FAILED")


_EPOCH_KEYS = set(schema.EPOCH_METRICS) | set(schema.FINAL_METRICS)


def _is_metric(key: str, value) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    if isinstance(value, float) and math.isnan(value):
        return False
    return key in _EPOCH_KEYS or key.startswith(("dev_", "test_", "best_")) or key in ("best_epoch", "epoch")


def _primary(config: dict) -> str:
    return {"mrpc": "f1", "sick": "f1"}.get(config.get("task", "stsb"), "spearman")
