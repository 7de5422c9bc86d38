"""TMFT trials on one GPU: fp32 against bf16, 1, 2 and 4 trials at once; measured against the
packing rule and the cost model.

Each trial is a separate process (as Ray's fractional packing runs them) that trains the TMFT loop
(`trainables.training.pair_training.PairFineTuning`, the one the sweeps run) on the real STS-B training
pairs for `--epochs`, evaluating dev and test after every epoch, on a model built from its config
with random weights (speed does not depend on the values):

- bert-base: BERT-base's shape (12 layers, 768 wide, 110M parameters);
- electra-base-generator: google/electra-base-generator's (12 layers, 256 wide, 768-d embeddings).

The trials of one batch load, build and tokenise first, then start together; printed per (model,
precision, trials at once): trials per hour (trials x 3600 / the batch's wall time), the speed-up
over one fp32 trial alone, GPU memory per trial (the device's peak use during the batch over the
trials, CUDA contexts included) against the packing rule's estimate (trainables/encoders/cost.py,
sweeps/engine/packing.py), and for a trial alone its GPU-seconds against the cost model's estimate
at `--gpu-tflops`, with the effective throughput that would have predicted it, and its CPU-seconds
(close to its GPU-seconds: the trial is bound by the CPU launching kernels, not by the GPU). Worker start-up
(imports, model, data) is printed apart: with actor reuse a sweep pays it once per worker.

Needs torch and transformers only (no Ray, no MLflow), the STS-B data (`--data-dir`) and a
WordPiece tokenizer of BERT's uncased vocabulary (`--tokenizer`; default: the installed
all-MiniLM-L6-v2, `embsweep-assets install sentence-transformers/all-MiniLM-L6-v2`).

    python benchmarks/gpu.py                                    # on a GPU machine
    python benchmarks/gpu.py --smoke                            # a tiny model, runs on the CPU
    python benchmarks/gpu.py --out results.json --concurrency 1,2,4,8
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results_file  # noqa: E402

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL_SHAPES = {  # the public checkpoints' configs, with the tokenizer's vocabulary size
    "bert-base": dict(
        kind="bert", hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072
    ),
    "electra-base-generator": dict(
        kind="electra",
        embedding_size=768,
        hidden_size=256,
        num_hidden_layers=12,
        num_attention_heads=4,
        intermediate_size=1024,
    ),
    "tiny": dict(kind="bert", hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
}


def weights_config(folder: str):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(folder)


def model_config(name: str, vocab_size: int):
    from transformers import BertConfig, ElectraConfig

    shape = dict(MODEL_SHAPES[name])
    kind = shape.pop("kind")
    return (BertConfig if kind == "bert" else ElectraConfig)(
        vocab_size=vocab_size, max_position_embeddings=512, **shape
    )


# --- one trial, in its own process ------------------------------------------------------------
def worker(spec_path: str) -> None:
    started = time.time()
    from trainables.encoders.cost import CUDA_ALLOCATOR_ENV

    os.environ.update(CUDA_ALLOCATOR_ENV)  # as every sweep trial (sweeps/engine/runner.py)
    import torch
    from transformers import AutoModel

    from trainables.encoders.loading import count_parameters, truncate
    from trainables.training.pair_training import PairFineTuning

    spec = json.loads(Path(spec_path).read_text())
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.set_num_threads(spec["threads"])  # the machine's cores shared out, as Ray's CPUs per trial
    torch.manual_seed(spec["seed"])
    with open(spec["task"], "rb") as handle:
        task = pickle.load(handle)
    if spec.get("weights"):  # a real checkpoint (scores comparable across precisions)
        full = AutoModel.from_pretrained(spec["weights"], dtype=torch.float32)
    else:
        full = AutoModel.from_config(model_config(spec["model"], spec["vocab_size"]))
    encoder = truncate(full, spec["layer"])
    trial = PairFineTuning()
    config = {
        "seed": spec["seed"],
        "batch_size": spec["batch_size"],
        "eval_batch_size": 64,
        "lr": 2e-5,
        "weight_decay": 0.01,
        "warmup_ratio": 0.1,
        "precision": spec["precision"],
    }
    trial.init_fine_tuning(encoder, task, config, device, spec["epochs"])
    if device.type == "cuda":
        torch.cuda.synchronize()
    ready = time.time()
    Path(spec["ready"]).write_text("")
    while not Path(spec["go"]).exists():
        time.sleep(0.005)
    go, cpu_started = time.time(), time.process_time()
    train_s = eval_s = 0.0
    for epoch in range(1, spec["epochs"] + 1):
        t0 = time.perf_counter()
        trial.train_epoch(epoch)  # reads its loss once, at the end: a synchronisation
        t1 = time.perf_counter()
        scores = trial.evaluate()
        eval_s += time.perf_counter() - t1
        train_s += t1 - t0
    result = {
        "startup_s": ready - started,
        "go": go,
        "end": time.time(),
        "train_s": train_s,
        "eval_s": eval_s,
        "cpu_s": time.process_time() - cpu_started,
        "precision_used": trial.precision.name,
        "params": count_parameters(trial.model),
        "dev_spearman": scores.get("dev_spearman"),
        "test_spearman": scores.get("test_spearman"),
        "device": str(device),
    }
    if device.type == "cuda":
        result.update(peak_allocated=torch.cuda.max_memory_allocated(), peak_reserved=torch.cuda.max_memory_reserved())
    Path(spec["result"]).write_text(json.dumps(result))


# --- the driver -------------------------------------------------------------------------------
class DeviceMemory:
    """Peak device-wide memory in use while a batch runs (every process's), sampled every 20 ms."""

    def __init__(self):
        import torch

        self.torch, self.cuda = torch, torch.cuda.is_available()
        self.peak, self._stop = 0, threading.Event()

    def used(self) -> int:
        if not self.cuda:
            return 0
        free, total = self.torch.cuda.mem_get_info()
        return total - free

    def __enter__(self):
        self.baseline = self.used()
        self.peak = self.baseline
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.used())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def cuda_context_bytes() -> int | None:
    """Device memory one process's CUDA context takes (nvidia-smi before and after creating this
    process's), or None without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return None

    def used() -> int:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "--id=0"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return int(out.split()[0]) * 2**20

    before = used()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    return used() - before


def run_batch(name: str, spec: dict, n: int, folder: Path) -> dict:
    """n trials of `spec` at once; their results and the batch's figures."""
    batch = folder / f"{name}-{spec['precision']}-{n}"
    batch.mkdir()
    go = batch / "go"
    processes = []
    for index in range(n):
        own = {
            **spec,
            "seed": index,
            "threads": max(1, (os.cpu_count() or 1) // n),
            "go": str(go),
            "ready": str(batch / f"ready-{index}"),
            "result": str(batch / f"result-{index}.json"),
        }
        (batch / f"spec-{index}.json").write_text(json.dumps(own))
        processes.append(subprocess.Popen([sys.executable, __file__, "--worker", str(batch / f"spec-{index}.json")]))
    while not all((batch / f"ready-{i}").exists() for i in range(n)):
        if any(p.poll() not in (None, 0) for p in processes):
            raise SystemExit(f"a worker of {batch.name} failed before starting")
        time.sleep(0.01)
    with DeviceMemory() as memory:
        go.write_text("")
        codes = [p.wait() for p in processes]
    if any(codes):
        raise SystemExit(f"a worker of {batch.name} failed (exit codes {codes})")
    results = [json.loads((batch / f"result-{i}.json").read_text()) for i in range(n)]
    wall = max(r["end"] for r in results) - min(r["go"] for r in results)
    return {
        "model": name,
        "precision": spec["precision"],
        "precision_used": results[0]["precision_used"],
        "trials": n,
        "wall_s": wall,
        "trials_per_hour": n * 3600 / wall,
        "startup_s": max(r["startup_s"] for r in results),
        "train_s": results[0]["train_s"],
        "eval_s": results[0]["eval_s"],
        "params": results[0]["params"],
        "memory_per_trial": (memory.peak - memory.baseline) / n if memory.cuda else None,
        "peak_reserved": max(r.get("peak_reserved", 0) for r in results),
        "peak_allocated": max(r.get("peak_allocated", 0) for r in results),
        "cpu_s": results[0]["cpu_s"],
        "device": results[0]["device"],
        "dev_spearman": [r["dev_spearman"] for r in results],
        "test_spearman": [r["test_spearman"] for r in results],
    }


def tokenised_stsb(tokenizer_dir: str, data_dir: str, train_pairs: int | None, eval_pairs: int | None):
    from trainables.training.tokenized import load_task, subset, tokenize_task

    examples, checksums = load_task("stsb", data_dir)
    if eval_pairs:
        examples = {s: rows if s == "train" else subset(rows, eval_pairs) for s, rows in examples.items()}
    return tokenize_task("stsb", tokenizer_dir, examples, checksums, train_pairs)


def estimates(
    name: str,
    task,
    vocab_size: int,
    layer: int,
    batch_size: int,
    epochs: int,
    gpu_tflops: float | None,
    precision: str,
    weights: str | None = None,
) -> dict:
    """The cost model's memory and seconds for the trial, and its FLOPs."""
    from trainables.encoders import cost as encoder_cost

    config = weights_config(weights) if weights else model_config(name, vocab_size)
    memory, seconds, _ = encoder_cost.pair_task_cost(config, task, layer, batch_size, epochs, gpu_tflops, precision)
    shape = encoder_cost.shape_from_config(config, layer, batch_size, 1)
    tokens = {s: sum(map(len, task.splits[s].s1)) + sum(map(len, task.splits[s].s2)) for s in ("train", "dev", "test")}
    flops = epochs * shape.layer_params * (6 * tokens["train"] + 2 * (tokens["dev"] + tokens["test"]))
    return {"memory": memory, "seconds": seconds, "flops": flops}


def default_tokenizer() -> str:
    from trainables.core.paths import models_dir

    return str(models_dir() / "sentence-transformers" / "all-MiniLM-L6-v2")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="bert-base,electra-base-generator", help=f"from {', '.join(MODEL_SHAPES)}")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--concurrency", default="1,2,4", help="trials sharing the GPU at once")
    parser.add_argument("--layer", type=int, default=None, help="the trials' layer (default: the model's last)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--train-pairs", type=int, default=None, help="default: all 5,749 STS-B training pairs")
    parser.add_argument("--eval-pairs", type=int, default=None, help="default: all dev and test pairs")
    parser.add_argument(
        "--data-dir", default=None, help="folder holding stsbenchmark/ (default: the project's data dir)"
    )
    parser.add_argument("--tokenizer", default=None, help="a BERT-uncased WordPiece tokenizer folder")
    parser.add_argument(
        "--gpu-tflops",
        type=float,
        default=None,
        help="the cost model's throughput to compare against (default: its H100 figure per precision)",
    )
    parser.add_argument("--gpu-memory-gb", type=float, default=None, help="for the packing rule (default: this GPU's)")
    parser.add_argument("--out", default=None, help="also write every figure as JSON here")
    parser.add_argument("--smoke", action="store_true", help="a tiny model, 64 pairs, CPU-able: checks the benchmark")
    parser.add_argument(
        "--weights",
        default=None,
        help="a real model folder instead of --models (its own tokenizer): the seeds' scores then compare precisions",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    results_file.add_flag(parser, "gpu")
    return parser.parse_args()


def prepare(args) -> str:
    """Fill what `--smoke` and `--weights` imply into `args`; the tokenizer folder, refused when it holds none."""
    if args.smoke:
        from trainables.encoders.tiny import build_tiny_model

        args.models, args.train_pairs, args.eval_pairs, args.concurrency = "tiny", 64, 48, "1,2"
        args.tokenizer = str(build_tiny_model("bert", Path(tempfile.mkdtemp()) / "tiny", layers=2, hidden=32))
    if args.weights:
        args.models, args.tokenizer = Path(args.weights).name, args.weights
    tokenizer = args.tokenizer or default_tokenizer()
    if not Path(tokenizer, "vocab.txt").is_file() and not Path(tokenizer, "tokenizer.json").is_file():
        raise SystemExit(
            f"no tokenizer at {tokenizer}: pass --tokenizer DIR (a BERT-uncased WordPiece tokenizer) or run "
            "`embsweep-assets install sentence-transformers/all-MiniLM-L6-v2`"
        )
    return tokenizer


def main() -> None:
    args = parse_args()
    if args.worker:
        return worker(args.worker)

    import torch

    context = cuda_context_bytes()
    from trainables.core.paths import default_data_dir

    data_dir = args.data_dir or str(default_data_dir())
    tokenizer = prepare(args)
    task = tokenised_stsb(tokenizer, data_dir, args.train_pairs, args.eval_pairs)
    from transformers import AutoTokenizer

    vocab_size = len(AutoTokenizer.from_pretrained(tokenizer))
    cuda = torch.cuda.is_available()
    gpu = torch.cuda.get_device_name() if cuda else "none (CPU)"
    gpu_memory_gb = args.gpu_memory_gb or (torch.cuda.get_device_properties(0).total_memory / 1024**3 if cuda else 24.0)
    print(
        f"device: {gpu}; CUDA context per process {context / 2**30 if context else 0:.2f} GiB; torch "
        f"{torch.__version__}; {len(task.splits['train'])} training pairs, "
        f"{len(task.splits['dev'])} dev, {len(task.splits['test'])} test; {args.epochs} epoch(s), batch "
        f"{args.batch_size}",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with open(folder / "task.pkl", "wb") as handle:
            pickle.dump(task, handle)
        for n in [int(n) for n in args.concurrency.split(",")]:  # every configuration alone first
            for name in args.models.split(","):
                for precision in args.precisions.split(","):
                    rows.append(measure(args, name, precision, n, task, vocab_size, folder, context, gpu_memory_gb))
                    if args.out:  # after each row, so that a run cut short still has them
                        Path(args.out).write_text(
                            json.dumps({"device": gpu, "cuda_context": context, "rows": rows}, indent=1)
                        )
    table = report(rows, gpu, args.gpu_tflops)
    if not args.smoke:  # a smoke run checks the benchmark; it measures nothing worth keeping
        results_file.write(
            args.results_json,
            "gpu",
            [
                "model",
                "precision",
                "trials at once",
                "trials/h",
                "x fp32 alone",
                "s/trial",
                "GiB/trial",
                "rule GiB",
                "rule fits",
            ],
            table,
            summary=f"TMFT trials on {gpu}: {args.epochs} epoch(s), batch {args.batch_size}; throughput and memory "
            "against the packing rule (sweeps/engine/packing.py) and the cost model.",
        )


def measure(args, name, precision, n, task, vocab_size, folder, context, gpu_memory_gb) -> dict:
    """One row: `n` trials of model `name` at `precision` at once, their figures beside the cost model's."""
    from sweeps.engine.packing import trials_per_gpu

    depth = weights_config(args.weights).num_hidden_layers if args.weights else MODEL_SHAPES[name]["num_hidden_layers"]
    layer = args.layer if args.layer is not None else depth
    spec = {
        "model": name,
        "vocab_size": vocab_size,
        "layer": layer,
        "precision": precision,
        "weights": args.weights,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "task": str(folder / "task.pkl"),
    }
    row = run_batch(name, spec, n, folder)
    if context is not None:  # sampling can miss a short peak; a process holds at least this
        row["memory_per_trial"] = max(row["memory_per_trial"], row["peak_reserved"] + context)
    row.update(
        layer=layer,
        estimate=estimates(
            name,
            task,
            vocab_size,
            layer,
            args.batch_size,
            args.epochs,
            args.gpu_tflops,
            row["precision_used"],
            args.weights,
        ),
    )
    row["packing_trials_per_gpu"] = trials_per_gpu(row["estimate"]["memory"], gpu_memory_gb)
    print(
        f"  {name} L{layer} {row['precision_used']} x{n}: {row['wall_s']:.1f} s, "
        f"{row['trials_per_hour']:.0f} trials/h, start-up {row['startup_s']:.1f} s; dev/test "
        "Spearman by seed " + ", ".join(f"{d:.2f}/{t:.2f}" for d, t in zip(row["dev_spearman"], row["test_spearman"])),
        flush=True,
    )
    return row


def report(rows: list[dict], gpu: str, gpu_tflops: float) -> list[list]:
    """Prints the tables; returns the first (throughput and memory) as rows for the results file."""
    gib = 1024**3
    table = []
    print(
        f"\n{'model':<24}{'prec':>5}{'at once':>8}{'trials/h':>10}{'x fp32 alone':>13}{'s/trial':>9}"
        f"{'GiB/trial':>10}{'rule GiB':>9}{'rule fits':>10}"
    )
    for row in rows:
        alone = next(
            (r for r in rows if r["model"] == row["model"] and r["precision_used"] == "fp32" and r["trials"] == 1), None
        )
        ratio = row["trials_per_hour"] / alone["trials_per_hour"] if alone else float("nan")
        memory = row["memory_per_trial"]
        print(
            f"{row['model']:<24}{row['precision_used']:>5}{row['trials']:>8}{row['trials_per_hour']:>10.0f}{ratio:>12.2f}x"
            f"{row['wall_s'] / row['trials']:>9.1f}{(memory / gib if memory else float('nan')):>10.2f}"
            f"{row['estimate']['memory'] / gib:>9.2f}{row['packing_trials_per_gpu']:>10}"
        )
        table.append(
            [row["model"], row["precision_used"], row["trials"], f"{row['trials_per_hour']:.0f}", f"{ratio:.2f}x",
             f"{row['wall_s'] / row['trials']:.1f}", f"{memory / gib:.2f}" if memory else "",
             f"{row['estimate']['memory'] / gib:.2f}", row["packing_trials_per_gpu"]]
        )  # fmt: skip
    print(
        f"\none trial alone on {gpu}: measured GPU-seconds (train + dev/test evaluation) against the cost model "
        f"({f'--gpu-tflops {gpu_tflops:g}' if gpu_tflops else 'its H100 figures'})"
    )
    print(
        f"{'model':<24}{'prec':>5}{'measured s':>11}{'CPU s':>7}{'model s':>9}"
        f"{'model/measured':>15}{'effective TFLOP/s':>18}"
    )
    for row in rows:
        if row["trials"] != 1:
            continue
        measured = row["train_s"] + row["eval_s"]
        print(
            f"{row['model']:<24}{row['precision_used']:>5}{measured:>11.1f}{row['cpu_s']:>7.1f}{row['estimate']['seconds']:>9.1f}"
            f"{row['estimate']['seconds'] / measured:>15.2f}{row['estimate']['flops'] / measured / 1e12:>18.1f}"
        )
    return table


if __name__ == "__main__":
    main()
