"""The command line every sweep script shares, and its validation.

The engine's settings (`ENGINE`: data, search, storage, MLflow, Ray, resources, resume, smoke
test, dry run) are declared here as the methods declare theirs (trainables/core/settings.py).
`build_parser(prog, description, method, defaults)` makes one flag of each of the method's settings and
the engine's; its `parse_args` returns them typed and checked, refusing a bad value with one
`SweepInputError` naming the flag. `check_numbers(args)` refuses what no single setting can (a
--precision the trials' device cannot run); `check_config_bounds` the trial configs Ray is given.
`given_flags(parser, argv)` names the flags given on the command line.
"""

from __future__ import annotations

import argparse
import math
import secrets
import time
from pathlib import Path

from sweeps.engine import instances, presets
from trainables.core.errors import SweepInputError
from trainables.core.paths import default_data_dir
from trainables.core.setting_conditions import When
from trainables.core.settings import (
    INT64_MAX,
    SEED_MAX,
    Auto,
    Choice,
    Flag,
    Float,
    Int,
    Kind,
    Names,
    Setting,
    Text,
    add_to_parser,
    resolve,
)
from trainables.encoders.precision import PRECISIONS, check_request, trials_on_gpu
from trainables.training.retention import BEST_DTYPES, DEFAULT_BEST_DTYPE, KEEP_CHECKPOINTS, keeps_best
from trainables.training.retention import DEFAULT as DEFAULT_KEEP

RAY_RESOURCE_UNIT = 0.0001  # the smallest fraction of a resource Ray schedules (ray_option_utils)


class GpuShare(Kind):
    """GPUs per trial: a fraction in [0, 1] or a whole number."""

    def parse(self, value):
        try:
            gpus = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"must be 'auto', a fraction such as 0.25, or a whole number; got {value!r}") from None
        if not math.isfinite(gpus) or gpus < 0 or (gpus > 1 and gpus != int(gpus)):
            raise ValueError(f"must be a fraction in (0, 1] or a whole number, got {value}")
        if 0 < gpus < RAY_RESOURCE_UNIT:
            raise ValueError(
                f"must be 0 or at least {RAY_RESOURCE_UNIT:g} (Ray schedules resources in steps of "
                f"{RAY_RESOURCE_UNIT:g}), got {value}"
            )
        return gpus

    def describe(self) -> str:
        return "a fraction in (0, 1] or a whole number"

    def bad_values(self) -> list[str]:
        return ["x", "1.5", "-1", "1e-9"]


