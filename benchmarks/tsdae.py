"""Training throughput of the TSDAE trial's loop against sentence-transformers' own training loop.

Both train the same model (a fresh copy each) with the same `DenoisingAutoEncoderLoss` (tied
decoder), on the same sentences (the trial's seeded draws, `--steps` x `--batch-size` of them),
with the same deletion noise drawn on every access, batch `--batch-size`, AdamW lr 3e-5 constant,
weight decay 0, clipping 1, for `--steps` optimiser steps, one after the other in this process:

- ours: `trainables.methods.tsdae.method.Training.run` (what `sweeps/tsdae.py` trials and the `tsdae` stage run);
- theirs: `SentenceTransformerTrainer` over a `datasets.Dataset` whose transform noises each
  sentence when it is read (their TSDAE example's way), `max_steps` steps, nothing saved or logged.

Printed: sentences per second of each, over the wall time of the training call of `--steps` steps
(model loading and a first call of `--warmup` steps excluded), and at the margin: the extra
sentences of the long call over its extra seconds against the warm-up call, which leaves out what
a call costs whatever its length (the trainer's set-up and model card); ours / theirs of both (the
goal is >= 1).

    python benchmarks/tsdae.py                                   # a tiny random BERT, on the CPU
    python benchmarks/tsdae.py --model sentence-transformers/all-MiniLM-L6-v2 --steps 200
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results_file  # noqa: E402

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _config(model_path: str, args) -> dict:
    return {
        "objective": "tsdae",
        "seed": 0,
        "_model_path": model_path,
        "pooling": "cls",
        "max_length": args.max_length,
        "noise": "delete",
        "lr": 3e-5,
        "batch_size": args.batch_size,
        "optimizer": "adamw",
        "schedule": "constant",
        "clip": 1.0,
        "dropout": True,
        "decoder_dropout": False,  # as sentence-transformers' v3+ trainer, the other side of the comparison
    }


def ours(model_path: str, sentences: list[str], args, device) -> tuple[float, float]:
    """Seconds of `Training.run(warmup)`, then of `Training.run(steps)`."""
    import torch

    from trainables.methods.tsdae.training import Training

    torch.manual_seed(0)
    training = Training(_config(model_path, args), sentences, device)
    seconds = []
    for steps in (args.warmup, args.steps):
        _sync(device)
        started = time.perf_counter()
        training.run(steps)
        _sync(device)
        seconds.append(time.perf_counter() - started)
    return seconds[0], seconds[1]


def theirs(model_path: str, sentences: list[str], args, device) -> tuple[float, float]:
    """Seconds of `SentenceTransformerTrainer.train()` for `warmup` steps, then for `steps` steps."""
    import numpy as np
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments, losses

    from trainables.methods.tsdae.noise import DELETE_RATIOS, noisy
    from trainables.methods.tsdae.training import sentence_model

    torch.manual_seed(0)
    model = sentence_model(model_path, "cls", args.max_length).to(device)
    loss = losses.DenoisingAutoEncoderLoss(model, tie_encoder_decoder=True)
    rng = np.random.RandomState(0)

    def noise(batch):
        return {"noisy": [noisy(s, DELETE_RATIOS["delete"], rng) for s in batch["text"]], "text": batch["text"]}

    def run(steps: int, out: str) -> float:
        data = Dataset.from_dict({"text": sentences[: steps * args.batch_size]})
        data.set_transform(noise, columns=["text"], output_all_columns=True)
        settings = SentenceTransformerTrainingArguments(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=args.batch_size,
            learning_rate=3e-5,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=1.0,
            save_strategy="no",
            report_to="none",
            logging_strategy="no",
            dataloader_drop_last=True,
            seed=0,
            use_cpu=device.type == "cpu",
            disable_tqdm=True,
        )
        trainer = SentenceTransformerTrainer(model=model, args=settings, train_dataset=data, loss=loss)
        _sync(device)
        started = time.perf_counter()
        trainer.train()
        _sync(device)
        return time.perf_counter() - started

    with tempfile.TemporaryDirectory() as out:
        return run(args.warmup, out), run(args.steps, out)


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default="tiny", help="'tiny' (a random 4-layer BERT built here), a hub id or a local folder"
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=5, help="steps of each loop run before the timed ones")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--order", default="ours,theirs", help="which loop runs first")
    parser.add_argument("--data-dir", default=None)
    results_file.add_flag(parser, "tsdae")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("accelerate") is None:
        parser.error("sentence-transformers' trainer needs accelerate: pip install -e '.[benchmark]'")

    import torch

    from trainables.core.paths import default_data_dir
    from trainables.encoders.loading import resolve_model
    from trainables.methods.tsdae.checks import read_corpus
    from trainables.training.device import pick_device

    data_dir = args.data_dir or default_data_dir()
    corpus, _, _ = read_corpus("wiki", data_dir, None)
    generator = torch.Generator().manual_seed(0)
    draws = torch.randint(len(corpus), ((args.steps + args.warmup) * args.batch_size,), generator=generator).tolist()
    sentences = [corpus[i] for i in draws]
    device = pick_device()
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "tiny":
            from trainables.encoders.tiny import build_tiny_model

            model_path = str(build_tiny_model("bert", Path(tmp) / "tiny-bert", sentences=corpus[:2000]))
        else:
            model_path = str(resolve_model(args.model, None))
        seconds = {}
        for name in args.order.split(","):
            seconds[name] = (ours if name == "ours" else theirs)(model_path, sentences, args, device)
    rate = {name: args.steps * args.batch_size / long for name, (_, long) in seconds.items()}
    margin = {
        name: (args.steps - args.warmup) * args.batch_size / max(1e-9, long - short)
        for name, (short, long) in seconds.items()
    }
    print(
        f"model {args.model}, device {device}, {torch.get_num_threads()} threads, {args.steps} steps of batch "
        f"{args.batch_size} (warm-up call {args.warmup} steps)"
    )
    for name in ("ours", "theirs"):
        short, long = seconds[name]
        print(
            f"  {name:6s}: {long:7.1f} s ({short:.1f} s warm-up call)  {rate[name]:7.1f} sentences/s, "
            f"{margin[name]:7.1f} at the margin"
        )
    print(
        f"  ours / theirs: {rate['ours'] / rate['theirs']:.2f} whole call, "
        f"{margin['ours'] / margin['theirs']:.2f} at the margin (goal >= 1)"
    )
    rows = [[n, f"{seconds[n][1]:.1f}", f"{rate[n]:.1f}", f"{margin[n]:.1f}"] for n in ("ours", "theirs")]
    rows.append(
        ["ours / theirs", "", f"{rate['ours'] / rate['theirs']:.2f}", f"{margin['ours'] / margin['theirs']:.2f}"]
    )
    results_file.write(
        args.results_json,
        "tsdae",
        ["loop", "seconds", "sentences/s (whole call)", "sentences/s (at the margin)"],
        rows,
        summary=f"{args.model}, {device}, {torch.get_num_threads()} threads, {args.steps} steps of batch "
        f"{args.batch_size}, run in the order {args.order}; the goal is ours / theirs >= 1.",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
