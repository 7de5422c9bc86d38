"""An UNSUP epoch over cached source word vectors against one that re-encodes the sources first, in one run.

Both ways run the same UNSUP trial (the trial's own code, without Ray) for E epochs:
- cached: the sources' `token-embeddings` stages are computed once (before timing) and every
  epoch reads them memory-mapped (what `sweeps/meta_embeddings.py` does);
- re-encoded: before every epoch, each source encoder encodes the sentences the epoch reads
  (the STS-B train pairs' and dev's) again, and the epoch reads those.
Printed: seconds per epoch each way (the re-encoded way split into encoding and the epoch) and
their ratio (the goal is at least 10x).

    python benchmarks/meta_embeddings.py                         # the smoke test's tiny sources (32-d, 48-d)
    python benchmarks/meta_embeddings.py \
        --sources sentence-transformers/all-MiniLM-L6-v2,sentence-transformers/all-mpnet-base-v2 \
        --sets stsb,sts13 --max-train-samples 1000 --storage-path runs     # reusing a sweep's stages
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from benchmarks import results_file  # noqa: E402
from sweeps.engine.runner import parser_for  # noqa: E402
from trainables.core.method import PlanContext  # noqa: E402
from trainables.methods.meta_embeddings import token_embeddings as te  # noqa: E402
from trainables.methods.meta_embeddings.method import DEFAULT_SOURCES, MetaEmbeddings
from trainables.methods.meta_embeddings.trainable import MetaEmbeddingTrainable
from trainables.stages.upstream import execute  # noqa: E402


def reencode(spec: dict, rows: np.ndarray, sentences: list[str], out: Path) -> None:
    """A stage of the same layout holding only `rows`' word vectors (others empty), encoded now."""
    import torch
    from transformers import AutoTokenizer

    from trainables.encoders.loading import load_pretrained

    model = load_pretrained(spec["model_path"])
    tokenizer = AutoTokenizer.from_pretrained(spec["model_path"])
    encoded = te.encode(
        model,
        tokenizer,
        [sentences[r] for r in rows],
        spec["config"]["max_length"],
        spec["config"]["batch_size"],
        torch.device("cpu"),
    )
    width = encoded[0].shape[1]
    words = [np.zeros((0, width), np.float32)] * len(sentences)
    for r, vectors in zip(rows, encoded):
        words[r] = vectors
    out.mkdir(parents=True, exist_ok=True)
    te.save(out, words)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sources", default="", help="comma-separated encoders; default: the smoke test's tiny random sources"
    )
    parser.add_argument("--variant", default="authors_code", choices=("paper", "authors_code"))
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-train-samples", type=int, default=2000, help="STS-B train pairs an epoch trains on")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--sets", default="stsb", help="the suite the stages hold (as the sweep's --sets)")
    parser.add_argument(
        "--storage-path", default=None, help="a sweep's storage path: its stage store's stages are reused"
    )
    results_file.add_flag(parser, "meta_embeddings")
    args = parser.parse_args(argv)
    storage = args.storage_path or tempfile.mkdtemp(prefix="meta-bench-")
    work = Path(tempfile.mkdtemp(prefix="meta-bench-"))
    smoke = not args.sources
    flags = [
        "--sources",
        args.sources or DEFAULT_SOURCES,
        "--methods",
        "unsup",
        "--variants",
        args.variant,
        "--seeds",
        "0",
        "--sets",
        args.sets,
        "--max-train-samples",
        str(args.max_train_samples),
        "--width",
        str(args.width),
        "--storage-path",
        storage,
    ]
    sweep_args = parser_for("meta-embeddings").parse_args(flags)
    sweep_args.smoke_test = smoke
    plan = MetaEmbeddings.plan(sweep_args, PlanContext(storage, f"sqlite:///{storage}/mlflow.db", smoke_test=smoke))
    started = time.perf_counter()
    for spec in plan.stages.values():
        execute(spec)
    print(f"stages (once, every sentence of the sweep; 0 s if reused): {time.perf_counter() - started:.1f} s")
    (config,) = plan.configs
    config = {**config, "epochs": args.epochs, "patience": args.epochs + 1}
    specs = [plan.stages[key] for key in config["stage_key"]]
    sentences = te.stage_sentences(specs[0]["config"]["sets"], specs[0]["data_dir"], args.max_train_samples)
    read = np.unique(np.concatenate([*plan.data.train[:2], *plan.data.dev[:2]]))
    print(
        f"{len(specs)} sources; an epoch trains on {len(plan.data.train[0])} pairs and scores {len(plan.data.dev[0])} "
        f"dev pairs: {len(read)} sentences\n"
    )

    trial = MetaEmbeddingTrainable.__new__(
        MetaEmbeddingTrainable
    )  # the trial's own code, without Ray's actor lifecycle
    trial.setup(config, data=plan.data)
    cached = []
    for _ in range(args.epochs):
        begin = time.perf_counter()
        trial.step()
        cached.append(time.perf_counter() - begin)
    trial = MetaEmbeddingTrainable.__new__(MetaEmbeddingTrainable)
    trial.setup(config, data=plan.data)
    encoding, epochs = [], []
    for epoch in range(args.epochs):
        begin = time.perf_counter()
        folders = [work / f"reencoded-{epoch}-{i}" for i in range(len(specs))]
        for spec, folder in zip(specs, folders):
            reencode(spec, read, sentences, folder)
        trial.sources = [te.load(folder) for folder in folders]
        encoding.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        trial.step()
        epochs.append(time.perf_counter() - begin)
    for epoch in range(args.epochs):
        print(
            f"epoch {epoch + 1}: cached {cached[epoch]:.2f} s; re-encoded {encoding[epoch] + epochs[epoch]:.2f} s "
            f"(encoding {encoding[epoch]:.2f} s + epoch {epochs[epoch]:.2f} s)"
        )
    ratio = (np.mean(encoding) + np.mean(epochs)) / np.mean(cached)
    print(
        f"\nmean epoch: cached {np.mean(cached):.2f} s, re-encoding {np.mean(encoding) + np.mean(epochs):.2f} s: "
        f"{ratio:.1f}x (goal >= 10x)"
    )
    results_file.write(
        args.results_json,
        "meta_embeddings",
        ["epoch", "cached", "re-encoded (encoding + epoch)"],
        [
            *[
                [e + 1, f"{cached[e]:.2f} s", f"{encoding[e] + epochs[e]:.2f} s ({encoding[e]:.2f} + {epochs[e]:.2f})"]
                for e in range(args.epochs)
            ],
            ["mean, re-encoded / cached", "", f"**{ratio:.1f}x** (goal >= 10x)"],
        ],
        summary=f"An UNSUP epoch over the cached source word vectors against one that re-encodes the sources first, "
        f"{args.epochs} epochs, in this process.",
    )


if __name__ == "__main__":
    main()
