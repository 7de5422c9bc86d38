"""Plan, run and resume a sweep of any registered method on Ray Tune, logging to MLflow.

`plan_sweep(args, method)` does every check (the engine's flags, then the method's) and the
one-off work the trials share (`Method.plan`: models, data, tokenising, stage specs), and raises
`SweepInputError` before anything is computed. `run_sweep(plan)` starts or restores the Tune
experiment with one MLflow parent run, packs trials on GPUs by the method's cost model, prints
progress, and ends with a table built from the method's metric contract. Nothing here knows a
method's axes: it reads `MetricContract` and `TrialCost` (trainables/core/method.py).
"""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import subprocess
import sys
import time
from argparse import Namespace
from dataclasses import dataclass, field
from pathlib import Path

from sweeps.engine import presets, seal, simulate, storage
from sweeps.engine.cli import build_parser, check_config_bounds, check_name, check_numbers, default_name, given_flags
from trainables.core import endpoints, object_storage
from trainables.core.errors import SweepInputError
from trainables.core.method import Method, MetricContract, PlanContext
from trainables.core.paths import PROJECT_ROOT
from trainables.core.schema import config_hash
from trainables.core.settings import resolve, shown
from trainables.encoders.cost import CUDA_ALLOCATOR_ENV
from trainables.methods import get_method
from trainables.training import retention

QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_AIR_NEW_OUTPUT": "0",  # with verbose=0: no Ray tables; sweeps/engine/progress.py prints progress
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
    "RAY_DEDUP_LOGS": "0",
    "PYTHONWARNINGS": "ignore",
    "MLFLOW_LOGGING_LEVEL": "WARNING",  # read when mlflow is imported: no "Creating initial MLflow database tables"
}
RESUME_KEEPS = ("address", "max_concurrent", "local_gpus", "resume", "force", "dry_run")
# Loggers whose routine lines are not for the person running a sweep: MLflow's INFO (database
# set-up), Ray's notice that token authentication is on (it stays on), Ray Tune's chatter.
QUIET_LOGGERS = {
    "mlflow": "WARNING",
    "ray": "WARNING",
    "ray.tune": "WARNING",
    "ray.train": "WARNING",
    "ray._private.authentication": "ERROR",
}


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
    method_cls: type[Method] | None = None  # the class registered as `method`, resolved once by plan_sweep
    prog: str = "sweep"  # the script that made the sweep (recorded in sweep.json)
    ray_log: str = ""  # where Ray's own log lines go (`_ray_logs_to_file`)


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


def _resolve_resume(args) -> tuple[str, dict]:
    """The sweep folder to resume and its sweep.json: `--resume latest` (the newest under
    --storage-path), a sweep folder, or a storage path (a folder or URI holding sweeps: its newest)."""
    given = args.storage_path if args.resume == "latest" else args.resume
    if storage.is_uri(given):
        object_storage.check_location(given, "--resume")
    path = storage.absolute(given)
    if args.resume == "latest" or storage.read_json(storage.join(path, storage.SWEEP_FILE)) is None:
        path = storage.latest_sweep(path) or (None if args.resume == "latest" else path)
    if path is None:
        raise SweepInputError(
            f"--resume: no sweep found under {args.storage_path}; pass the sweep's directory (it holds "
            f"{storage.SWEEP_FILE})."
        )
    saved = seal.read_sweep_file(path)  # refused unless this user's driver wrote it
    if saved is None:
        raise SweepInputError(
            f"--resume {path}: this path holds no sweep ({storage.SWEEP_FILE} is missing); pass the directory a "
            "sweep printed when it started."
        )
    return path, saved


def _scripts_running(method: str) -> list[str]:
    """The sweep scripts whose runs are of `method` (each script names its method once)."""
    import re

    return sorted(
        f"sweeps/{path.name}"
        for path in (PROJECT_ROOT / "sweeps").glob("*.py")
        if re.search(rf'method="{re.escape(method)}"', path.read_text())
    )


