"""Physical truncation vs. the authors' way (full forward, slice `hidden_states[l]`).

Both variants run the project's own TMFT trial code (trainables/methods/tmft/method.py) in this process, on the
same model, data, seeds and batches. The authors' variant does what their released training script
does: the full model with hidden states on, `hidden_states[l]` mean-pooled, each side of a pair
encoded on its own (padded to its own longest sentence), evaluation in the data's order in batches
of 64 pairs, and, after the last epoch, dev and test scored again with the best-dev model. It
tokenises ahead of time as the project does (their script tokenises every batch as it goes), which
only makes it faster. Printed:

1. training throughput (pairs/s) at layers 1, L/4, L/2, L, and the ratio;
2. a whole layer sweep (layers 0..L, one epoch of training + dev/test evaluation per layer):
   total time of each variant, the ratio, and test Spearman per layer (which must agree within
   seed noise: truncation alone gives identical numbers; length grouping changes the batches).

    python benchmarks/truncation.py                       # all-MiniLM-L6-v2 (embsweep-assets install ...)
    python benchmarks/truncation.py --model PATH --train-samples 1024 --eval-samples 500
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results_file  # noqa: E402
from trainables.core.paths import default_data_dir  # noqa: E402
from trainables.encoders.loading import encode, load_config, model_depth, resolve_model  # noqa: E402
from trainables.methods.tmft.encoder import pretrained
from trainables.methods.tmft.trainable import TMFTData, TMFTTrainable
from trainables.training.pair_training import PairFineTuning
from trainables.training.tokenized import load_task, subset, tokenize_task  # noqa: E402


def _mean_pooled(model, sequences, pad_id):
    from trainables.training.batches import pad

    return encode(model, *pad(sequences, pad_id))


class _Slicing(torch.nn.Module):
    """The authors' encoder: the full model, hidden states on, output = hidden_states[layer]."""

    def __init__(self, full, layer):
        super().__init__()
        self.full, self.layer = full, layer

    def forward(self, input_ids, attention_mask):
        out = self.full(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return type("Out", (), {"last_hidden_state": out.hidden_states[self.layer]})()


def stsb_config(model: str, **settings) -> dict:
    """A TMFT trial config of `model` on STS-B: the paper's optimiser settings, evaluation batches of 64, and
    `settings` (the layer, seed, epochs, ...)."""
    paper = {"lr": 2e-5, "weight_decay": 0.01, "warmup_ratio": 0.1, "eval_batch_size": 64}
    return {"method": "tmft", "task": "stsb", "model": model, **paper, **settings}


def make_trial(variant: str, data, config):
    """A TMFT trial outside Ray: 'authors', 'truncated' or 'truncated+grouped'."""

    class Local(TMFTTrainable):
        def setup(self, cfg):
            super().setup(cfg, data=data)
            if variant == "authors":
                import copy

                full = copy.deepcopy(pretrained(data.tasks[cfg["model"]].model_path))
                full.pooler = None
                self.model = _Slicing(full, int(cfg["layer"])).to(self.device)
                from trainables.training.pair_training import adamw_param_groups

                self.optimizer = torch.optim.AdamW(adamw_param_groups(self.model, cfg["weight_decay"]), lr=cfg["lr"])
                steps = max(1, self.epochs) * -(-len(self.train_data) // self.batch_size)
                from transformers import get_linear_schedule_with_warmup

                self.scheduler = get_linear_schedule_with_warmup(self.optimizer, int(0.1 * steps + 0.999), steps)

        def _embed(self, sequences, chunk=None):
            if variant != "authors":
                return super()._embed(sequences, chunk)
            half = len(sequences) // 2  # the batch's first sides, then its second sides
            return torch.cat((super()._embed(sequences[:half], chunk=0), super()._embed(sequences[half:], chunk=0)))

        def predict(self, split):
            if variant != "authors":
                return super().predict(split)
            self.model.eval()
            scores = []
            started = time.perf_counter()
            with torch.no_grad():
                for start in range(0, len(split), 64):
                    index = range(start, min(start + 64, len(split)))
                    u = _mean_pooled(self.model, [split.s1[i] for i in index], self.task.pad_id)
                    v = _mean_pooled(self.model, [split.s2[i] for i in index], self.task.pad_id)
                    scores += torch.nn.functional.cosine_similarity(u, v).tolist()
            # every side of every pair, as their script encodes them
            self.encode_ms_per_sentence = 1000 * (time.perf_counter() - started) / max(1, 2 * len(split))
            return scores

        def final_metrics(self):
            out = super().final_metrics()
            if variant == "authors":  # their script scores dev and test again with the best-dev model
                self.model.load_state_dict(self.best_weights)
                PairFineTuning.evaluate(self, ("dev", "test"))
            return out

    trial = Local.__new__(Local)  # the trial's own code, without Ray's actor lifecycle
    trial.setup({**config, "length_grouped": variant.endswith("grouped")})
    return trial


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--data-dir", default=str(default_data_dir()))
    parser.add_argument("--train-samples", type=int, default=512)
    parser.add_argument("--eval-samples", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    results_file.add_flag(parser, "truncation")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    path = resolve_model(args.model)
    depth = model_depth(load_config(path))
    examples, checksums = load_task("stsb", args.data_dir)
    examples = {s: (r if s == "train" else subset(r, args.eval_samples)) for s, r in examples.items()}
    data = TMFTData({args.model: tokenize_task("stsb", path, examples, checksums, args.train_samples)})
    base = stsb_config(args.model, seed=args.seed, epochs=1, batch_size=args.batch_size)
    variants = ("authors", "truncated", "truncated+grouped")
    print(
        f"model {args.model} ({depth} layers), {args.train_samples} train pairs, {args.eval_samples} dev + test pairs, "
        f"batch {args.batch_size}, {args.threads} threads\n"
    )

    print("1. training throughput (pairs/s), one epoch")
    print(f"{'layer':>5} " + " ".join(f"{v:>18}" for v in variants) + f" {'ratio':>8} {'ratio grouped':>14}")
    for layer in sorted({1, max(1, depth // 4), max(1, depth // 2), depth}):
        rates = {}
        for variant in variants:
            trial = make_trial(variant, data, {**base, "layer": layer})
            started = time.perf_counter()
            trial.train_epoch(1)
            rates[variant] = args.train_samples / (time.perf_counter() - started)
        print(
            f"{layer:>5} "
            + " ".join(f"{rates[v]:>18.1f}" for v in variants)
            + f" {rates['truncated'] / rates['authors']:>8.2f} {rates['truncated+grouped'] / rates['authors']:>14.2f}"
        )

    print("\n2. whole layer sweep: layers 0..L, one epoch + dev/test evaluation each")
    totals = {v: 0.0 for v in variants}
    spearman = {v: {} for v in variants}
    for layer in range(depth + 1):
        for variant in variants:
            trial = make_trial(variant, data, {**base, "layer": layer})
            started = time.perf_counter()
            result = trial.step()
            totals[variant] += time.perf_counter() - started
            spearman[variant][layer] = result["test_spearman"]
    print(f"{'layer':>5} " + " ".join(f"{'test rho ' + v:>27}" for v in variants))
    for layer in range(depth + 1):
        print(f"{layer:>5} " + " ".join(f"{spearman[v][layer]:>27.2f}" for v in variants))
    print("\ntotal seconds: " + ", ".join(f"{v} {totals[v]:.1f}" for v in variants))
    print(
        f"sweep speed-up vs authors: truncated {totals['authors'] / totals['truncated']:.2f}x, "
        f"truncated+grouped {totals['authors'] / totals['truncated+grouped']:.2f}x"
    )
    gaps = [abs(spearman["truncated"][l] - spearman["authors"][l]) for l in spearman["authors"]]
    gaps_grouped = [abs(spearman["truncated+grouped"][l] - spearman["authors"][l]) for l in spearman["authors"]]
    print(
        f"test Spearman |difference| to authors: truncated max {max(gaps):.3f}, "
        f"grouped mean {statistics.mean(gaps_grouped):.2f} / max {max(gaps_grouped):.2f} points"
    )
    results_file.write(
        args.results_json,
        "truncation",
        ["figure", "value"],
        [
            *[[f"whole layer sweep, {v}", f"{totals[v]:.1f} s"] for v in variants],
            ["sweep speed-up against the authors' way, truncated", f"{totals['authors'] / totals['truncated']:.2f}x"],
            ["... truncated and length-grouped", f"{totals['authors'] / totals['truncated+grouped']:.2f}x"],
            ["test Spearman, largest difference to the authors' (truncated)", f"{max(gaps):.3f}"],
            ["... (grouped: mean, largest)", f"{statistics.mean(gaps_grouped):.2f}, {max(gaps_grouped):.2f}"],
        ],
        summary=f"Layers 0..{depth}, one epoch and dev/test evaluation each, in this process.",
    )


if __name__ == "__main__":
    main()
