"""The command line every sweep script shares, and its validation.

`build_parser(prog, description, method, defaults)` adds the method's own flags
(`Method.add_arguments`) and the engine's: data, search, storage, MLflow, Ray, resources, resume,
smoke test. `check_numbers(args)` refuses bad values of the engine's flags (any flag that is
NaN or infinite, a --precision the trials' device cannot run) with a `SweepInputError` naming the flag, before
anything is computed; `check_bounds(args)` refuses any whole number beyond what Ray and numpy hold (64 bits)
and a seed beyond numpy's 32 bits. `given_flags(parser, argv)` names the flags given on the command line.
"""

from __future__ import annotations

import argparse
import math
import secrets
import time
from pathlib import Path

from sweeps.engine import presets
from trainables.core.errors import SweepInputError
from trainables.core.paths import default_data_dir
from trainables.encoders.precision import PRECISIONS, check_request, trials_on_gpu
from trainables.training.retention import BEST_DTYPES, DEFAULT_BEST_DTYPE, KEEP_CHECKPOINTS
from trainables.training.retention import DEFAULT as DEFAULT_KEEP


def build_parser(prog: str, description: str, method, defaults: dict | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    method.add_arguments(parser, dict(defaults or {}))
    presets.add_arguments(parser, method)
    data = parser.add_argument_group("data")
    data.add_argument(
        "--data-dir",
        default=str(default_data_dir()),
        help="folder holding stsbenchmark/ etc. ($EMBSWEEP_DATA_DIR), or 'hub' for the hub copy",
    )
    search = parser.add_argument_group("search")
    search.add_argument(
        "--search",
        choices=["grid", "optuna", "pareto"],
        default="grid",
        help="grid: the method's grid; optuna: the method's search space, with ASHA; pareto: the size-accuracy "
        "front, Optuna's multi-objective sampler over the grid's axes with early stopping by non-dominated rank",
    )
    search.add_argument("--num-samples", type=int, default=20, help="Optuna trials (with --search optuna or pareto)")
    search.add_argument(
        "--pareto-size",
        choices=["params", "encode-time"],
        default="params",
        help="the size --search pareto minimises: the truncated encoder's parameters, or the measured encode time "
        "per dev sentence",
    )
    search.add_argument(
        "--pareto-eta",
        type=int,
        default=3,
        help="--search pareto: keep the best 1/eta at each rung (epochs 1, eta, ...)",
    )
    search.add_argument(
        "--pareto-tune",
        default="",
        help="--search pareto: comma-separated keys of the method's Optuna space to tune beside the grid's axes "
        "(e.g. lr), each over the method's range or, as KEY=V1:V2:V3, over those values (e.g. lr=2e-5:5e-5:1e-4)",
    )
    run = parser.add_argument_group("running")
    run.add_argument(
        "--name",
        default=None,
        help="sweep name (default: <script>-<timestamp>); the sweep lives in <storage-path>/<name>",
    )
    run.add_argument(
        "--storage-path", default="runs", help="where sweeps keep checkpoints and state (local directory or URI)"
    )
    run.add_argument(
        "--mlflow-uri", default=None, help="MLflow tracking URI (default: sqlite:///<storage-path>/mlflow.db)"
    )
    run.add_argument("--experiment", default=None, help="MLflow experiment name (default: the script's name)")
    run.add_argument(
        "--address",
        default=None,
        help="Ray cluster address ('auto' for the cluster this node belongs to); default: a local Ray",
    )
    run.add_argument(
        "--gpus-per-trial",
        default="auto",
        help="GPUs per trial: a fraction (e.g. 0.25), a whole number, or 'auto': a share from the trial's memory "
        "estimate (rule in sweeps/engine/packing.py; 0 when the Ray cluster has no GPUs)",
    )
    run.add_argument("--gpu-memory-gb", type=float, default=24.0, help="memory of one GPU, for --gpus-per-trial auto")
    run.add_argument(
        "--max-trials-per-gpu", type=int, default=4, help="cap on trials sharing one GPU, for --gpus-per-trial auto"
    )
    run.add_argument(
        "--gpu-tflops",
        type=float,
        default=None,
        help="effective TFLOP/s of one trial on your GPU, for the GPU-hours estimate (default: the figure measured "
        "on an H100 for the precision, in trainables/encoders/cost.py; scale it by your GPU's published "
        "throughput against the H100's)",
    )
    run.add_argument(
        "--precision",
        default="auto",
        choices=PRECISIONS,
        help="training and evaluation precision: auto = tf32 on Ampere and newer GPUs, fp16 with a "
        "gradient scaler on older ones, fp32 on the CPU (table in trainables/encoders/precision.py)",
    )
    run.add_argument("--cpus-per-trial", type=float, default=1.0)
    run.add_argument(
        "--keep-checkpoints",
        default=DEFAULT_KEEP,
        choices=KEEP_CHECKPOINTS,
        help="what a finished trial keeps on disk: best = its best-dev model folder (what evaluation, CKA and "
        "SED teachers read), last = also its last weights and optimiser state, all = every epoch's checkpoint, "
        "none = nothing (scores stay in MLflow); a running trial always keeps what a retry needs",
    )
    run.add_argument(
        "--best-dtype",
        default=DEFAULT_BEST_DTYPE,
        choices=BEST_DTYPES,
        help="how a finished trial stores its best-dev weights: float16 = half the disk, read back as float32; "
        "float32 = as trained",
    )
    run.add_argument(
        "--max-concurrent", type=int, default=None, help="trials running at once (default: as many as resources allow)"
    )
    run.add_argument(
        "--max-failures", type=int, default=2, help="retries of a failing trial, each from its last checkpoint"
    )
    run.add_argument(
        "--no-reuse-actors",
        action="store_true",
        help="start a fresh worker process for every trial (slower; for debugging)",
    )
    run.add_argument(
        "--local-gpus",
        type=int,
        default=None,
        help="logical GPUs to declare for a local Ray (testing packing without hardware)",
    )
    run.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        default=None,
        metavar="SWEEP_DIR",
        help="continue an interrupted sweep (default: the latest under --storage-path); errored trials rerun "
        "from their checkpoints",
    )
    run.add_argument(
        "--force",
        action="store_true",
        help="start even when the free space at --storage-path is below the plan's disk estimate (a warning "
        "instead of the refusal)",
    )
    run.add_argument(
        "--smoke-test",
        action="store_true",
        help="tiny settings on a tiny random model: checks the whole pipeline in about a minute",
    )
    return parser