def _script_of(saved: dict, method: str) -> str | None:
    """The script that resumes a sweep of `method`: the one sweep.json records when it runs that method,
    else the one script that does (None where none does: the folder contradicts itself)."""
    scripts = _scripts_running(method) or sorted(
        {p.script for p in presets.all_presets().values() if p.method == method}
    )
    recorded = f"sweeps/{saved.get('script')}.py"
    if recorded in scripts:
        return recorded
    return scripts[0] if len(scripts) == 1 else None


def _refuse_other_method(sweep_dir: str, saved: dict, made_by: str, prog: str) -> None:
    script = _script_of(saved, made_by)
    if script is None or Path(script).stem == Path(prog).stem:  # never the command just refused
        raise SweepInputError(
            f"--resume {sweep_dir}: its {storage.SWEEP_FILE} records the script {saved.get('script')!r} and the "
            f"method {made_by!r}, which no sweep script runs together; the folder's record does not match the code "
            "that made it: resume it with the version of this project that made it, or start a new sweep"
        )
    raise SweepInputError(
        f"--resume {sweep_dir}: this sweep was made by {script} (method {made_by}), not {prog}; "
        f"resume it with: python {script} --resume {shlex.quote(sweep_dir)}"
    )


def _check_parent_run(sweep_dir: str, mlflow_uri: str, parent_run_id: str, recorded_uri: str) -> None:
    """A sweep folder copied or moved to another storage path logs to the MLflow store beside it: its
    parent run must be there (the store is never created here)."""
    path = mlflow_uri[len("sqlite:///") :] if mlflow_uri.startswith("sqlite:///") else None
    found = path is None or os.path.isfile(path)
    if found:
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException

        try:
            MlflowClient(tracking_uri=mlflow_uri).get_run(parent_run_id)
        except MlflowException:
            found = False
    if not found:
        raise SweepInputError(
            f"--resume {sweep_dir}: its parent run {parent_run_id} is not in {mlflow_uri}, the MLflow store beside "
            f"the folder (the sweep was copied or moved from the store {recorded_uri}); copy that store beside it "
            "as mlflow.db, or resume the folder where it was"
        )


def _tune_state_exists(sweep_dir: str) -> bool:
    """Whether Ray Tune wrote its experiment state in the sweep folder (not yet, if the sweep was
    stopped during its upstream stages, before its first trial started, or before Tune could save
    its first state: `tuner.pkl` alone is started afresh)."""
    from ray import tune

    return tune.Tuner.can_restore(sweep_dir) and any(
        seal.is_tune_file(n) and n.startswith("experiment_state-") for n in seal.top_files(sweep_dir)
    )


def _typed(setting, value):
    """A value a sweep recorded, typed by today's declaration (a sweep of before the declarations
    recorded texts); as recorded where there is no declaration or it refuses the value."""
    if setting is None:
        return value
    try:
        return setting.parse(value)
    except SweepInputError:
        return value


