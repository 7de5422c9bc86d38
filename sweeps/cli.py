"""The command line every sweep script shares, and its validation.

`parse_args(argv, defaults)` returns argparse's namespace; `validate_args(args)` turns it into
clean values or raises `SweepInputError` naming the bad flag, before anything is computed.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from trainables.errors import SweepInputError
from trainables.paths import default_data_dir

PAPER_MODELS = "google/electra-base-discriminator,google/electra-base-generator,bert-base-cased"


def build_parser(prog: str, description: str, defaults: dict | None = None) -> argparse.ArgumentParser:
    d = {
        "models": PAPER_MODELS, "layers": "all", "seeds": "0,1,2,3,4", "epochs": 10, "batch_size": 32,
        "lr": 2e-5, "task": "stsb", **(defaults or {}),
    }
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    what = parser.add_argument_group("what to sweep")
    what.add_argument("--models", default=d["models"], help="comma-separated hub ids or local model directories")
    what.add_argument("--layers", default=d["layers"], help="'all' (0..L of each model) or comma-separated layers, e.g. 0,3,6; 0 = embedding output")
    what.add_argument("--seeds", default=d["seeds"], help="comma-separated seeds, or a range like 0-4")
    what.add_argument("--task", default=d["task"], choices=["stsb", "mrpc", "sick"],
                      help="fine-tuning task: stsb (Spearman), mrpc (F1, threshold chosen on dev), sick (entailment, macro-F1)")
    what.add_argument("--random-init", action="store_true", help="start from randomly initialised weights of the same architecture (Appendix E control)")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=int, default=d["epochs"], help="epochs; 0 = evaluate the pretrained truncated encoder (zero-shot baseline)")
    train.add_argument("--batch-size", type=int, default=d["batch_size"])
    train.add_argument("--lr", type=float, default=d["lr"], help="peak learning rate (AdamW)")
    train.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay (not on LayerNorm/bias)")
    train.add_argument("--warmup-ratio", type=float, default=0.1, help="linear warm-up share of all steps, then linear decay")
    train.add_argument("--eval-batch-size", type=int, default=64)
    train.add_argument("--length-grouped", action="store_true", help="group training pairs of similar length into batches (faster; departs from the paper's random batches)")
    train.add_argument("--max-train-samples", type=int, default=None, help="train on a deterministic subset of this many pairs")
    train.add_argument("--max-eval-samples", type=int, default=None, help="evaluate on a deterministic subset of dev and test (quick runs only)")
    train.add_argument("--data-dir", default=str(default_data_dir()), help="folder holding stsbenchmark/ etc. ($EMBSWEEP_DATA_DIR), or 'hub' for the hub copy")
    search = parser.add_argument_group("search")
    search.add_argument("--search", choices=["grid", "optuna"], default="grid", help="grid: models x layers x seeds; optuna: lr, batch size, warm-up for one model and layer, with ASHA")
    search.add_argument("--num-samples", type=int, default=20, help="Optuna trials (with --search optuna)")
    run = parser.add_argument_group("running")
    run.add_argument("--name", default=None, help="sweep name (default: <script>-<timestamp>); the sweep lives in <storage-path>/<name>")
    run.add_argument("--storage-path", default="runs", help="where sweeps keep checkpoints and state (local directory or URI)")
    run.add_argument("--mlflow-uri", default=None, help="MLflow tracking URI (default: sqlite:///<storage-path>/mlflow.db)")
    run.add_argument("--experiment", default=None, help="MLflow experiment name (default: the script's name)")
    run.add_argument("--address", default=None, help="Ray cluster address ('auto' for the cluster this node belongs to); default: a local Ray")
    run.add_argument("--gpus-per-trial", default="auto",
                     help="GPUs per trial: a fraction (e.g. 0.25), a whole number, or 'auto': a fraction from the model's size, "
                          "the layer and the batch (rule in sweeps/packing.py; 0 when the Ray cluster has no GPUs)")
    run.add_argument("--gpu-memory-gb", type=float, default=24.0, help="memory of one GPU, for --gpus-per-trial auto")
    run.add_argument("--max-trials-per-gpu", type=int, default=4, help="cap on trials sharing one GPU, for --gpus-per-trial auto")
    run.add_argument("--gpu-tflops", type=float, default=25.0, help="effective GPU throughput for the GPU-hours estimate")
    run.add_argument("--cpus-per-trial", type=float, default=1.0)
    run.add_argument("--max-concurrent", type=int, default=None, help="trials running at once (default: as many as resources allow)")
    run.add_argument("--max-failures", type=int, default=2, help="retries of a failing trial, each from its last checkpoint")
    run.add_argument("--no-reuse-actors", action="store_true", help="start a fresh worker process for every trial (slower; for debugging)")
    run.add_argument("--local-gpus", type=int, default=None, help="logical GPUs to declare for a local Ray (testing packing without hardware)")
    run.add_argument("--resume", nargs="?", const="latest", default=None, metavar="SWEEP_DIR",
                     help="continue an interrupted sweep (default: the latest under --storage-path); errored trials rerun from their checkpoints")
    run.add_argument("--smoke-test", action="store_true", help="tiny settings on a tiny random model: checks the whole pipeline in about a minute")
    return parser


def parse_int_list(text: str, flag: str) -> list[int]:
    values = []
    try:
        for part in str(text).split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part[1:]:
                low, high = part.split("-", 1)
                values.extend(range(int(low), int(high) + 1))
            else:
                values.append(int(part))
    except ValueError:
        raise SweepInputError(f"{flag} {text!r} is not a comma-separated list of integers (e.g. 0,1,2 or 0-4)") from None
    if not values:
        raise SweepInputError(f"{flag} is empty")
    if any(v < 0 for v in values):
        raise SweepInputError(f"{flag} {text!r} holds a negative value")
    return sorted(set(values))


def parse_layers(text: str) -> list[int] | None:
    """None means all layers of each model."""
    return None if str(text).strip().lower() == "all" else parse_int_list(text, "--layers")


def check_numbers(args) -> None:
    if not args.lr > 0:
        raise SweepInputError(f"--lr must be positive, got {args.lr}")
    for flag in ("batch_size", "eval_batch_size", "num_samples"):
        if getattr(args, flag) <= 0:
            raise SweepInputError(f"--{flag.replace('_', '-')} must be a positive integer, got {getattr(args, flag)}")
    if args.epochs < 0:
        raise SweepInputError(f"--epochs must be 0 or more, got {args.epochs}")
    if args.weight_decay < 0 or not 0 <= args.warmup_ratio < 1:
        raise SweepInputError("--weight-decay must be >= 0 and --warmup-ratio in [0, 1)")
    for flag in ("max_train_samples", "max_eval_samples", "max_concurrent"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            raise SweepInputError(f"--{flag.replace('_', '-')} must be a positive integer, got {value}")
    if args.cpus_per_trial <= 0:
        raise SweepInputError(f"--cpus-per-trial must be positive, got {args.cpus_per_trial}")
    args.gpus_per_trial = parse_gpus(args.gpus_per_trial)
    if args.gpu_memory_gb <= 0 or args.max_trials_per_gpu < 1 or args.gpu_tflops <= 0:
        raise SweepInputError("--gpu-memory-gb and --gpu-tflops must be positive and --max-trials-per-gpu at least 1")
    if args.max_failures < 0:
        raise SweepInputError("--max-failures must be 0 or more")


def parse_gpus(value):
    """'auto' or a number of GPUs per trial: a fraction in [0, 1] or a whole number."""
    if value is None or str(value).strip().lower() == "auto":
        return "auto"
    try:
        gpus = float(value)
    except ValueError:
        raise SweepInputError(f"--gpus-per-trial must be 'auto', a fraction such as 0.25, or a whole number; got {value!r}") from None
    if gpus < 0 or (gpus > 1 and gpus != int(gpus)):
        raise SweepInputError(f"--gpus-per-trial must be a fraction in (0, 1] or a whole number, got {value}")
    return gpus


def default_name(prog: str) -> str:
    return f"{Path(prog).stem.replace('_', '-')}-{time.strftime('%Y%m%d-%H%M%S')}"
