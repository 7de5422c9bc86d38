"""Checking and planning a sweep before anything runs: `check_sweep` settles every check that reads but
writes nothing (a resumed sweep's folder and flags, the settings, the method's own check, the storage,
the name, the MLflow store, the Ray address) into a `CheckedSweep`; `plan_sweep` adds the method's plan
(models, data, tokenising, stage specs), the engine settings every trial config carries, the run params
of the parent run and the free-space check, into a `SweepPlan`. Both raise `SweepInputError` before
anything is computed or written."""

from __future__ import annotations

import os
import subprocess
from argparse import Namespace
from dataclasses import dataclass, field

from sweeps.engine import resume, seal, simulate, storage
from sweeps.engine.cli import TRIAL_SETTINGS, build_parser, check_config_bounds, check_name, check_numbers, default_name
from sweeps.engine.resources import check_free_space
from trainables.core import endpoints, object_storage
from trainables.core.errors import SweepInputError
from trainables.core.method import Method, MetricContract, PlanContext
from trainables.core.paths import PROJECT_ROOT
from trainables.core.setting_conditions import check_applies
from trainables.core.settings import resolve
from trainables.methods import get_method


@dataclass
class SweepPlan:
    name: str
    method: str  # the registered method that plans and runs the trials
    sweep_dir: str
    storage_path: str
    mlflow_uri: str
    experiment: str
    configs: list[dict]
    data: object
    resources: dict
    args: dict
    contract: MetricContract
    costs: dict = field(default_factory=dict)  # values of the method's cost_axes -> TrialCost
    static_params: dict = field(default_factory=dict)
    parent_run_id: str | None = None
    resuming: bool = False
    restore_tune: bool = False  # a resumed sweep whose Tune state exists continues it; otherwise Tune starts
    method_label: str = ""  # recorded on the parent run (e.g. "ws+tmft,dapt+tmft")
    stages: dict = field(default_factory=dict)  # upstream stage specs by key (sweeps/engine/stages_plan.py)
    failed_stages: dict = field(default_factory=dict)
    failed_trials: list = field(default_factory=list)
    reused: list = field(default_factory=list)  # trials linked from finished runs, not run (sweeps/engine/reuse.py)
    waiting: list = field(default_factory=list)  # trials another running sweep computes (sweeps/engine/trial_claims.py)
    method_cls: type[Method] | None = None  # the class registered as `method`, resolved once by plan_sweep
    prog: str = "sweep"  # the script that made the sweep (recorded in sweep.json)
    ray_log: str = ""  # where Ray's own log lines go (`ray_logs_to_file`)


def git_commit() -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT, capture_output=True, text=True
        ).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def package_versions() -> dict:
    from importlib.metadata import version

    return {f"version_{p}": version(p) for p in ("torch", "transformers", "ray", "mlflow")}


@dataclass
class CheckedSweep:
    """What every check before planning settled (`check_sweep`): the arguments the sweep runs with (a
    resumed sweep's own), where it lives and logs. The real plan and `--dry-run` both start here."""

    args: Namespace
    method_cls: type[Method]
    prog: str
    name: str
    sweep_dir: str
    storage_path: str
    mlflow_uri: str
    saved: dict | None = None
    default_models: list = field(default_factory=list)  # what --smoke-test replaces with its tiny model


