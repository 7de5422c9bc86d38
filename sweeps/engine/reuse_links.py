"""The child runs of reused trials: `link(plan)` gives each trial a sweep reuses (sweeps/engine/reuse.py) a
child run of the sweep's parent that records `embsweep.reused_from` (the run that computed it), its sweep
(`embsweep.reused_from_sweep`) and, for a run of another store (`--reuse-from`), that store; it carries the
computing run's params and metric histories, its key, and points to its checkpoint, FINISHED.
`summary_rows(plan)` gives them to the end-of-sweep table."""

from __future__ import annotations

from trainables.core import schema

TAG_REUSED_STORE = "embsweep.reused_from_store"  # on a link to a run of another store (--reuse-from)
_BATCH = 1000  # metrics per log_batch (MLflow's limit)


def link(plan) -> None:
    """Give each reused trial a child run of the sweep's parent: `embsweep.reused_from` (and its sweep),
    the computing run's params and metric histories, its checkpoint; FINISHED. A trial already linked
    (the sweep resumed) is left as it is."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    from sweeps.engine.tracking import run_name, trial_params

    if not plan.reused:
        return
    client = MlflowClient(tracking_uri=plan.mlflow_uri)
    experiment = client.get_run(plan.parent_run_id).info.experiment_id
    done = {
        run.data.tags.get(schema.TAG_TRIAL_KEY)
        for run in client.search_runs(
            [experiment], f"tags.`{schema.TAG_PARENT}` = '{plan.parent_run_id}'", max_results=50000
        )
    }
    for item in plan.reused:
        if item.key in done:
            continue
        origin, source = item.run, MlflowClient(tracking_uri=item.store)
        config = dict(item.config)
        if "upstream_run_id" in config:
            config["upstream_run_id"] = origin.data.params.get("upstream_run_id")
        params = {
            **trial_params(config, plan.static_params),
            **{k: v for k, v in origin.data.params.items() if k in schema.RESULT_PARAMS},
            **item.record,
        }
        kept = {
            k: v for k, v in origin.data.tags.items() if not k.startswith("mlflow.") and k != schema.TAG_CONFIG_HASH
        }
        tags = {
            **kept,
            schema.TAG_PARENT: plan.parent_run_id,
            schema.TAG_ROLE: "trial",
            schema.TAG_CONFIG_HASH: schema.config_hash(config),
            schema.TAG_TRIAL_KEY: item.key,
            schema.TAG_REUSED_FROM: origin.info.run_id,
            schema.TAG_REUSED_SWEEP: item.sweep,
            **({TAG_REUSED_STORE: item.store} if item.store != plan.mlflow_uri else {}),
        }
        run = client.create_run(experiment, run_name=run_name(config, plan.contract), tags=tags)
        metrics = [
            Metric(m.key, m.value, m.timestamp, m.step)
            for name in sorted(origin.data.metrics)
            for m in source.get_metric_history(origin.info.run_id, name)
        ]
        params_list = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for start in range(0, len(metrics), _BATCH):
            client.log_batch(run.info.run_id, metrics=metrics[start : start + _BATCH])
        for start in range(0, len(params_list), 100):  # MLflow's limit of params per batch
            client.log_batch(run.info.run_id, params=params_list[start : start + 100])
        client.set_terminated(run.info.run_id, "FINISHED")
    sweeps = sorted({item.sweep for item in plan.reused})
    client.log_batch(
        plan.parent_run_id,
        params=[Param("trials_reused", str(len(plan.reused))), Param("reused_from_sweeps", ",".join(sweeps)[:6000])],
        tags=[RunTag("embsweep.trials_reused", str(len(plan.reused)))],
    )


def summary_rows(plan):
    """The reused trials as rows of the end-of-sweep table (`config/<key>` and each metric's last value)."""
    import pandas as pd

    rows = [{**{f"config/{k}": v for k, v in item.config.items()}, **item.run.data.metrics} for item in plan.reused]
    return pd.DataFrame(rows)
