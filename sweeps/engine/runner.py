"""The entry of every sweep script: parse its flags, plan, run on Ray Tune, finish (`main`), logging to MLflow.

`plan_sweep(args, method)` (sweeps/engine/plan.py) does every check and the one-off work the trials
share, and raises `SweepInputError` before anything is computed. `run_sweep(plan)` starts Ray
(ray_start.py), starts or restores the Tune experiment with one MLflow parent run, packs trials on
GPUs by the method's cost model (resources.py), prints progress, and ends with a table built from
the method's metric contract; a sweep that cannot go on stops in one line (stops.py). Nothing here
knows a method's axes: it reads `MetricContract` and `TrialCost` (trainables/core/method.py). The
names scripts, tests and benchmarks import from here stay importable from here (`__all__`).
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from argparse import Namespace

from sweeps.engine import (
    actor_deaths,
    presets,
    ray_internals,
    reuse,
    reuse_links,
    seal,
    simulate,
    startup,
    state_saves,
    storage,
    store_load,
    torn_saves,
)
from sweeps.engine.cli import build_parser, given_flags
from sweeps.engine.plan import CheckedSweep, SweepPlan, check_sweep, git_commit, package_versions, plan_sweep
from sweeps.engine.ray_start import QUIET_ENV, quiet
from sweeps.engine.ray_start import credentials_stay_on_their_nodes as _credentials_stay_on_their_nodes
from sweeps.engine.ray_start import init_ray as _init_ray
from sweeps.engine.resources import TrialResources, resolve_resources
from sweeps.engine.resources import check_cluster_resources as _check_resources
from sweeps.engine.resume import RESUME_KEEPS
from sweeps.engine.stops import (
    absent_paths,
    no_space,
    remove_new,
    stopped_for_space,
    stopped_for_storage,
    storage_fault,
)
from sweeps.engine.stops import fail_open_runs as _fail_open_runs
from trainables.core.errors import SweepInputError
from trainables.core.method import MetricContract
from trainables.core.schema import config_hash
from trainables.methods import get_method
from trainables.training import retention

# the names the scripts, tests and benchmarks import from here, whichever module of the engine holds them
__all__ = [
    "QUIET_ENV", "RESUME_KEEPS", "CheckedSweep", "SweepPlan", "TrialResources", "begin", "check_sweep",
    "failed_trials", "git_commit", "main", "no_space", "package_versions", "parser_for", "plan_sweep", "quiet",
    "resolve_resources", "run_sweep", "wrapped_trainable",
]  # fmt: skip


def _tuner(plan: SweepPlan, trainable, resources: "TrialResources"):
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from sweeps.engine.checkpoint_keeping import KeepLatest
    from sweeps.engine.progress import ProgressLine, planned_trials
    from sweeps.engine.store_guard import StoreGuard
    from sweeps.engine.tracking import MlflowSweepCallback

    args, contract = plan.args, plan.contract
    estimates = {config_hash(c): resources.seconds(c) for c in plan.configs}
    keep = retention.checkpoints_to_keep(args["keep_checkpoints"])
    run_config = tune.RunConfig(
        name=plan.name,
        storage_path=plan.storage_path,
        verbose=0,
        callbacks=[
            MlflowSweepCallback(
                plan.mlflow_uri,
                plan.parent_run_id,
                plan.static_params,
                sweep_dir=plan.sweep_dir,
                contract=contract,
                trial_records=reuse.records(plan),
            ),
            StoreGuard(plan.sweep_dir),
            ProgressLine(contract, estimates=estimates, total=planned_trials(args, len(plan.configs))),
            *([KeepLatest()] if keep == 1 else []),  # not Tune's num_to_keep: checkpoint_keeping.py says why
        ],
        failure_config=tune.FailureConfig(max_failures=args["max_failures"]),
        checkpoint_config=tune.CheckpointConfig(
            num_to_keep=None,  # every checkpoint, or KeepLatest deletes the older ones
            checkpoint_frequency=1,
            checkpoint_at_end=True,
        ),
    )
    if args["search"] == "pareto":
        from sweeps.engine import pareto_asha

        return pareto_asha.tuner(plan, trainable, run_config)
    if args["search"] == "optuna":
        from ray.tune.schedulers import ASHAScheduler
        from ray.tune.search import ConcurrencyLimiter
        from ray.tune.search.optuna import OptunaSearch

        space = plan.method_cls.search_space(Namespace(**args), plan.configs[0])
        tune_config = tune.TuneConfig(
            metric=contract.epoch,
            mode=contract.mode,
            num_samples=args["num_samples"],
            reuse_actors=not args.get("no_reuse_actors"),
            search_alg=ConcurrencyLimiter(
                OptunaSearch(seed=plan.configs[0].get(contract.seed or "", 0)),
                max_concurrent=args["max_concurrent"] or 2,
            ),
            scheduler=ASHAScheduler(max_t=max(1, int(args.get("epochs") or 1)), grace_period=1),
        )
        return tune.Tuner(trainable, param_space=space, tune_config=tune_config, run_config=run_config)
    placeholders = _placeholders(plan.configs)
    costliest_first = sorted(
        plan.configs, key=lambda c: -estimates[config_hash(c)]
    )  # no long trial left alone at the end
    if args.get("seeds_by_need"):
        from sweeps.engine import seed_search

        return seed_search.tuner(plan, trainable, run_config, costliest_first, placeholders)
    tune_config = tune.TuneConfig(
        search_alg=BasicVariantGenerator(
            points_to_evaluate=costliest_first, max_concurrent=args["max_concurrent"] or 0
        ),
        num_samples=len(plan.configs),
        reuse_actors=not args.get("no_reuse_actors"),
    )
    return tune.Tuner(trainable, param_space=placeholders, tune_config=tune_config, run_config=run_config)


def _placeholders(configs: list[dict]) -> dict:
    """The param space the trial configs fill in (Ray resolves a preset point path by path, lists
    element by element): None per key, a list of Nones for a list value (e.g. several stage keys),
    which must then have one length in every config."""
    out: dict = {}
    for config in configs:
        for key, value in config.items():
            shape = [None] * len(value) if isinstance(value, (list, tuple)) else None
            if key in out and out[key] != shape:
                raise ValueError(
                    f"config key {key!r} is a list in some trials and not in others, or of different lengths"
                )
            out[key] = shape
    return out


def wrapped_trainable(plan: SweepPlan, resources: TrialResources):
    from ray import tune

    if plan.args.get("simulate"):
        from sweeps.engine.simulated_trial import SimulatedTrainable

        simulated = tune.with_parameters(SimulatedTrainable, simulation=simulate.simulation(plan, resources))
        return tune.with_resources(simulated, simulate.Shares.of(resources, plan.costs))
    cls = plan.method_cls.trainable_class()
    return tune.with_resources(tune.with_parameters(cls, data=plan.data), resources)


def begin(plan: SweepPlan) -> None:
    """Start a new sweep: claim its name, create its MLflow parent run, and write its sealed sweep.json
    (what --resume reads back)."""
    from sweeps.engine.tracking import start_parent_run

    storage.claim(plan.sweep_dir, plan.name)
    plan.parent_run_id = start_parent_run(
        plan.mlflow_uri,
        plan.experiment,
        plan.name,
        {**plan.static_params, "trials": len(plan.configs), "method": plan.method_label},
    )
    seal.record_sweep_file(
        plan.sweep_dir,
        {
            "name": plan.name,
            "script": plan.prog,
            "method": plan.method_label,
            "method_class": plan.method,
            "parent_run_id": plan.parent_run_id,
            "mlflow_uri": plan.mlflow_uri,
            "experiment": plan.experiment,
            "created": time.strftime("%Y-%m-%d %H:%M:%S"),
            "data_checksums": plan.args.get("data_checksums"),
            "args": {k: v for k, v in plan.args.items() if k != "data_checksums"},
        },
    )


def run_sweep(plan: SweepPlan):
    """Run (or resume) the sweep; return Ray Tune's ResultGrid (None when every trial was reused: no Ray)."""
    from ray import tune

    if not plan.configs and (plan.reused or plan.waiting) and not plan.restore_tune:
        if plan.parent_run_id is None:
            begin(plan)
        reuse_links.link(plan)
        _finish(plan, None)
        return None
    startup.ray_and_store(plan, lambda: (_init_ray(plan), _check_resources(plan)))
    _credentials_stay_on_their_nodes()
    if plan.parent_run_id is None:
        begin(plan)
    reuse_links.link(plan)
    if plan.stages:
        from sweeps.engine.stages_plan import prepare_stages

        prepare_stages(plan, plan.stages)
    resources = resolve_resources(plan)
    print(resources.describe(plan), flush=True)
    store_load.warn_if_outpaced(plan, resources)
    trainable = wrapped_trainable(plan, resources)
    if plan.restore_tune:
        torn_saves.repair(plan.sweep_dir)  # the searcher saved with the trial list Tune restores
        seal.verify(plan.sweep_dir)  # again: the folder may have changed while stages ran; the repair's files too
        tuner = tune.Tuner.restore(plan.sweep_dir, trainable=trainable, resume_unfinished=True, resume_errored=True)
    else:
        tuner = _tuner(plan, trainable, resources)
        seal.record(plan.sweep_dir, ["tuner.pkl"])  # written by the Tuner just now
    startup.mark("fit")
    from sweeps.engine.checkpoint_keeping import Deferring

    hooks = seal.SealingSaves(plan.sweep_dir), torn_saves.PairedSaves(plan.sweep_dir), Deferring()
    with state_saves.hooked(*hooks), actor_deaths.handled():
        results = tuner.fit()
    startup.mark("fit_done")
    _finish(plan, results)
    startup.mark("finished")
    startup.write_timeline()
    return results


