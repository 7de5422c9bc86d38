"""Plan, run and resume a sweep on Ray Tune, logging to MLflow.

`plan_sweep(args)` does every check (flags, models, layers, data, resume path) and the one-off
work the trials share (resolving models to local folders, tokenising each model's data once),
and raises `SweepInputError` before anything is computed. `run_sweep(plan)` starts or restores
the Tune experiment with one MLflow parent run and prints where the results are.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from argparse import Namespace
from dataclasses import dataclass, field

from trainables.errors import SweepInputError
from trainables.paths import PROJECT_ROOT
from sweeps import storage
from sweeps.cli import build_parser, check_numbers, default_name, parse_int_list, parse_layers

QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_AIR_NEW_OUTPUT": "0",  # with verbose=0: no Ray tables; trainables/progress.py prints progress
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
    "RAY_DEDUP_LOGS": "0",
    "PYTHONWARNINGS": "ignore",
}
SMOKE = {"layers": "0,2", "seeds": "0,1", "epochs": 1, "max_train_samples": 64, "max_eval_samples": 200, "batch_size": 16}
RESUME_KEEPS = ("address", "max_concurrent", "local_gpus", "resume")


@dataclass
class SweepPlan:
    name: str
    method: str
    sweep_dir: str
    storage_path: str
    mlflow_uri: str
    experiment: str
    configs: list[dict]
    data: dict
    resources: dict
    args: dict
    static_params: dict = field(default_factory=dict)
    parent_run_id: str | None = None
    resuming: bool = False
    # Work to do in the driver once the parent run exists and before trials start (e.g. upstream
    # stages: sweeps/stages_plan.py); called as prepare(plan), may edit plan.configs.
    prepare: object = None


def git_commit() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT,
                               capture_output=True, text=True).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def package_versions() -> dict:
    from importlib.metadata import version

    return {f"version_{p}": version(p) for p in ("torch", "transformers", "ray", "mlflow")}


def _smoke_models(args, storage_path: str) -> str:
    from trainables.data.stsb import load_stsb
    from trainables.tiny import build_tiny_model

    import tempfile

    local = storage_path if not storage.is_uri(storage_path) else tempfile.gettempdir()
    target = os.path.join(local, "_smoke_models", "tiny-bert")
    if not os.path.isfile(os.path.join(target, "config.json")):
        sentences = [e.sentence1 for e in load_stsb(args.data_dir)["train"][:2000]]
        build_tiny_model("bert", target, layers=4, hidden=32, sentences=sentences)
    return target


def _resolve_resume(args) -> tuple[str, dict]:
    path = storage.latest_sweep(storage.absolute(args.storage_path)) if args.resume == "latest" else storage.absolute(args.resume)
    if path is None:
        raise SweepInputError(f"--resume: no sweep found under {args.storage_path}; pass the sweep's directory (it holds {storage.SWEEP_FILE}).")
    saved = storage.read_json(storage.join(path, storage.SWEEP_FILE))
    if saved is None:
        raise SweepInputError(f"--resume {path}: this path holds no sweep ({storage.SWEEP_FILE} is missing); pass the directory a sweep printed when it started.")
    from ray import tune

    if not tune.Tuner.can_restore(path):
        raise SweepInputError(f"--resume {path}: Ray Tune's experiment state is missing there (the sweep died before its first trial started); start it again without --resume.")
    return path, saved


def plan_sweep(args: Namespace, method: str = "tmft", prog: str = "sweep") -> SweepPlan:
    """Validate everything and prepare the shared data; raises SweepInputError on bad input."""
    saved = None
    if args.resume:
        sweep_dir, saved = _resolve_resume(args)
        kept = {k: getattr(args, k) for k in RESUME_KEEPS}
        args = Namespace(**{**saved["args"], **kept})
    if args.smoke_test:
        for key, value in SMOKE.items():
            setattr(args, key, value)
    check_numbers(args)
    seeds = parse_int_list(args.seeds, "--seeds")
    layers = parse_layers(args.layers)
    if args.search == "optuna" and (layers is None or len(layers) != 1 or "," in args.models):
        raise SweepInputError("--search optuna tunes one model at one layer: pass a single --models entry and a single --layers value")

    storage_path = storage.absolute(args.storage_path)
    name = saved["name"] if saved else (args.name or default_name(prog))
    sweep_dir = sweep_dir if saved else storage.join(storage_path, name)
    if not saved and storage.read_json(storage.join(sweep_dir, storage.SWEEP_FILE)) is not None:
        raise SweepInputError(f"A sweep named {name!r} already exists at {sweep_dir}; continue it with --resume {sweep_dir} or pick another --name.")
    mlflow_uri = args.mlflow_uri
    if mlflow_uri is None:
        if storage.is_uri(storage_path):
            raise SweepInputError("--storage-path is a URI: pass --mlflow-uri too (an MLflow server, or sqlite:////shared/path/mlflow.db)")
        mlflow_uri = f"sqlite:///{os.path.join(storage_path, 'mlflow.db')}"

    from trainables.encoders import load_config, model_depth, resolve_model
    from trainables.tokenized import load_task, subset, tokenize_task

    model_ids = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.smoke_test and args.models == build_parser("x", "").get_default("models"):
        model_ids = [_smoke_models(args, storage_path)]
    if not model_ids:
        raise SweepInputError("--models is empty")
    paths, depths = {}, {}
    for model in model_ids:
        paths[model] = resolve_model(model)
        depths[model] = model_depth(load_config(paths[model]))
        for layer in layers or []:
            if layer > depths[model]:
                raise SweepInputError(f"--layers: layer {layer} is beyond {model}'s depth ({depths[model]} layers; valid 0..{depths[model]})")

    examples, checksums = load_task(args.task, args.data_dir)  # raises DataFormatError
    if saved and saved.get("data_checksums") not in (None, checksums):
        raise SweepInputError(f"--resume: the data in {args.data_dir} changed since the sweep started (checksums differ); resume with the original data.")
    if args.max_eval_samples:
        examples = {s: (rows if s == "train" else subset(rows, args.max_eval_samples)) for s, rows in examples.items()}

    base = {
        "method": method, "task": args.task, "epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size,
        "weight_decay": args.weight_decay, "warmup_ratio": args.warmup_ratio, "eval_batch_size": args.eval_batch_size,
        "length_grouped": bool(args.length_grouped), "random_init": bool(args.random_init),
        "max_train_samples": args.max_train_samples, "max_eval_samples": args.max_eval_samples,
    }
    configs = [
        {**base, "model": model, "layer": layer, "seed": seed}
        for model in model_ids
        for layer in (layers if layers is not None else range(depths[model] + 1))
        for seed in seeds
    ]
    data = {model: tokenize_task(args.task, paths[model], examples, checksums, args.max_train_samples) for model in model_ids}

    plan = SweepPlan(
        name=name, method=method, sweep_dir=sweep_dir, storage_path=storage_path, mlflow_uri=mlflow_uri,
        experiment=args.experiment or prog.replace("_", "-"), configs=configs, data=data,
        resources={"cpu": args.cpus_per_trial, "gpu": args.gpus_per_trial}, args=vars(args),
        parent_run_id=saved["parent_run_id"] if saved else None, resuming=bool(saved),
    )
    plan.static_params = {
        "git_commit": git_commit(), "sweep": name, "search": args.search, "data_dir": str(args.data_dir),
        **{f"data_sha_{k}": v for k, v in checksums.items()}, **package_versions(),
    }
    plan.args["data_checksums"] = checksums
    return plan


def _init_ray(plan: SweepPlan) -> None:
    import ray

    os.environ.update(QUIET_ENV)
    import logging

    for logger in ("ray.tune", "ray.train", "ray"):
        logging.getLogger(logger).setLevel(logging.WARNING)
    if ray.is_initialized():
        return
    runtime_env = {"env_vars": dict(QUIET_ENV)}
    address = plan.args.get("address")
    if address:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
    else:
        ray.init(address="local", num_gpus=plan.args.get("local_gpus"), include_dashboard=False, runtime_env=runtime_env, log_to_driver=False)


def _check_resources(plan: SweepPlan) -> None:
    import ray

    total = ray.cluster_resources()
    if plan.resources["gpu"] != "auto" and plan.resources["gpu"] > 0 and total.get("GPU", 0) == 0 and not plan.args.get("address"):
        raise SweepInputError(f"--gpus-per-trial {plan.resources['gpu']} asks for GPUs but this Ray has none; use --gpus-per-trial 0 (or --local-gpus N to test packing).")
    if plan.resources["cpu"] > total.get("CPU", 0) and not plan.args.get("address"):
        raise SweepInputError(f"--cpus-per-trial {plan.resources['cpu']} is more than this Ray's {total.get('CPU', 0):g} CPUs.")


def _tuner(plan: SweepPlan, trainable):
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from trainables.progress import ProgressLine
    from trainables.tracking import MlflowSweepCallback

    args = plan.args
    from trainables.tasks import primary_metric

    primary = "dev_" + primary_metric(args.get("task"))
    run_config = tune.RunConfig(
        name=plan.name, storage_path=plan.storage_path, verbose=0,
        callbacks=[MlflowSweepCallback(plan.mlflow_uri, plan.parent_run_id, plan.static_params, sweep_dir=plan.sweep_dir),
                   ProgressLine("best_" + primary)],
        failure_config=tune.FailureConfig(max_failures=args["max_failures"]),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1, checkpoint_frequency=1, checkpoint_at_end=True),
    )
    if args["search"] == "optuna":
        from ray.tune.schedulers import ASHAScheduler
        from ray.tune.search import ConcurrencyLimiter
        from ray.tune.search.optuna import OptunaSearch

        space = {**plan.configs[0], "lr": tune.loguniform(1e-5, 1e-4), "batch_size": tune.choice([16, 32, 64]),
                 "warmup_ratio": tune.uniform(0.0, 0.2)}
        tune_config = tune.TuneConfig(
            metric=primary, mode="max", num_samples=args["num_samples"], reuse_actors=not args.get("no_reuse_actors"),
            search_alg=ConcurrencyLimiter(OptunaSearch(seed=plan.configs[0]["seed"]), max_concurrent=args["max_concurrent"] or 2),
            scheduler=ASHAScheduler(max_t=max(1, args["epochs"]), grace_period=1),
        )
        return tune.Tuner(trainable, param_space=space, tune_config=tune_config, run_config=run_config)
    placeholders = {key: None for config in plan.configs for key in config}
    tune_config = tune.TuneConfig(
        search_alg=BasicVariantGenerator(points_to_evaluate=plan.configs, max_concurrent=args["max_concurrent"] or 0),
        num_samples=len(plan.configs), reuse_actors=not args.get("no_reuse_actors"),
    )
    return tune.Tuner(trainable, param_space=placeholders, tune_config=tune_config, run_config=run_config)


def resolve_resources(plan: SweepPlan) -> "TrialResources":
    """Fix each trial's GPU share: the flag's number, or `auto` (sweeps/packing.py) when the
    cluster has GPUs (or is a remote cluster that may scale GPU nodes up), else 0."""
    import ray

    from sweeps import packing
    from trainables.encoders import load_config

    args, gpu = plan.args, plan.resources["gpu"]
    by_unit, seconds = {}, {}
    for model, task in plan.data.items():
        config = load_config(task.model_path)
        train = task.splits["train"]
        seq_len = max(max(map(len, train.s1)), max(map(len, train.s2)))
        train_tokens = sum(map(len, train.s1)) + sum(map(len, train.s2))
        eval_tokens = sum(sum(map(len, task.splits[s].s1)) + sum(map(len, task.splits[s].s2)) for s in ("dev", "test"))
        for layer in range(int(config.num_hidden_layers) + 1):
            shape = packing.shape_from_config(config, layer, int(args["batch_size"]), seq_len)
            by_unit[(model, layer)] = packing.gpus_per_trial(shape, args["gpu_memory_gb"], args["max_trials_per_gpu"])
            seconds[(model, layer)] = packing.trial_seconds(shape, train_tokens, eval_tokens, int(args["epochs"]), args["gpu_tflops"])
    if gpu == "auto":
        has_gpus = ray.cluster_resources().get("GPU", 0) > 0 or bool(args.get("address"))
        fixed = None if has_gpus else 0.0
    else:
        fixed = float(gpu)
    return TrialResources(float(plan.resources["cpu"]), fixed, by_unit, seconds)


@dataclass
class TrialResources:
    """A picklable `resources` callable for tune.with_resources: CPU and GPU share per trial."""

    cpu: float
    fixed_gpu: float | None
    gpu_by_unit: dict
    seconds_by_unit: dict

    def gpu(self, config: dict) -> float:
        return self.fixed_gpu if self.fixed_gpu is not None else self.gpu_by_unit[(config["model"], int(config["layer"]))]

    def __call__(self, config: dict):
        from ray.tune.execution.placement_groups import resource_dict_to_pg_factory

        return resource_dict_to_pg_factory({"cpu": self.cpu, "gpu": self.gpu(config)})

    def describe(self, plan: SweepPlan) -> str:
        trials = len(plan.configs) if plan.args["search"] == "grid" else plan.args["num_samples"]
        lines = [f"Sweep {plan.name}: {trials} trials; state in {plan.sweep_dir}"]
        shares = [self.gpu(c) for c in plan.configs]
        if not any(shares):
            lines.append(f"  each trial: {self.cpu:g} CPU, no GPU")
            return "\n".join(lines)
        packing = {}
        for share in shares:
            packing[share] = packing.get(share, 0) + 1
        lines.append(f"  each trial: {self.cpu:g} CPU; GPU packing: " + ", ".join(
            f"{count} trials at {share:g} GPU ({max(1, round(1 / share)) if share < 1 else 1} per GPU)" for share, count in sorted(packing.items())))
        repeats = trials / max(1, len(plan.configs)) if plan.args["search"] != "grid" else 1
        hours = sum(self.gpu(c) * self.seconds_by_unit[(c["model"], int(c["layer"]))] for c in plan.configs) * repeats / 3600
        lines.append(f"  estimated {hours:.2f} GPU-hours (cost model in sweeps/packing.py, --gpu-tflops {plan.args['gpu_tflops']:g})")
        return "\n".join(lines)


def wrapped_trainable(plan: SweepPlan, resources: TrialResources):
    from ray import tune

    from trainables import tmft  # noqa: F401  (registers the method)
    from trainables.base import get_trainable

    cls = get_trainable(plan.method.split(",")[0])  # "ws+tmft,dapt+tmft": one class runs both
    return tune.with_resources(tune.with_parameters(cls, data=plan.data), resources)


def run_sweep(plan: SweepPlan):
    """Run (or resume) the sweep; return Ray Tune's ResultGrid."""
    from ray import tune

    from trainables.tracking import start_parent_run

    _init_ray(plan)
    _check_resources(plan)
    if plan.parent_run_id is None:
        plan.parent_run_id = start_parent_run(plan.mlflow_uri, plan.experiment, plan.name,
                                              {**plan.static_params, "trials": len(plan.configs), "method": plan.method})
        storage.write_json(storage.join(plan.sweep_dir, storage.SWEEP_FILE), {
            "name": plan.name, "method": plan.method, "parent_run_id": plan.parent_run_id, "mlflow_uri": plan.mlflow_uri,
            "experiment": plan.experiment, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
            "data_checksums": plan.args.get("data_checksums"),
            "args": {k: v for k, v in plan.args.items() if k != "data_checksums"},
        })
    if plan.prepare is not None:
        plan.prepare(plan)
    resources = resolve_resources(plan)
    print(resources.describe(plan), flush=True)
    trainable = wrapped_trainable(plan, resources)
    if plan.resuming:
        tuner = tune.Tuner.restore(plan.sweep_dir, trainable=trainable, resume_unfinished=True, resume_errored=True)
    else:
        tuner = _tuner(plan, trainable)
    results = tuner.fit()
    _finish(plan, results)
    return results


