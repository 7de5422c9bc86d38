"""`--dry-run`: a sweep's plan, printed without starting anything.

Every setting is parsed and checked as for a real sweep (the same refusals), then the method prices
its grid from public configs alone (`Method.estimate`: no model loaded, no data tokenised): trials,
each trial's CPU and GPU share (the packing rule of sweeps/engine/packing.py on the trial's memory
estimate), GPU-hours, the disk the finished trials leave and a running trial adds
(trainables/training/retention.py), and the upstream stages run first. With `--instance-type`, the
GPU-hours' cost on that AWS instance type, on demand and on spot (sweeps/engine/instances.py: a dated
price table that names its source). No Ray, no MLflow, and
nothing written: not the storage path, not a cache.
"""

from __future__ import annotations

from sweeps.engine import instances, packing
from sweeps.engine.cli import check_numbers
from trainables.core.method import Method
from trainables.training import retention


def describe(args, method: type[Method], prog: str) -> str:
    """The plan of the sweep `args` describe, as lines to print (SweepInputError on a bad setting)."""
    check_numbers(args)
    method.check(args)
    estimate = method.estimate(args)
    name = method.info.display_name if method.info else method.name
    lines = [f"Dry run of {prog} ({name}): nothing was started or written."]
    if estimate is None:
        lines.append(f"  {method.name} cannot price its grid without loading its models: run it to see the plan")
        return "\n".join(lines)
    trials = estimate.trials if args.search == "grid" else args.num_samples
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
    where = args.storage_path if args.name is None else f"{args.storage_path}/{args.name}"
    lines.append(f"  it would write to {where} and log to {args.mlflow_uri or 'sqlite:///<storage-path>/mlflow.db'}")
    return "\n".join(lines)


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
