"""What a sweep's trials need, and whether they have it: each trial's CPU and GPU share from the
method's cost model (`TrialResources`, the callable Ray Tune asks per trial; `resolve_resources`), the
plan's lines on resources, GPU-hours and disk, the check that the Ray cluster has what the flags ask
(`check_cluster_resources`) and that the storage path has room for what the plan keeps
(`check_free_space`; `--force` makes it a warning)."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass

from sweeps.engine import storage
from trainables.core.errors import SweepInputError
from trainables.training import retention


def _free_bytes(path: str) -> int | None:
    """Free bytes on the file system of a local path (its nearest existing folder); None for a URI."""
    if storage.is_uri(path):
        return None
    folder = os.path.abspath(path)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    return shutil.disk_usage(folder).free


def check_free_space(plan) -> None:
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


def check_cluster_resources(plan) -> None:
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

    def disk_bytes(self, plan) -> tuple[float, float]:
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

    def disk(self, plan) -> str:
        """The plan's disk line: what the finished trials leave, and what each running trial adds."""
        keep = plan.args.get("keep_checkpoints", retention.DEFAULT)
        kept, running = self.disk_bytes(plan)
        return (
            f"  disk: about {kept / 1e9:.2f} GB of checkpoints kept (--keep-checkpoints {keep}, "
            f"--best-dtype {plan.args.get('best_dtype', retention.DEFAULT_BEST_DTYPE)}), "
            f"and up to {running / 1e9:.2f} GB more for each trial while it runs"
        )

    def __call__(self, config: dict):
        from ray.tune import PlacementGroupFactory

        return PlacementGroupFactory([{"CPU": self.cpu, "GPU": self.gpu(config)}])

    def describe(self, plan) -> str:
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


def resolve_resources(plan) -> TrialResources:
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