def _finish(plan: SweepPlan, results) -> None:
    from trainables.tracking import finish_parent_run

    errors = [r for r in results if r.error]
    spooled = finish_parent_run(plan.mlflow_uri, plan.parent_run_id, "FAILED" if errors else "FINISHED", plan.sweep_dir)
    from trainables.tasks import primary_metric

    print(summary_table(results, primary_metric(plan.args.get("task"))))
    ui_uri = plan.mlflow_uri
    print(f"\nResults: {plan.sweep_dir}")
    if ui_uri.startswith(("http://", "https://")):
        print(f"MLflow:  open {ui_uri}")
    else:
        print(f"MLflow:  mlflow ui --backend-store-uri {ui_uri} --host 127.0.0.1 --port 5000   (then open http://127.0.0.1:5000)")
    print(f"Report:  python -m analysis report --mlflow-uri {ui_uri} --out {storage.join(plan.sweep_dir, 'report')}")
    if errors:
        print(f"{len(errors)} trial(s) failed; rerun them from their checkpoints with: --resume {plan.sweep_dir}")
    if spooled:
        print(spooled)


def summary_table(results, primary: str = "spearman") -> str:
    """Best layer per (method,) model by mean dev score over seeds, with test at that layer."""
    frame = results.get_dataframe()
    dev, test = f"best_dev_{primary}", f"test_{primary}_at_best_dev"
    needed = {"config/model", "config/layer", dev, test}
    if frame.empty or not needed <= set(frame.columns):
        return "No finished trials."
    keys = (["config/method"] if frame.get("config/method") is not None and frame["config/method"].nunique() > 1 else []) + ["config/model"]
    grouped = frame.groupby(keys + ["config/layer"])[[dev, test]].agg(["mean", "std", "count"])
    name = {"spearman": "Spearman", "f1": "F1"}.get(primary, primary)
    lines = ["", f"{'model':<45} {'layer':>5} {'dev ' + name:>16} {'test ' + name:>16} {'seeds':>5}"]
    for group, rows in grouped.groupby(level=list(range(len(keys)))):
        group = group if isinstance(group, tuple) else (group,)
        best = rows[(dev, "mean")].idxmax()
        row = rows.loc[best]
        std = lambda col: row[(col, "std")] if row[(col, "count")] > 1 else 0.0
        prefix = "".join(f"{g} " for g in group[:-1])  # the method, when the sweep runs several
        label = prefix + str(group[-1])[-(45 - len(prefix)):]
        lines.append(f"{label:<45} {best[-1]:>5} {row[(dev, 'mean')]:>9.2f} ± {std(dev):>4.2f}"
                     f" {row[(test, 'mean')]:>9.2f} ± {std(test):>4.2f} {int(row[(dev, 'count')]):>5}")
    return "\n".join(lines)


def main(argv=None, prog: str = "sweep", description: str = "", defaults: dict | None = None, method: str = "tmft") -> int:
    parser = build_parser(prog, description, defaults)
    args = parser.parse_args(argv)
    try:
        plan = plan_sweep(args, method=method, prog=prog)
        results = run_sweep(plan)
    except SweepInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 1 if any(r.error for r in results) else 0