def failed_trials(results, contract: MetricContract) -> list[str]:
    """One line per trial that did not succeed, judged by the trial's own final state: an error,
    a `trial_failed` reason, or a last result that is not its last epoch (e.g. Ray could not
    even write the trial's error to storage)."""
    from sweeps.engine.tracking import run_name

    lines = []
    for result in results:
        metrics = result.metrics or {}
        if result.error is not None:
            reason = f"{type(result.error).__name__}: {str(result.error).strip().splitlines()[-1][:300]}"
        elif metrics.get("trial_failed"):
            reason = str(metrics["trial_failed"])
        elif not metrics.get("done"):
            reason = (
                "stopped before its last epoch (the sweep was interrupted, or an error could not be recorded: "
                "is the storage path writable?)"
            )
        else:
            continue
        lines.append(f"  {run_name(result.config or {}, contract)}: {reason}")
    return lines


def _finish(plan: SweepPlan, results) -> None:
    import pandas as pd

    from sweeps.engine.summary import summary_table
    from sweeps.engine.tracking import finish_parent_run, training_view

    failures = (failed_trials(results, plan.contract) if results is not None else []) + reuse.settle(plan)
    plan.failed_trials = failures
    spooled = finish_parent_run(
        plan.mlflow_uri, plan.parent_run_id, "FAILED" if failures else "FINISHED", plan.sweep_dir
    )
    frame = results.get_dataframe() if results is not None else pd.DataFrame()
    if "trial_failed" in frame:
        frame = frame[frame["trial_failed"].isna()]
    if plan.reused:
        frame = pd.concat([frame, reuse_links.summary_rows(plan)], ignore_index=True)
    print(summary_table(frame, plan.contract))
    ui_uri = plan.mlflow_uri
    print(f"\nResults: {plan.sweep_dir}")
    if ui_uri.startswith(("http://", "https://")):
        print(f"MLflow:  open {training_view(ui_uri, ui_uri, plan.parent_run_id)}")
    else:
        print(
            f"MLflow:  mlflow ui --backend-store-uri {shlex.quote(ui_uri)} --host 127.0.0.1 --port 5000   (then open "
            f"{training_view('http://127.0.0.1:5000', ui_uri, plan.parent_run_id)})"
        )
    print(
        f"Report:  python -m analysis report --mlflow-uri {shlex.quote(ui_uri)} --out "
        f"{shlex.quote(storage.join(plan.sweep_dir, 'report'))}"
    )
    preset = plan.method_cls.presets.get(plan.args.get("preset") or "")
    for command in presets.follow_up(preset, shlex.quote(str(plan.sweep_dir)), shlex.quote(ui_uri)):
        print(f"Then:    {command}")
    if failures:
        print(f"{len(failures)} trial(s) failed:", *failures, sep="\n")
        if plan.ray_log:
            print(f"Ray's own log of the sweep (tracebacks): {plan.ray_log}")
        print(
            f"--resume {shlex.quote(str(plan.sweep_dir))} reruns them from their last checkpoints: that helps when "
            "the cause has passed (a lost node, a full disk, an outage), not when a trial's settings or data are at "
            "fault (the same error each time)"
        )
    if spooled:
        print(spooled)


