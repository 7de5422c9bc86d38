"""Each speed lever of one TMFT trial on its own, against the trial as it ran before the levers.

One trial at the model's last layer (where truncation saves nothing), trained for one epoch on
STS-B training pairs and scored on the full dev and test sets, through the loop the sweeps run
(`trainables.training.pair_training.PairFineTuning`). Every variant starts from the same weights
and seed. Printed per variant: training seconds, evaluation seconds, their sum, the ratio to the
baseline, and the test Spearman (levers that keep the batches must keep it within seed noise):

- baseline: each batch encoded whole, evaluation in batches of pairs sorted by pair length (both
  sides padded together), as the project did before the levers;
- distinct eval: evaluation encodes each distinct sentence once, in length-sorted batches;
- chunked: the default, that evaluation plus each training batch in length-sorted chunks
  (`--forward-chunk`, auto: 16 on the CPU);
- grouped: the default plus `--length-grouped` (changes the batches);
- compiled: the default with `torch.compile` of the encoder (dynamic shapes; `reduce-overhead`,
  CUDA graphs, on a GPU), its compile time counted in the trial.

Needs torch and transformers only, so it also runs on a GPU machine without Ray or MLflow.

    python benchmarks/trial_levers.py                          # all-MiniLM-L6-v2, 1 CPU thread
    python benchmarks/trial_levers.py --threads 2 --variants baseline,chunked,compiled
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks import results_file  # noqa: E402
from trainables.core.paths import default_data_dir  # noqa: E402
from trainables.encoders import loading  # noqa: E402
from trainables.training.batches import pad  # noqa: E402
from trainables.training.pair_training import PairFineTuning  # noqa: E402
from trainables.training.tokenized import load_task, tokenize_task  # noqa: E402

VARIANTS = {  # name: (forward_chunk, length_grouped, distinct-sentence evaluation, compiled)
    "baseline": (0, False, False, False),
    "distinct eval": (0, False, True, False),
    "chunked": ("auto", False, True, False),
    "grouped": ("auto", True, True, False),
    "compiled": ("auto", False, True, True),
}


class PairBatchEvaluation(PairFineTuning):
    """The evaluation the project ran before: batches of pairs sorted by pair length, both sides padded together."""

    @torch.no_grad()
    def predict(self, split) -> np.ndarray:
        self.model.eval()
        order = sorted(range(len(split)), key=split.pair_lengths().__getitem__)
        rows = [0.0] * len(split)
        for start in range(0, len(order), self.eval_batch_size):
            batch = order[start : start + self.eval_batch_size]
            ids, mask = pad([split.s1[i] for i in batch] + [split.s2[i] for i in batch], self.task.pad_id)
            with self.precision.autocast():
                embeddings = loading.encode(self.model, ids.to(self.device), mask.to(self.device)).float()
            outputs = self.task_def.outputs(embeddings[: len(batch)], embeddings[len(batch) :], self.head)
            for index, value in zip(batch, outputs.tolist()):
                rows[index] = value
        return np.asarray(rows)


def run_variant(name: str, task, full_model, layer: int, device: str, args) -> dict:
    chunk, grouped, distinct, compiled = VARIANTS[name]
    torch.manual_seed(args.seed)
    trial = PairFineTuning() if distinct else PairBatchEvaluation()
    config = {
        "seed": args.seed,
        "batch_size": 32,
        "lr": 2e-5,
        "weight_decay": 0.01,
        "warmup_ratio": 0.1,
        "forward_chunk": chunk,
        "length_grouped": grouped,
        "precision": args.precision,
    }
    trial.init_fine_tuning(loading.truncate(full_model, layer), task, config, device, 1)
    if compiled:
        mode = "reduce-overhead" if trial.device.type == "cuda" else "default"
        trial.model = torch.compile(trial.model, dynamic=True, mode=mode)
    started = time.perf_counter()
    trial.train_epoch(1)
    _synchronize(device)
    trained = time.perf_counter()
    scores = trial.evaluate(("dev", "test"))
    _synchronize(device)
    return {"train": trained - started, "eval": time.perf_counter() - trained, "test": scores["test_spearman"]}


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--data-dir", default=str(default_data_dir()))
    parser.add_argument("--train-samples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (a sweep gives each trial one)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", default="fp32", help="fp32, tf32, bf16 (trainables/encoders/precision.py)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    results_file.add_flag(parser, "trial_levers")
    args = parser.parse_args(argv)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not names or set(names) - set(VARIANTS):
        parser.error(f"--variants takes some of {', '.join(VARIANTS)}, got {args.variants!r}")
    torch.set_num_threads(args.threads)

    path = loading.resolve_model(args.model)
    layer = loading.model_depth(loading.load_config(path))
    examples, checksums = load_task("stsb", args.data_dir)
    task = tokenize_task("stsb", path, examples, checksums, args.train_samples)
    full_model = loading.load_pretrained(path)
    print(
        f"{args.model} at layer {layer}, one epoch on {args.train_samples} STS-B pairs, full dev and test, "
        f"{args.device}, {args.threads} CPU thread(s), {args.precision}\n"
    )
    results, rows = {}, []
    print(f"{'variant':<14} {'train s':>8} {'eval s':>8} {'total s':>8} {'ratio':>7} {'test rho':>9}")
    for name in names:
        results[name] = run_variant(name, task, full_model, layer, args.device, args)
        r = results[name]
        base = results.get("baseline")
        ratio = f"{(base['train'] + base['eval']) / (r['train'] + r['eval']):>6.2f}x" if base else "      -"
        print(
            f"{name:<14} {r['train']:>8.1f} {r['eval']:>8.1f} {r['train'] + r['eval']:>8.1f} {ratio} {r['test']:>9.2f}",
            flush=True,
        )
        rows.append(
            [
                name,
                f"{r['train']:.1f}",
                f"{r['eval']:.1f}",
                f"{r['train'] + r['eval']:.1f}",
                ratio.strip(),
                f"{r['test']:.2f}",
            ]
        )
    results_file.write(
        args.results_json,
        "trial_levers",
        ["variant", "train s", "eval s", "total s", "against the baseline", "test Spearman"],
        rows,
        summary=f"{args.model} at layer {layer}, one epoch on {args.train_samples} STS-B pairs, full dev and test, "
        f"{args.device}, {args.threads} CPU thread(s), {args.precision}; the baseline is the trial as it ran before.",
    )


if __name__ == "__main__":
    main()
