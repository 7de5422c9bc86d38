"""`--simulate`: a sweep through the real engine whose trials wait instead of computing.

Everything but a trial's compute is the real engine: the plan, the packing, Ray Tune, checkpoints
and their retention, the MLflow parent and child runs, the seals, `--resume`, the storage path
(local or S3), the progress line, the summary. A simulated trial (`simulated_trial.SimulatedTrainable`):

- waits the cost model's predicted seconds of its trial alone on a GPU at its precision (the
  method's `TrialCost.seconds`, trainables/encoders/cost.py's H100 calibration, or `--gpu-tflops`)
  divided by `--simulate-speedup K`, or `--simulate-seconds S` for every trial; the wait is split
  evenly over its epochs, and each epoch is reported (and checkpointed) as a real trial's is;
- reports metrics that are SYNTHETIC, a deterministic function of its config and seed, never a
  measurement (`synthetic_score`):

      u     = the first 8 bytes of sha256(config without seed and bookkeeping keys) / 2**64   in [0, 1)
      n     = the same of the config with its seed, mapped to [-1, 1)
      score(name, epoch) = 40 + 40 u + 2 n + h(name) - 10 x 0.5**epoch      (h(name) in [0, 1): per metric)
      train_loss(epoch)  = 0.5**epoch

  so a configuration's scores rise with its epochs, differ between configurations and, a little,
  between seeds, and are the same every time it runs;
- records its node and GPU ids (`node_id`, `gpu_ids` as a real trial), `device` = "simulated",
  its GPU share (`gpu_share`, a metric: what Ray assigned it),
  and, in each epoch's result (Tune's result.json, not MLflow), its `cuda_visible_devices` and
  `epoch_span` ("start-end", Unix seconds): where and when each epoch ran, for placement checks,
  and its runs carry the tag `embsweep.simulated` = "true" (the parent run too):
  `python -m analysis report` refuses them beside real runs (analysis/loader.py).

The trial process imports Ray Tune and this module only: no torch, no transformers, no data
(`plan.data` is not shipped), so many fit on one machine (figures in docs/cluster.md).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from trainables.core.errors import SweepInputError

# Config keys that are the engine's bookkeeping, not the configuration being scored.
BOOKKEEPING = ("seed", "precision", "keep_checkpoints", "best_dtype", "upstream_run_id")


@dataclass(frozen=True)
class Simulation:
    """What every simulated trial of a sweep reads: per cost unit, the seconds it waits in all."""

    seconds: dict  # cost unit (tuple of the method's cost_axes values) -> seconds to wait in all
    axes: tuple
    fixed_seconds: float | None
    epoch_metric: str
    primary: str
    finals: tuple  # metrics reported once, at the last epoch
    mode: str = "max"

    def wait(self, config: dict) -> float:
        if self.fixed_seconds is not None:
            return self.fixed_seconds
        return self.seconds[tuple(config.get(axis) for axis in self.axes)]


@dataclass(frozen=True)
class Shares:
    """The trials' resources for `tune.with_resources`, as plain numbers: Tune ships this callable with
    the trial's class, and `runner.TrialResources` would make every trial process import the runner,
    the methods and torch (measured: 238 MB USS a trial process with it, figures in docs/cluster.md)."""

    cpu: float
    gpu: dict  # cost unit -> GPU share
    axes: tuple
    fixed_gpu: float | None

    @classmethod
    def of(cls, resources, costs: dict) -> "Shares":
        shares = {unit: resources.gpu(dict(zip(resources.axes, unit))) for unit in costs}
        return cls(resources.cpu, shares, tuple(resources.axes), resources.fixed_gpu)

    def __call__(self, config: dict):
        from ray.tune import PlacementGroupFactory

        unit = tuple(config.get(axis) for axis in self.axes)
        gpu = self.gpu.get(unit, 1.0 if self.fixed_gpu is None else self.fixed_gpu)
        return PlacementGroupFactory([{"CPU": self.cpu, "GPU": gpu}])


def _unit(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2**64


def synthetic_score(config: dict, name: str, epoch: int) -> float:
    """The documented synthetic score (module docstring): deterministic in (config, seed, name, epoch)."""
    plain = {k: v for k, v in config.items() if k not in BOOKKEEPING}
    u = _unit(json.dumps(plain, sort_keys=True, default=str))
    n = 2 * _unit(json.dumps({**plain, "seed": config.get("seed")}, sort_keys=True, default=str)) - 1
    return 40 + 40 * u + 2 * n + _unit(name) - 10 * 0.5**epoch


def check(method_cls, configs: list[dict], costs: dict) -> None:
    """A method whose plan prices no trial (no `TrialCost`, or one of no seconds) cannot be simulated."""
    axes = method_cls.cost_axes
    priced = [costs.get(tuple(c.get(axis) for axis in axes)) for c in configs]
    if not configs or any(cost is None or not cost.seconds for cost in priced):
        raise SweepInputError(
            f"--simulate: method {method_cls.name} has no cost model for its trials (no TrialCost with seconds); "
            "simulate a method that declares one, or run it for real"
        )


def check_resume(sweep_dir: str, saved: dict, args) -> None:
    """A simulated sweep resumes simulated, a real one real: never a mix in one parent run."""
    was = bool(saved.get("args", {}).get("simulate"))
    if was != bool(args.simulate):
        how = "with --simulate (its trials are simulated)" if was else "without --simulate (its trials are real)"
        raise SweepInputError(f"--resume {sweep_dir}: resume this sweep {how}; a sweep never mixes the two")


def simulation(plan, resources) -> Simulation:
    """The waits and metric names of a plan's simulated trials (`resources`: runner.TrialResources)."""
    args, contract = plan.args, plan.contract
    speedup = float(args.get("simulate_speedup") or 1.0)
    seconds = {unit: float(cost.seconds) / speedup for unit, cost in plan.costs.items()}
    finals = tuple(dict.fromkeys(m for m in (contract.report, contract.companion, *contract.columns) if m))
    return Simulation(
        seconds=seconds,
        axes=tuple(resources.axes),
        fixed_seconds=args.get("simulate_seconds"),
        epoch_metric=contract.epoch or contract.primary,
        primary=contract.primary,
        finals=finals,
        mode=contract.mode,
    )


def simulated_stage(spec: dict, run_id: str, mlflow_uri: str) -> dict:
    """A stage of a --simulate sweep, as a Ray task with the stage's resources: it waits
    `--simulate-seconds` (0 without it: stages carry no cost model), computes and writes nothing
    (a real sweep never reuses it from the stage store), and records where it ran."""
    import time

    import ray

    seconds = float(spec.get("simulate_seconds") or 0.0)
    time.sleep(seconds)
    ran_on = {"node_id": ray.get_runtime_context().get_node_id(), "gpu_ids": ",".join(map(str, ray.get_gpu_ids()))}
    return {
        "result": {"mlflow_run_id": run_id, "mlflow_uri": mlflow_uri, "seconds": seconds},
        "ran_on": ran_on,
        "simulated": True,
    }