def _refuse_changed_flags(args: Namespace, defaults: dict, saved: dict, settings, given: set | None = None) -> None:
    """--resume continues a sweep with the flags it started with: a flag given now with another
    value is refused rather than silently ignored (`given`: the flags on the command line; a flag
    left unset is no difference)."""

    def same(a, b) -> bool:
        try:
            return a == b or str(a) == str(b) or float(a) == float(b)
        except (TypeError, ValueError):
            return False

    declared = {s.name: s for s in settings}
    saved = {key: _typed(declared.get(key), value) for key, value in saved.items()}

    given = {**vars(args), "mlflow_uri": args.mlflow_uri and endpoints.recorded_uri(args.mlflow_uri)}
    changed = [
        f"--{key.replace('_', '-')} {shown(value)} (the sweep has {shown(saved.get(key, defaults.get(key)))})"
        for key, value in given.items()
        if key not in (*RESUME_KEEPS, "storage_path")
        and key in defaults
        and (given is None or key in given)
        and not same(value, defaults[key])
        and not same(value, saved.get(key, defaults[key]))
    ]
    if changed:
        raise SweepInputError(
            "--resume continues a sweep with the flags it started with; these differ: "
            + "; ".join(changed)
            + ". Drop them, or start a new sweep under another --name."
        )


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
        sweep_dir, saved = _resolve_resume(args)
        seal.verify(sweep_dir)  # before Ray Tune unpickles anything there
        kept = {k: getattr(args, k) for k in RESUME_KEEPS}
        made_by = saved.get("method_class", method)
        if made_by != method:
            _refuse_other_method(sweep_dir, saved, made_by, prog)
    method_cls = method_cls or get_method(method)
    if saved is not None:
        simulate.check_resume(sweep_dir, saved, args)
        saved["args"] = {method_cls.renamed.get(key, key): value for key, value in saved["args"].items()}
        parser = build_parser("x", "", method_cls)
        defaults = vars(parser.parse_args([]))  # flags added since it started
        _refuse_changed_flags(args, defaults, saved["args"], parser.settings, given)
        # the folder's own place, never sweep.json's: a copied or moved sweep resumes where it is
        where = {"storage_path": object_storage.parent(sweep_dir)}
        args = Namespace(**{**defaults, **saved["args"], **kept, **where})
        resolve(args, parser.settings)
        prog = saved.get("script") or prog
    # --smoke-test's values are already in `args`, under the flags given on the command line (presets.apply)
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
        _check_parent_run(sweep_dir, mlflow_uri, saved["parent_run_id"], str(saved.get("mlflow_uri")))
    endpoints.check_ray_address(args.address)
    if saved and args.search == "pareto":  # its rung records, read back, as strictly as sweep.json
        from sweeps.engine import pareto_asha

        epochs = max(1, int(getattr(args, "epochs", 1) or 1))
        pareto_asha.read_rungs(storage.join(sweep_dir, pareto_asha.RUNGS_FILE), args.pareto_eta, epochs)
    return CheckedSweep(args, method_cls, prog, name, sweep_dir, storage_path, mlflow_uri, saved)


def plan_sweep(args: Namespace, method: str | type[Method], prog: str = "sweep", given: set | None = None) -> SweepPlan:
    """Validate everything (`check_sweep`) and prepare the shared data; raises SweepInputError on bad input."""
    checked = check_sweep(args, method, prog, given)
    args, method_cls, prog, saved = checked.args, checked.method_cls, checked.prog, checked.saved
    method, name, sweep_dir = method_cls.name, checked.name, checked.sweep_dir
    storage_path, mlflow_uri = checked.storage_path, checked.mlflow_uri

    if args.seeds_by_need:  # before the plan loads models and data
        from sweeps.engine import seed_search

        seed_search.check(args, method_cls.metrics(args))
    default_models = build_parser("x", "", method_cls).get_default("models") or []
    context = PlanContext(storage_path, mlflow_uri, smoke_test=bool(args.smoke_test), default_models=default_models)
    planned = method_cls.plan(args, context)
    for config in planned.configs:
        config["precision"] = args.precision
        config["keep_checkpoints"] = args.keep_checkpoints
        config["best_dtype"] = args.best_dtype
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
        restore_tune=bool(saved) and _tune_state_exists(sweep_dir),
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


def _free_bytes(path: str) -> int | None:
    """Free bytes on the file system of a local path (its nearest existing folder); None for a URI."""
    if storage.is_uri(path):
        return None
    folder = os.path.abspath(path)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    return shutil.disk_usage(folder).free