def parser_for(method: str, prog: str = "sweep", description: str = "", defaults: dict | None = None):
    """The full argument parser of a method's sweep script."""
    return build_parser(prog, description, get_method(method), defaults)


def main(argv=None, *, method: str, prog: str = "sweep", description: str = "", defaults: dict | None = None) -> int:
    """The whole of a sweep script: parse its flags, plan, run; exit status 2 on bad input, 1 when
    a trial or stage failed, else 0."""
    from sweeps.engine.stages_plan import StageError

    ray_internals.require_supported_versions()  # before Ray is imported, let alone started
    quiet()
    method_cls = get_method(method)
    parser = build_parser(prog, description, method_cls, defaults)
    plan = None
    new = []
    try:
        args = parser.parse_args(argv)
        given = given_flags(parser, argv)
        new = absent_paths(args)
        if getattr(args, "list_presets", False):
            print(presets.listing(method_cls, build_parser, args.data_dir))
            return 0
        args = presets.apply(parser, argv, args, method_cls, given)
        reuse.check_stores(args)
        if args.extend:
            from sweeps.engine.extend import extended_args

            args = extended_args(args, method_cls, parser, given)
        if args.dry_run:
            from sweeps.engine import dry_run

            checked = check_sweep(args, method_cls, prog, given)
            print("\n".join([dry_run.describe(checked), *reuse.dry_run_lines(checked)]))
            return 0
        plan = plan_sweep(args, method=method_cls, prog=prog, given=given)
        reuse.apply(plan)
        startup.mark("planned")
        run_sweep(plan)
    except SweepInputError as error:
        if plan is None or plan.parent_run_id is None:  # refused before the sweep started: it leaves nothing
            remove_new(new)
        print(f"error: {error}", file=sys.stderr)
        return 2
    except StageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except Exception as error:
        full = no_space(error)
        if full is None:
            fault = storage_fault(error)
            if fault is not None:
                print(f"error: {stopped_for_storage(plan, fault)}", file=sys.stderr)
                return 1
            if plan is not None and plan.parent_run_id is not None:
                _fail_open_runs(plan)  # a bug's traceback follows, but no run is left RUNNING
            raise
        if plan is None:  # while planning (e.g. the tokenised-data cache): nothing had started
            where = os.path.dirname(str(full.filename)) if full.filename else "the disk"
            print(f"error: no space left on the device holding {where}; free space there, run again", file=sys.stderr)
            return 1
        print(f"error: {stopped_for_space(plan, full)}", file=sys.stderr)
        return 1
    return 1 if plan.failed_trials or plan.failed_stages else 0