PARETO = (When("search", ("pareto",)),)
BY_NEED = (When("seeds_by_need"),)
AUTO_GPUS = (When("gpus_per_trial", ("auto",)),)
SIMULATED = (When("simulate"),)
DATA = "data"
SEARCH = "search"
RUN = "running"
ENGINE = (
    Setting(
        "data_dir",
        Text(),
        str(default_data_dir()),
        "folder holding stsbenchmark/ etc. ($EMBSWEEP_DATA_DIR), or 'hub' for the hub copy",
        group=DATA,
    ),
    Setting(
        "search",
        Choice(("grid", "optuna", "pareto")),
        "grid",
        "grid: the method's grid; optuna: the method's search space, with ASHA; pareto: the size-accuracy front, "
        "Optuna's multi-objective sampler over the grid's axes with early stopping by non-dominated rank",
        group=SEARCH,
    ),
    Setting(
        "num_samples",
        Int(low=1),
        20,
        "Optuna trials (with --search optuna or pareto)",
        group=SEARCH,
        applies_when=(When("search", ("optuna", "pareto")),),
    ),
    Setting(
        "pareto_size",
        Choice(("params", "encode-time")),
        "params",
        "the size --search pareto minimises: the truncated encoder's parameters, or the measured encode time per "
        "dev sentence",
        group=SEARCH,
        applies_when=PARETO,
    ),
    Setting(
        "pareto_eta",
        Int(low=2),
        3,
        "--search pareto: keep the best 1/eta at each rung (epochs 1, eta, ...)",
        group=SEARCH,
        applies_when=PARETO,
    ),
    Setting(
        "pareto_tune",
        Text(),
        "",
        "--search pareto: comma-separated keys of the method's Optuna space to tune beside the grid's axes (e.g. "
        "lr), each over the method's range or, as KEY=V1:V2:V3, over those values (e.g. lr=2e-5:5e-5:1e-4)",
        group=SEARCH,
        applies_when=PARETO,
    ),
    Setting(
        "seeds_by_need",
        Flag(),
        False,
        "run the --seeds in rounds: each configuration starts with --initial-seeds, and gets its next seed only "
        "while its conclusion is open (its interval overlaps the best's, or is wider than --seed-ci-width); rule "
        "and error rate in docs/methods/search.md",
        group=SEARCH,
    ),
    Setting(
        "initial_seeds",
        Int(low=2),
        2,
        "--seeds-by-need: seeds every configuration starts with",
        group=SEARCH,
        applies_when=BY_NEED,
    ),
    Setting(
        "seed_ci_width",
        Float(above=0),
        2.0,
        "--seeds-by-need: a configuration whose 95% interval is wider than this (in the metric's points, x100) "
        "gets another seed",
        group=SEARCH,
        applies_when=BY_NEED,
    ),
    Setting(
        "seed_spread",
        Choice(("pooled", "own")),
        "pooled",
        "--seeds-by-need: the seed std behind the intervals: pooled over the configurations compared together "
        "(one model and task), or each configuration's own",
        group=SEARCH,
        applies_when=BY_NEED,
    ),
    Setting(
        "name",
        Text(),
        None,
        "sweep name (default: <script>-<timestamp>); the sweep lives in <storage-path>/<name>",
        group=RUN,
    ),
    Setting(
        "storage_path", Text(), "runs", "where sweeps keep checkpoints and state (local directory or URI)", group=RUN
    ),
    Setting("mlflow_uri", Text(), None, "MLflow tracking URI (default: sqlite:///<storage-path>/mlflow.db)", group=RUN),
    Setting("experiment", Text(), None, "MLflow experiment name (default: the script's name)", group=RUN),
    Setting(
        "address",
        Text(),
        None,
        "Ray cluster address ('auto' for the cluster this node belongs to); default: a local Ray",
        group=RUN,
    ),
    Setting(
        "gpus_per_trial",
        Auto(GpuShare()),
        "auto",
        "GPUs per trial: 'auto' is a share from the trial's memory estimate (rule in sweeps/engine/packing.py; 0 "
        "when the Ray cluster has no GPUs)",
        group=RUN,
    ),
    Setting(
        "gpu_memory_gb",
        Float(above=0),
        24.0,
        "memory of one GPU, for --gpus-per-trial auto",
        group=RUN,
        applies_when=AUTO_GPUS,
    ),
    Setting(
        "max_trials_per_gpu",
        Int(low=1),
        4,
        "cap on trials sharing one GPU, for --gpus-per-trial auto",
        group=RUN,
        applies_when=AUTO_GPUS,
    ),
    Setting(
        "gpu_tflops",
        Float(above=0),
        None,
        "effective TFLOP/s of one trial on your GPU, for the GPU-hours estimate (default: the figure measured on "
        "an H100 for the precision, in trainables/encoders/cost.py; scale it by your GPU's published throughput "
        "against the H100's)",
        group=RUN,
    ),
    Setting(
        "precision",
        Choice(PRECISIONS),
        "auto",
        "training and evaluation precision: auto = tf32 on Ampere and newer GPUs, fp16 with a gradient scaler on "
        "older ones, fp32 on the CPU (table in trainables/encoders/precision.py)",
        group=RUN,
        trial=True,
    ),
    Setting(
        "cpus_per_trial",
        Float(low=RAY_RESOURCE_UNIT, why=f"Ray schedules resources in steps of {RAY_RESOURCE_UNIT:g}"),
        1.0,
        "CPUs per trial",
        group=RUN,
    ),
    Setting(
        "keep_checkpoints",
        Choice(KEEP_CHECKPOINTS),
        DEFAULT_KEEP,
        "what a finished trial keeps on disk: best = its best-dev model folder (what evaluation, CKA and SED "
        "teachers read), last = also its last weights and optimiser state, all = every epoch's checkpoint, none = "
        "nothing (scores stay in MLflow); a running trial always keeps what a retry needs",
        group=RUN,
        trial=True,
        result=False,  # what stays on disk, not the scores; a reused trial's checkpoint is checked to exist
    ),
    Setting(
        "best_dtype",
        Choice(BEST_DTYPES),
        DEFAULT_BEST_DTYPE,
        "how a finished trial stores its best-dev weights: float16 = half the disk, read back as float32; float32 = "
        "as trained",
        group=RUN,
        trial=True,
        applies_when=(When("keep_checkpoints", tuple(k for k in KEEP_CHECKPOINTS if keeps_best(k))),),
    ),
    Setting(
        "max_concurrent", Int(low=1), None, "trials running at once (default: as many as resources allow)", group=RUN
    ),
    Setting("max_failures", Int(low=0), 2, "retries of a failing trial, each from its last checkpoint", group=RUN),
    Setting(
        "no_reuse_actors",
        Flag(),
        False,
        "start a fresh worker process for every trial (slower; for debugging)",
        group=RUN,
    ),
    Setting(
        "local_gpus",
        Int(low=0),
        None,
        "logical GPUs to declare for a local Ray (testing packing without hardware)",
        group=RUN,
        applies_when=(When("address", unset=True),),
    ),
    Setting(
        "resume",
        Text(),
        None,
        "continue an interrupted sweep (default: the latest under --storage-path); errored trials rerun from their "
        "checkpoints",
        group=RUN,
        const="latest",
        metavar="SWEEP_DIR",
    ),
    Setting(
        "recompute",
        Flag(),
        False,
        "run every trial, even one that a finished run with the same trial key (its method, result-changing "
        "settings, model, data and code) already computed; by default such a trial is linked, not run "
        "(sweeps/engine/reuse.py)",
        group=RUN,
    ),
    Setting(
        "reuse_from",
        Names(),
        None,
        "more MLflow stores (comma-separated tracking URIs) whose finished trials with the same key are linked "
        "instead of run, beside the sweep's own store",
        group=RUN,
        metavar="URI[,URI...]",
    ),
    Setting(
        "extend",
        Text(),
        None,
        "a finished sweep (its folder, or its name under --storage-path) to grow: the values given for its axes "
        "(--seeds, --layers, --models) are added to its own, its other settings are kept, and only the new "
        "cells run; the new sweep links the old one's trials, so its report covers them all",
        group=RUN,
        metavar="SWEEP",
    ),
    Setting(
        "force",
        Flag(),
        False,
        "start even when the free space at --storage-path is below the plan's disk estimate (a warning instead of "
        "the refusal)",
        group=RUN,
    ),
    Setting(
        "smoke_test",
        Flag(),
        False,
        "tiny settings on a tiny random model: checks the whole pipeline in about a minute",
        group=RUN,
    ),
    Setting(
        "simulate",
        Flag(),
        False,
        "run the sweep through the whole engine with simulated trials: each waits its cost model's predicted "
        "seconds (divided by --simulate-speedup) and reports synthetic scores, tagged simulated (sweeps/engine/"
        "simulate.py); no GPU, no model, no data loaded in the trials",
        group=RUN,
    ),
    Setting(
        "simulate_speedup",
        Float(above=0),
        10.0,
        "--simulate: divide each trial's predicted seconds by this",
        group=RUN,
        applies_when=SIMULATED,
    ),
    Setting(
        "simulate_seconds",
        Float(above=0),
        None,
        "--simulate: every trial waits this many seconds in all, whatever its cost model predicts",
        group=RUN,
        applies_when=SIMULATED,
    ),
    Setting(
        "dry_run",
        Flag(),
        False,
        "print the plan (trials, resources per trial, GPU-hours, disk, upstream stages to compute or reuse) and "
        "exit: no Ray, nothing written",
        group=RUN,
    ),
    Setting(
        "instance_type",
        Choice(instances.GPU_TYPES),
        None,
        "with --dry-run: the plan's GPU-hours priced on this AWS GPU instance type, on demand and on spot "
        f"(sweeps/engine/instances.py, {instances.PRICE_REGION} prices of {instances.PRICES_AS_OF})",
        group=RUN,
        applies_when=(When("dry_run"),),
    ),
)
# the sweep's settings, not a trial's: only those every trial carries (`trial`) can change its result
ENGINE = tuple(setting.but(config=False, result=setting.trial and setting.result) for setting in ENGINE)
TRIAL_SETTINGS = tuple(setting for setting in ENGINE if setting.trial)  # the ones every trial config carries