def check_numbers(args) -> None:
    for flag, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise SweepInputError(f"--{flag.replace('_', '-')} must be a finite number, got {value}")
    if args.num_samples <= 0:
        raise SweepInputError(f"--num-samples must be a positive integer, got {args.num_samples}")
    if args.max_concurrent is not None and args.max_concurrent <= 0:
        raise SweepInputError(f"--max-concurrent must be a positive integer, got {args.max_concurrent}")
    if not args.cpus_per_trial > 0:
        raise SweepInputError(f"--cpus-per-trial must be positive, got {args.cpus_per_trial}")
    args.gpus_per_trial = parse_gpus(args.gpus_per_trial)
    if not (args.gpu_memory_gb > 0 and (args.gpu_tflops is None or args.gpu_tflops > 0)) or args.max_trials_per_gpu < 1:
        raise SweepInputError("--gpu-memory-gb and --gpu-tflops must be positive and --max-trials-per-gpu at least 1")
    if args.max_failures < 0:
        raise SweepInputError("--max-failures must be 0 or more")
    if args.local_gpus is not None and args.local_gpus < 0:
        raise SweepInputError(f"--local-gpus must be 0 or more, got {args.local_gpus}")
    check_request(args.precision, trials_on_gpu(args))


INT64_MAX = 2**63 - 1  # Ray's loggers and numpy hold whole numbers in 64 bits
SEED_MAX = 2**32 - 1  # numpy's and torch's seeds
TEXT_FLAGS = ("name", "experiment")  # free text, even when it is all digits


def check_bounds(args) -> None:
    """Refuse a whole number (given as a number or as digits) beyond 64 bits, and a seed beyond 32."""
    for flag, value in vars(args).items():
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, str) and flag not in TEXT_FLAGS and value.strip().lstrip("+-").isdigit():
            number = int(value)
        if number is not None and abs(number) > INT64_MAX:
            raise SweepInputError(
                f"--{flag.replace('_', '-')} {value} is beyond the largest whole number Ray and numpy hold "
                f"({INT64_MAX}); pass a smaller value"
            )
    if isinstance(getattr(args, "seeds", None), str):
        from trainables.core.method import parse_int_list

        check_seeds(parse_int_list(args.seeds, "--seeds"), "--seeds")


def check_seeds(seeds, flag: str) -> None:
    beyond = [seed for seed in seeds if not 0 <= seed <= SEED_MAX]
    if beyond:
        raise SweepInputError(
            f"{flag}: a seed must be within 0..{SEED_MAX} (numpy's and torch's range), got {beyond[0]}"
        )


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
                check_seeds(list(numbers(value)), "the trial setting seed")


def given_flags(parser: argparse.ArgumentParser, argv) -> set[str]:
    """The dests of the flags given in `argv` (a flag left at its default is not given)."""
    unset = object()
    namespace = argparse.Namespace(**{action.dest: unset for action in parser._actions})
    parsed, _ = parser.parse_known_args(argv, namespace)
    return {dest for dest, value in vars(parsed).items() if value is not unset}


def parse_gpus(value):
    """'auto' or a number of GPUs per trial: a fraction in [0, 1] or a whole number."""
    if value is None or str(value).strip().lower() == "auto":
        return "auto"
    try:
        gpus = float(value)
    except ValueError:
        raise SweepInputError(
            f"--gpus-per-trial must be 'auto', a fraction such as 0.25, or a whole number; got {value!r}"
        ) from None
    if not math.isfinite(gpus) or gpus < 0 or (gpus > 1 and gpus != int(gpus)):
        raise SweepInputError(f"--gpus-per-trial must be a fraction in (0, 1] or a whole number, got {value}")
    return gpus


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
