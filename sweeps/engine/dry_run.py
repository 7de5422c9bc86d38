"""`--dry-run`: a sweep's plan, printed without starting anything.

The dry run is the real plan minus its execution: it starts from the same checks (`plan.check_sweep`:
the settings, the method's check, the resume folder and the flags it started with, the storage, the
name, the MLflow store), so it refuses (exit 2) what the sweep would refuse, and describes the sweep
that would run: `--resume` the named sweep with its own settings and the trials it has left (its
trial runs FINISHED in MLflow are done), `--smoke-test` the tiny model the smoke test builds (built
here in a temporary folder, removed again). Then the method prices its grid from configs alone
(`Method.estimate`: no model loaded, no data tokenised): trials, each trial's CPU and GPU share (the
packing rule of sweeps/engine/packing.py on the trial's memory estimate), GPU-hours, the disk the
finished trials leave and a running trial adds (trainables/training/retention.py), and the upstream
stages run first. With `--instance-type`, the GPU-hours' cost on that AWS instance type, on demand
and on spot (sweeps/engine/instances.py: a dated price table that names its source). No Ray, MLflow
only read (a resumed sweep's finished trials), and nothing written: not the storage path, not a cache.
"""

from __future__ import annotations

import tempfile
from argparse import Namespace

from sweeps.engine import instances, packing
from trainables.training import retention


def describe(checked, parser=None) -> str:
    """The plan of the sweep `checked` (plan.CheckedSweep) describes, as lines to print (SweepInputError
    where the method refuses its grid: a layer beyond a model's depth, say). The default models (what
    --smoke-test replaces with its tiny model): `checked.default_models`, or `parser`'s where given."""
    from trainables.core.errors import SweepInputError
    from trainables.encoders.tiny import smoke_model, smoke_models_dir

    args, method = Namespace(**vars(checked.args)), checked.method_cls
    with tempfile.TemporaryDirectory(prefix="embsweep-dry-run-") as scratch:
        smoke = ""
        if (
            args.smoke_test
            and getattr(args, "models", None)
            and args.models == (parser.get_default("models") if parser else checked.default_models)
        ):
            args.models = [str(smoke_model(scratch, args.data_dir))]
            smoke = " the smoke test's tiny random BERT (4 layers, hidden size 32);"
        try:
            estimate = method.estimate(args)
        except SweepInputError as error:  # named as the real run names it: where it builds the tiny model
            raise SweepInputError(
                str(error).replace(str(smoke_models_dir(scratch)), str(smoke_models_dir(checked.storage_path)))
            ) from None
    name = method.info.display_name if method.info else method.name
    lines = [f"Dry run of {checked.prog} ({name}): nothing was started or written."]
    if smoke:
        lines.append(f"  model:{smoke} the smoke test builds it when it starts")
    if estimate is None:
        lines.append(f"  {method.name} cannot price its grid without loading its models: run it to see the plan")
        return "\n".join(lines)
    trials = estimate.trials if args.search == "grid" else args.num_samples
    if checked.saved is not None:
        done = finished_trials(checked)
        if done is None:
            lines.append(
                f"  resuming {checked.sweep_dir}: its finished trials could not be read from {checked.mlflow_uri}"
            )
        else:
            left = max(0, trials - done)
            lines.append(f"  resuming {checked.sweep_dir}: {left} of its {trials} trials left ({done} finished)")
    lines.append(f"  trials: {trials}" + (f" (--search {args.search})" if args.search != "grid" else ""))
    lines += _resources(args, estimate.costs)
    hours = "unknown" if estimate.gpu_hours is None else f"{estimate.gpu_hours:.2f}"
    lines.append(
        f"  GPU-hours: {hours} one trial after another on one GPU" + (f"; {estimate.basis}" if estimate.basis else "")
    )
    if getattr(args, "instance_type", None):
        lines.append(
            instances.cost_line(estimate.gpu_hours, args.instance_type)
            if estimate.gpu_hours is not None
            else f"  cost on {args.instance_type}: unknown (GPU-hours unknown)"
        )
    if estimate.note:
        lines.append(f"  note: {estimate.note}")
    lines += _disk(args, estimate.costs)
    if estimate.stages:
        lines.append(f"  upstream stages, before the trials ({len(estimate.stages)}):")
        lines += [f"    {stage}" for stage in estimate.stages]
    else:
        lines.append("  upstream stages: none")
    verb = "resume" if checked.saved is not None else "write to"
    lines.append(f"  it would {verb} {checked.sweep_dir} and log to {checked.mlflow_uri}")
    return "\n".join(lines)


def finished_trials(checked) -> int | None:
    """How many trial runs of a resumed sweep are FINISHED in its MLflow store (None: not readable)."""
    from mlflow import MlflowClient

    from trainables.core.schema import TAG_PARENT

    parent = checked.saved.get("parent_run_id")
    try:
        client = MlflowClient(tracking_uri=checked.mlflow_uri)
        experiment = client.get_run(parent).info.experiment_id
        runs = client.search_runs(
            [experiment], f"tags.`{TAG_PARENT}` = '{parent}' and attributes.status = 'FINISHED'", max_results=50000
        )
    except Exception:  # any store's error: the plan says "unknown"
        return None
    return len(runs)


def _resources(args, costs) -> list[str]:
    if not costs:
        return [f"  each trial: {args.cpus_per_trial:g} CPU; GPU share: not priced for this grid"]
    on_gpu = [c for c in costs if c.gpu]
    if not on_gpu:
        return [f"  each trial: {args.cpus_per_trial:g} CPU, no GPU"]
    if args.gpus_per_trial != "auto":
        shares = {float(args.gpus_per_trial)}
    else:
        shares = {packing.gpus_per_trial(c.memory_bytes, args.gpu_memory_gb, args.max_trials_per_gpu) for c in on_gpu}
    memory = [c.memory_bytes / packing.GIB for c in on_gpu]
    how = "--gpus-per-trial" if args.gpus_per_trial != "auto" else f"auto, {args.gpu_memory_gb:g} GB GPUs"
    return [
        f"  each trial: {args.cpus_per_trial:g} CPU and {_span(shares, '{:.3g}')} GPU ({how}); "
        f"estimated GPU memory {_span({min(memory), max(memory)}, '{:.1f}')} GiB"
    ]


def _disk(args, costs) -> list[str]:
    if not costs:
        return ["  disk: not priced for this grid"]
    epochs = int(getattr(args, "epochs", 1) or 1) if isinstance(getattr(args, "epochs", 1), int) else 1
    kept = sum(retention.kept_bytes(args.keep_checkpoints, c.weight_bytes, epochs, args.best_dtype) for c in costs)
    running = max(retention.running_bytes(c.weight_bytes) for c in costs)
    return [
        f"  disk: about {kept / 1e9:.2f} GB of checkpoints kept (--keep-checkpoints {args.keep_checkpoints}, "
        f"--best-dtype {args.best_dtype}), and up to {running / 1e9:.2f} GB more for each trial while it runs"
    ]


def _span(values, form: str) -> str:
    low, high = min(values), max(values)
    return form.format(low) if low == high else f"{form.format(low)} to {form.format(high)}"