def check_free_space(plan: SweepPlan) -> None:
    """Refuse a sweep whose storage path has less room than the plan's disk figure: the checkpoints
    its trials keep and what one running trial adds (a resumed sweep: what one running trial adds).
    `--force` makes it a warning."""
    free = _free_bytes(plan.storage_path)
    if free is None or plan.args.get("simulate"):  # simulated trials keep a few bytes each
        return
    kept, running = TrialResources(1.0, 0.0, plan.costs, plan.method_cls.cost_axes).disk_bytes(plan)
    needed = running + (0.0 if plan.resuming else kept)
    if free >= needed:
        return
    what = (
        f"{free / 1e9:.2f} GB free at {plan.storage_path}, and the plan needs about {needed / 1e9:.2f} GB "
        f"({'' if plan.resuming else f'{kept / 1e9:.2f} GB of checkpoints kept and '}{running / 1e9:.2f} GB while a "
        "trial runs)"
    )
    if plan.args.get("force"):
        print(f"warning: {what}; starting anyway (--force)", file=sys.stderr)
        return
    raise SweepInputError(
        f"{what}; free space there, keep less (--keep-checkpoints none, --best-dtype float16), pick another "
        "--storage-path, or pass --force to start anyway"
    )


def quiet() -> None:
    """Keep the console for the sweep's own lines (plan, progress, table, where the results are)."""
    import logging

    os.environ.update(QUIET_ENV)
    for name, level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()


def _init_ray(plan: SweepPlan) -> None:
    import logging

    import ray

    quiet()
    if ray.is_initialized():
        return
    # Never MLflow credentials in the runtime env (Ray writes it to its logs) nor in the environment of
    # the Ray processes started here: trials and stages never talk to the store, the driver does.
    runtime_env = {"env_vars": {**QUIET_ENV, **CUDA_ALLOCATOR_ENV}}
    address = plan.args.get("address")
    if address:
        try:
            with endpoints.credentials_hidden():
                ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level=logging.WARNING)
        except ConnectionError as error:  # something answers there, but not a Ray head
            raise SweepInputError(
                f"--address {address}: no Ray cluster answers there ({str(error).strip()[:200]}); "
                "start the Ray head there (ray start --head, or ray up cluster.yaml) or fix the "
                "address"
            ) from None
    else:
        with endpoints.credentials_hidden():
            ray.init(
                address="local",
                num_gpus=plan.args.get("local_gpus"),
                include_dashboard=False,
                runtime_env=runtime_env,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
    plan.ray_log = _ray_logs_to_file()


RAY_LOGGERS = ("ray", "ray.tune", "ray.train", "ray.data")


def _ray_logs_to_file() -> str:
    """Ray's and Ray Tune's own log lines (a trial's traceback, warnings about syncing) go to a file in
    Ray's session folder, not the terminal: the sweep prints what failed in its own words (the failed
    trials and their reasons, a storage fault's one line) and names this file. Returns its path."""
    import logging
    import tempfile

    import ray

    try:
        folder = ray._private.worker._global_node.get_logs_dir_path()  # Ray has no public name for it
    except AttributeError:
        folder = tempfile.gettempdir()
    path = os.path.join(folder, f"embsweep-driver-{os.getpid()}.log")
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in RAY_LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if type(h) is logging.StreamHandler]:
            logger.removeHandler(old)
        if not any(getattr(h, "baseFilename", None) == handler.baseFilename for h in logger.handlers):
            logger.addHandler(handler)
        logger.propagate = False
    return path