class SweepParser(argparse.ArgumentParser):
    """A sweep script's parser: `parse_args` returns every declared setting typed and checked
    (SweepInputError naming the flag on a bad value)."""

    settings: tuple[Setting, ...] = ()

    def parse_args(self, args=None, namespace=None):
        return resolve(super().parse_args(args, namespace), self.settings)


def build_parser(prog: str, description: str, method, defaults: dict | None = None) -> SweepParser:
    """The parser of a method's sweep script: the method's settings (`defaults`: a script's own
    defaults of them), its presets, the engine's settings."""
    parser = SweepParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    own = tuple(
        s.but(default=s.parse(defaults[s.name])) if defaults and s.name in defaults else s for s in method.settings
    )
    groups: dict = {}
    add_to_parser(parser, own, groups)
    chosen = presets.settings(method)
    add_to_parser(parser, chosen, groups)
    add_to_parser(parser, ENGINE, groups)
    parser.settings = (*own, *chosen, *ENGINE)
    return parser


def check_numbers(args) -> None:
    """What no single engine setting can check alone: a --precision the trials' device cannot run."""
    check_request(args.precision, trials_on_gpu(args))


def check_config_bounds(configs: list[dict]) -> None:
    """The trial configs Ray is given: every whole number within 64 bits, every seed within 32."""

    def numbers(value):
        if isinstance(value, (list, tuple)):
            for item in value:
                yield from numbers(item)
        elif isinstance(value, int) and not isinstance(value, bool):
            yield value

    for config in configs:
        for key, value in config.items():
            beyond = [n for n in numbers(value) if abs(n) > INT64_MAX]
            if beyond:
                raise SweepInputError(
                    f"the trial setting {key} = {beyond[0]} is beyond the largest whole number Ray and numpy hold "
                    f"({INT64_MAX}); pass a smaller value"
                )
            if key == "seed":
                beyond = [seed for seed in numbers(value) if not 0 <= seed <= SEED_MAX]
                if beyond:
                    raise SweepInputError(
                        f"the trial setting seed: a seed must be within 0..{SEED_MAX} (numpy's and torch's range), "
                        f"got {beyond[0]}"
                    )


def given_flags(parser: argparse.ArgumentParser, argv) -> set[str]:
    """The dests of the flags given in `argv` (a flag left at its default is not given)."""
    unset = object()
    namespace = argparse.Namespace(**{action.dest: unset for action in parser._actions})
    parsed, _ = parser.parse_known_args(argv, namespace)
    return {dest for dest, value in vars(parsed).items() if value is not unset}


def check_name(name: str) -> None:
    """A sweep's name is one plain folder name: it can never place the sweep outside --storage-path."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or name != name.strip() or name.startswith("."):
        raise SweepInputError(
            f"--name {name!r} must be a single folder name (no '/', no leading '.'); the sweep lives in "
            "<storage-path>/<name>"
        )


def default_name(prog: str) -> str:
    """`<script>-<date>-<time>-<4 random hex digits>`: sweeps started in the same second get different names."""
    return f"{Path(prog).stem.replace('_', '-')}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