def check_sweep(args: Namespace, method: str | type[Method], prog: str = "sweep", given: set | None = None):
    """Every check of a sweep before its method plans it, reading but writing nothing: the resume folder
    (its seal, its method, the flags it started with), the settings, the method's own check, the storage,
    the name, the MLflow store, the Ray address. `method`: a registered method's name or class (a sweep
    made by another method's script is refused on --resume, with the script to use). `given`: the flags on
    the command line (cli.given_flags)."""
    method_cls = method if isinstance(method, type) else None
    method = method_cls.name if method_cls else method
    saved = None
    if args.resume:
        sweep_dir, saved = resume.resolve_resume(args)
        seal.verify(sweep_dir)  # before Ray Tune unpickles anything there
        made_by = saved.get("method_class", method)
        if made_by != method:
            resume.refuse_other_method(sweep_dir, saved, made_by, prog)
    method_cls = method_cls or get_method(method)
    parser = build_parser("x", "", method_cls)  # the declared defaults, without a script's or a preset's
    defaults = vars(parser.parse_args([]))
    if saved is not None:
        simulate.check_resume(sweep_dir, saved, args)
        saved["args"] = {method_cls.renamed.get(key, key): value for key, value in saved["args"].items()}
        resume.refuse_changed_flags(args, defaults, saved["args"], parser.settings, given)
        kept = {k: getattr(args, k) for k in resume.RESUME_KEEPS}
        # the folder's own place, never sweep.json's: a copied or moved sweep resumes where it is
        where = {"storage_path": object_storage.parent(sweep_dir)}
        args = Namespace(**{**defaults, **saved["args"], **kept, **where})  # flags added since it started: defaults
        resolve(args, parser.settings)
        prog = saved.get("script") or prog
    # --smoke-test's values are already in `args`, under the flags given on the command line (presets.apply)
    if given is not None:  # a flag given without the setting it works under (e.g. --seed-ci-width alone)
        check_applies(args, parser.settings, given)
    check_numbers(args)
    method_cls.check(args)

    storage_path = storage.absolute(args.storage_path)
    storage.check_writable(storage_path)
    if args.name is not None and not saved:
        check_name(args.name)
    if saved:
        check_name(object_storage.basename(sweep_dir))
    name = object_storage.basename(sweep_dir) if saved else (args.name or default_name(prog))
    sweep_dir = sweep_dir if saved else storage.join(storage_path, name)
    if not saved and storage.read_json(storage.join(sweep_dir, storage.SWEEP_FILE)) is not None:
        raise SweepInputError(
            f"A sweep named {name!r} already exists at {sweep_dir}; continue it with --resume {sweep_dir} or pick "
            "another --name."
        )
    mlflow_uri = args.mlflow_uri
    if mlflow_uri is None:
        if storage.is_uri(storage_path):
            raise SweepInputError(
                "--storage-path is a URI: pass --mlflow-uri too (an MLflow server, or sqlite:////shared/path/mlflow.db)"
            )
        mlflow_uri = f"sqlite:///{os.path.join(storage_path, 'mlflow.db')}"
    mlflow_uri = endpoints.mlflow_store(mlflow_uri)
    if args.mlflow_uri:
        args.mlflow_uri = mlflow_uri  # never the credentials: they are written to sweep.json and the spool
    if saved and mlflow_uri != saved.get("mlflow_uri"):
        resume.check_parent_run(sweep_dir, mlflow_uri, saved["parent_run_id"], str(saved.get("mlflow_uri")))
    endpoints.check_ray_address(args.address)
    from sweeps.engine.ray_start import check_local_ray_auth

    check_local_ray_auth(args.address)
    if saved and args.search == "pareto":  # its rung records, read back, as strictly as sweep.json
        from sweeps.engine import pareto_asha

        epochs = max(1, int(getattr(args, "epochs", 1) or 1))
        pareto_asha.read_rungs(storage.join(sweep_dir, pareto_asha.RUNGS_FILE), args.pareto_eta, epochs)
    default_models = parser.get_default("models") or []
    return CheckedSweep(args, method_cls, prog, name, sweep_dir, storage_path, mlflow_uri, saved, default_models)


def plan_sweep(args: Namespace, method: str | type[Method], prog: str = "sweep", given: set | None = None) -> SweepPlan:
    """Validate everything (`check_sweep`) and prepare the shared data; raises SweepInputError on bad input."""
    checked = check_sweep(args, method, prog, given)
    args, method_cls, prog, saved = checked.args, checked.method_cls, checked.prog, checked.saved
    method, name, sweep_dir = method_cls.name, checked.name, checked.sweep_dir
    storage_path, mlflow_uri = checked.storage_path, checked.mlflow_uri

    if args.seeds_by_need:  # before the plan loads models and data
        from sweeps.engine import seed_search

        seed_search.check(args, method_cls.metrics(args))
    context = PlanContext(
        storage_path, mlflow_uri, smoke_test=bool(args.smoke_test), default_models=checked.default_models
    )
    planned = method_cls.plan(args, context)
    for config in planned.configs:  # the engine settings a trial reads (declared `trial=True` in cli.py)
        config.update({s.name: getattr(args, s.name) for s in TRIAL_SETTINGS})
    check_config_bounds(planned.configs)
    if saved and saved.get("data_checksums") not in (None, planned.checksums):
        raise SweepInputError(
            f"--resume: the data in {args.data_dir} changed since the sweep started (checksums differ); resume with "
            "the original data."
        )
    contract = method_cls.metrics(args)
    if args.simulate:
        simulate.check(method_cls, planned.configs, planned.costs)
    if args.search == "pareto":
        from sweeps.engine import pareto_asha

        pareto_asha.check(args, planned.configs, contract, method_cls)
    plan = SweepPlan(
        name=name,
        method=method,
        method_cls=method_cls,
        prog=prog,
        sweep_dir=sweep_dir,
        storage_path=storage_path,
        mlflow_uri=mlflow_uri,
        experiment=args.experiment or prog.replace("_", "-"),
        configs=planned.configs,
        data=planned.data,
        resources={"cpu": args.cpus_per_trial, "gpu": args.gpus_per_trial},
        args=vars(args),
        contract=contract,
        costs=planned.costs,
        parent_run_id=saved["parent_run_id"] if saved else None,
        resuming=bool(saved),
        restore_tune=bool(saved) and resume.tune_state_exists(sweep_dir),
        method_label=planned.method_label or method,
        stages=planned.stages,
    )
    plan.static_params = {
        "git_commit": git_commit(),
        "sweep": name,
        "search": args.search,
        **({"pareto_size": args.pareto_size} if args.search == "pareto" else {}),
        **(
            {
                "seeds_by_need": 1,
                "initial_seeds": args.initial_seeds,
                "seed_ci_width": args.seed_ci_width,
                "seed_spread": args.seed_spread,
            }
            if args.seeds_by_need
            else {}
        ),
        "data_dir": str(args.data_dir),
        **{f"data_sha_{k}": v for k, v in planned.checksums.items()},
        **package_versions(),
        **contract.params(),
        **planned.static_params,
        **({"preset": args.preset} if getattr(args, "preset", None) else {}),
        **({"simulated": "true"} if args.simulate else {}),
    }
    plan.args["data_checksums"] = planned.checksums
    check_free_space(plan)
    return plan