CLOUD_CREDENTIAL_ENV = frozenset(
    {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN"}
)


def _credentials_stay_on_their_nodes() -> None:
    """Ray Tune copies the driver's AWS credentials into every trial actor's runtime environment
    (`ray.tune.execution.class_cache.ENV_VARS_TO_PROPAGATE`), which Ray's runtime_env_agent writes to its
    log on each node. Trials upload their checkpoints with the credentials of the node they run on (its
    instance role or environment), so the driver's are not copied."""
    from ray.tune.execution import class_cache

    class_cache.ENV_VARS_TO_PROPAGATE = frozenset(class_cache.ENV_VARS_TO_PROPAGATE) - CLOUD_CREDENTIAL_ENV


def _check_resources(plan: SweepPlan) -> None:
    import ray

    total = ray.cluster_resources()
    if (
        plan.resources["gpu"] != "auto"
        and plan.resources["gpu"] > 0
        and total.get("GPU", 0) == 0
        and not plan.args.get("address")
    ):
        raise SweepInputError(
            f"--gpus-per-trial {plan.resources['gpu']} asks for GPUs but this Ray has none; use --gpus-per-trial 0 "
            "(or --local-gpus N to test packing)."
        )
    if plan.resources["cpu"] > total.get("CPU", 0) and not plan.args.get("address"):
        raise SweepInputError(
            f"--cpus-per-trial {plan.resources['cpu']} is more than this Ray's {total.get('CPU', 0):g} CPUs."
        )


def _tuner(plan: SweepPlan, trainable, resources: "TrialResources"):
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from sweeps.engine.progress import ProgressLine
    from sweeps.engine.store_guard import StoreGuard
    from sweeps.engine.tracking import MlflowSweepCallback

    args, contract = plan.args, plan.contract
    estimates = {config_hash(c): resources.seconds(c) for c in plan.configs}
    run_config = tune.RunConfig(
        name=plan.name,
        storage_path=plan.storage_path,
        verbose=0,
        callbacks=[
            MlflowSweepCallback(
                plan.mlflow_uri, plan.parent_run_id, plan.static_params, sweep_dir=plan.sweep_dir, contract=contract
            ),
            StoreGuard(plan.sweep_dir),
            ProgressLine(
                contract,
                estimates=estimates,
                total=len(plan.configs) if args["search"] == "grid" else args["num_samples"],
            ),
        ],
        failure_config=tune.FailureConfig(max_failures=args["max_failures"]),
        checkpoint_config=tune.CheckpointConfig(
            num_to_keep=retention.checkpoints_to_keep(args["keep_checkpoints"]),
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


@dataclass
class TrialResources:
    """A picklable `resources` callable for tune.with_resources: CPU and GPU share per trial, from
    the method's cost model (`costs`: cost unit -> TrialCost; the unit is the values of `axes`)."""

    cpu: float
    fixed_gpu: float | None
    costs: dict
    axes: tuple
    gpu_memory_gb: float = 24.0
    max_trials_per_gpu: int = 4

    def unit(self, config: dict) -> tuple:
        return tuple(config.get(axis) for axis in self.axes)

    def gpu(self, config: dict) -> float:
        from sweeps.engine import packing

        cost = self.costs.get(self.unit(config))
        if cost is not None and not cost.gpu:
            return 0.0
        if self.fixed_gpu is not None:
            return self.fixed_gpu
        return (
            1.0
            if cost is None
            else packing.gpus_per_trial(cost.memory_bytes, self.gpu_memory_gb, self.max_trials_per_gpu)
        )

    def seconds(self, config: dict) -> float:
        cost = self.costs.get(self.unit(config))
        return 0.0 if cost is None else float(cost.seconds)

    def weight_bytes(self, config: dict) -> float:
        cost = self.costs.get(self.unit(config))
        return 0.0 if cost is None else float(cost.weight_bytes)

    def disk_bytes(self, plan: SweepPlan) -> tuple[float, float]:
        """(bytes the finished trials leave, bytes one running trial adds at most)."""
        keep = plan.args.get("keep_checkpoints", retention.DEFAULT)
        repeats = 1 if plan.args["search"] == "grid" else plan.args["num_samples"] / max(1, len(plan.configs))
        kept = repeats * sum(
            retention.kept_bytes(
                keep,
                self.weight_bytes(c),
                int(c.get("epochs", 1) or 1),
                plan.args.get("best_dtype", retention.DEFAULT_BEST_DTYPE),
            )
            for c in plan.configs
        )
        running = max((retention.running_bytes(self.weight_bytes(c)) for c in plan.configs), default=0.0)
        return kept, running

    def disk(self, plan: SweepPlan) -> str:
        """The plan's disk line: what the finished trials leave, and what each running trial adds."""
        keep = plan.args.get("keep_checkpoints", retention.DEFAULT)
        kept, running = self.disk_bytes(plan)
        return (
            f"  disk: about {kept / 1e9:.2f} GB of checkpoints kept (--keep-checkpoints {keep}, "
            f"--best-dtype {plan.args.get('best_dtype', retention.DEFAULT_BEST_DTYPE)}), "
            f"and up to {running / 1e9:.2f} GB more for each trial while it runs"
        )

    def __call__(self, config: dict):
        from ray.tune.execution.placement_groups import resource_dict_to_pg_factory

        return resource_dict_to_pg_factory({"cpu": self.cpu, "gpu": self.gpu(config)})

    def describe(self, plan: SweepPlan) -> str:
        trials = len(plan.configs) if plan.args["search"] == "grid" else plan.args["num_samples"]
        most = (
            " at most (--seeds-by-need runs seeds where the conclusion is open)"
            if plan.args.get("seeds_by_need")
            else ""
        )
        lines = [f"Sweep {plan.name}: {trials} trials{most}; state in {plan.sweep_dir}"]
        shares = [self.gpu(c) for c in plan.configs]
        if not any(shares):
            lines.append(f"  each trial: {self.cpu:g} CPU, no GPU")
            lines.append(self.disk(plan))
            return "\n".join(lines)
        counts = {}
        for share in shares:
            counts[share] = counts.get(share, 0) + 1
        lines.append(
            f"  each trial: {self.cpu:g} CPU; GPU packing: "
            + ", ".join(
                f"{count} trials at {share:g} GPU ({max(1, round(1 / share)) if share < 1 else 1} per GPU)"
                for share, count in sorted(counts.items())
            )
        )
        repeats = trials / max(1, len(plan.configs)) if plan.args["search"] != "grid" else 1
        hours = sum(self.gpu(c) * self.seconds(c) for c in plan.configs) * repeats / 3600
        tflops = plan.args.get("gpu_tflops")
        basis = f"--gpu-tflops {tflops:g}" if tflops else "an H100's measured throughput"
        lines.append(
            f"  estimated {hours:.2f} GPU-hours (the method's cost model, --precision "
            f"{plan.args.get('precision', 'auto')}, {basis})"
        )
        lines.append(self.disk(plan))
        return "\n".join(lines)


def _warn_sqlite_at_scale(plan: SweepPlan, resources: TrialResources) -> None:
    from sweeps.engine import simulate, store_load

    args = plan.args
    if args.get("simulate"):
        sim = simulate.simulation(plan, resources)
        seconds = [sim.wait(c) for c in plan.configs]
    else:
        seconds = [resources.seconds(c) for c in plan.configs if resources.seconds(c) > 0]
    at_once = min(len(plan.configs), args.get("max_concurrent") or len(plan.configs))
    if not args.get("address") or at_once < store_load.AT_SCALE:
        return
    warning = store_load.sqlite_warning(plan.mlflow_uri, at_once, int(args.get("epochs") or 1), seconds)
    if warning:
        print(warning, file=sys.stderr, flush=True)


def resolve_resources(plan: SweepPlan) -> TrialResources:
    """Fix each trial's GPU share: the flag's number, or `auto` (sweeps/engine/packing.py) when
    the cluster has GPUs (or is a remote cluster that may scale GPU nodes up), else 0."""
    import ray

    args, gpu = plan.args, plan.resources["gpu"]
    if gpu == "auto":
        has_gpus = ray.cluster_resources().get("GPU", 0) > 0 or bool(args.get("address"))
        fixed = None if has_gpus else 0.0
    else:
        fixed = float(gpu)
    return TrialResources(
        float(plan.resources["cpu"]),
        fixed,
        plan.costs,
        plan.method_cls.cost_axes,
        args["gpu_memory_gb"],
        args["max_trials_per_gpu"],
    )


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
    """Run (or resume) the sweep; return Ray Tune's ResultGrid."""
    from ray import tune

    _init_ray(plan)
    _check_resources(plan)
    _credentials_stay_on_their_nodes()
    if plan.parent_run_id is None:
        begin(plan)
    if plan.stages:
        from sweeps.engine.stages_plan import prepare_stages

        prepare_stages(plan, plan.stages)
    resources = resolve_resources(plan)
    print(resources.describe(plan), flush=True)
    _warn_sqlite_at_scale(plan, resources)
    trainable = wrapped_trainable(plan, resources)
    if plan.restore_tune:
        seal.verify(plan.sweep_dir)  # again: the folder may have changed while stages ran
        tuner = tune.Tuner.restore(plan.sweep_dir, trainable=trainable, resume_unfinished=True, resume_errored=True)
    else:
        tuner = _tuner(plan, trainable, resources)
        seal.record(plan.sweep_dir, ["tuner.pkl"])  # written by the Tuner just now
    with seal.sealing(plan.sweep_dir):  # and every state Tune saves from here on
        results = tuner.fit()
    _finish(plan, results)
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
    from sweeps.engine.summary import summary_table
    from sweeps.engine.tracking import finish_parent_run, training_view

    failures = failed_trials(results, plan.contract)
    plan.failed_trials = failures
    spooled = finish_parent_run(
        plan.mlflow_uri, plan.parent_run_id, "FAILED" if failures else "FINISHED", plan.sweep_dir
    )
    frame = results.get_dataframe()
    if "trial_failed" in frame:
        frame = frame[frame["trial_failed"].isna()]
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

    quiet()
    method_cls = get_method(method)
    parser = build_parser(prog, description, method_cls, defaults)
    plan = None
    new = []
    try:
        args = parser.parse_args(argv)
        given = given_flags(parser, argv)
        new = _absent_paths(args)
        if getattr(args, "list_presets", False):
            print(presets.listing(method_cls, build_parser, args.data_dir))
            return 0
        args = presets.apply(parser, argv, args, method_cls, given)
        if args.dry_run:
            from sweeps.engine import dry_run

            print(dry_run.describe(check_sweep(args, method_cls, prog, given), build_parser(prog, "", method_cls)))
            return 0
        plan = plan_sweep(args, method=method_cls, prog=prog, given=given)
        run_sweep(plan)
    except SweepInputError as error:
        if plan is None or plan.parent_run_id is None:  # refused before the sweep started: it leaves nothing
            _remove_new(new)
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
                print(f"error: {_stopped_for_storage(plan, fault)}", file=sys.stderr)
                return 1
            if plan is not None and plan.parent_run_id is not None:
                _fail_open_runs(plan)  # a bug's traceback follows, but no run is left RUNNING
            raise
        if plan is None:  # while planning (e.g. the tokenised-data cache): nothing had started
            where = os.path.dirname(str(full.filename)) if full.filename else "the disk"
            print(f"error: no space left on the device holding {where}; free space there, run again", file=sys.stderr)
            return 1
        print(f"error: {_stopped_for_space(plan, full)}", file=sys.stderr)
        return 1
    return 1 if plan.failed_trials or plan.failed_stages else 0


def _absent_paths(args) -> list[Path]:
    """What a sweep's planning may create under a local storage path that is not there yet: the storage
    path itself and the tiny models of --smoke-test (a refusal removes them again)."""
    from trainables.encoders.tiny import smoke_models_dir

    if storage.is_uri(args.storage_path):
        return []
    root = Path(storage.absolute(args.storage_path))
    return [p for p in (smoke_models_dir(str(root)), root) if not p.exists()]


def _remove_new(paths) -> None:
    for path in paths:
        if path.name == "_smoke_models":
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def no_space(error: BaseException) -> OSError | None:
    """The ENOSPC error behind `error` (itself, or the error it was raised from), if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return error
        error = error.__cause__ or error.__context__
    return None


STORAGE_MARKS = ("AWS Error", "NO_SUCH_BUCKET", "NoSuchBucket", "NoSuchKey", "curlCode", "ACCESS_DENIED", "S3")


def storage_fault(error: BaseException) -> BaseException | None:
    """The object store's error behind `error` (itself or what it was raised from): the store did not
    answer after the retries (`object_storage.StorageUnavailable`), boto's errors, or pyarrow's S3
    errors (a bucket or objects lost, access denied); None for any other error."""
    from botocore.exceptions import BotoCoreError, ClientError

    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(
            error, (object_storage.StorageUnavailable, object_storage.StorageLost, BotoCoreError, ClientError)
        ):
            return error
        if isinstance(error, OSError) and error.errno != errno.ENOSPC and any(m in str(error) for m in STORAGE_MARKS):
            return error
        error = error.__cause__ or error.__context__
    return None


def _stopped_for_storage(plan: SweepPlan | None, error: BaseException) -> str:
    """Mark the sweep's runs FAILED (none left RUNNING) and say, in one line, which store failed and what to do."""
    from trainables.core.errors import redact

    cause = redact(" ".join(str(error).split())[:240]) or type(error).__name__
    retried = (
        f"retried for up to {object_storage.retry_seconds():.0f} s while it did not answer ({object_storage.RETRY_ENV})"
    )
    if plan is None:
        return (
            f"the object store failed while the sweep was planned ({cause}; {retried}); nothing started. Fix the "
            "store, then run again"
        )
    marked = _fail_open_runs(plan)
    return (
        f"the object store of {redact(plan.sweep_dir)} failed ({cause}; {retried}); the sweep stopped ({marked}). "
        "When the store answers again with the sweep's objects, continue with --resume "
        f"{shlex.quote(redact(plan.sweep_dir))}; "
        "if its bucket or objects were lost, start the sweep again under another --name"
        + (f" (Ray's log: {plan.ray_log})" if plan.ray_log else "")
    )


def _stopped_for_space(plan: SweepPlan, error: OSError) -> str:
    """Mark the sweep's runs FAILED (none left RUNNING) and say, in one line, where the disk is full."""
    folder = os.path.dirname(str(error.filename)) if error.filename else plan.sweep_dir
    marked = _fail_open_runs(plan)
    if storage.read_json(storage.join(plan.sweep_dir, storage.SWEEP_FILE)) is None:  # it never started
        object_storage.delete(storage.join(plan.sweep_dir, storage.CLAIM_FILE))
        then = f"start it again (--name {plan.name} is free)"
    else:
        then = f"continue it with --resume {shlex.quote(str(plan.sweep_dir))}"
    return f"no space left on the device holding {folder}; the sweep stopped ({marked}). Free space there, then {then}"


def _fail_open_runs(plan: SweepPlan) -> str:
    """Mark the parent run and every run of the sweep still RUNNING as FAILED; say what was done."""
    if plan.parent_run_id is None:
        return "no MLflow run had started"
    from mlflow import MlflowClient

    from trainables.core.schema import TAG_PARENT

    try:
        client = MlflowClient(tracking_uri=plan.mlflow_uri)
        experiment = client.get_run(plan.parent_run_id).info.experiment_id
        children = client.search_runs(
            [experiment], f"tags.`{TAG_PARENT}` = '{plan.parent_run_id}' and attributes.status = 'RUNNING'"
        )
        for run in children:
            client.set_terminated(run.info.run_id, "FAILED")
        client.set_terminated(plan.parent_run_id, "FAILED")
    except Exception as error:  # the store may sit on the full disk too
        return f"its MLflow runs could not be marked FAILED in {plan.mlflow_uri}: {str(error).splitlines()[0][:200]}"
    return f"its parent run and {len(children)} running trial run(s) are marked FAILED in MLflow"
