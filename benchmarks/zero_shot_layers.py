"""A zero-shot layer sweep: one forward pass for every layer against one forward per layer.

Every variant embeds the unique sentences of the evaluation suite (STS-B test, STS12-14, SICK-R
test by default) with mean pooling at every layer 0..L of one model, in this process, and scores
them:
- one pass: what `sweeps/evaluate.py --layers all` runs (`trainables.evaluation.zero_shot.pooled_layers`);
- full forward per layer: the authors' way (the whole model, `hidden_states[l]`), once per layer;
- truncated forward per layer: the model physically cut to l layers, once per layer.
Printed: each variant's wall and CPU seconds (CPU time is the steadier figure on a shared
machine), the speed-ups of one pass over both baselines, and the largest score difference between
the variants (must be ~0). Against a full forward per layer the goal is close to L + 1; against a
truncated forward per layer the arithmetic allows about (L + 1) / 2 (those forwards run 0, 1, ..
L layers: L (L + 1) / 2 layers in all, against L for one pass), a little more since each of them
also embeds and tokenises.

    python benchmarks/zero_shot_layers.py              # all-MiniLM-L6-v2 (embsweep-assets install ...)
    python benchmarks/zero_shot_layers.py --model PATH --sets stsb,sts12
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results_file  # noqa: E402
from trainables.core.paths import default_data_dir  # noqa: E402
from trainables.encoders.loading import resolve_model, truncate  # noqa: E402
from trainables.evaluation.sets import load_suite  # noqa: E402
from trainables.evaluation.zero_shot import default_max_length, encode_sentences, pooled_layers  # noqa: E402


def timed(name: str, work):
    """(work(), (wall seconds, CPU seconds of this process)), printed as soon as it is done."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    seconds = (time.perf_counter() - wall, time.process_time() - cpu)
    print(f"{name}: {seconds[0]:.1f} s wall, {seconds[1]:.1f} s CPU", flush=True)
    return result, seconds


def speed_up(baseline: tuple[float, float], ours: tuple[float, float]) -> str:
    return f"{baseline[0] / ours[0]:.2f}x wall, {baseline[1] / ours[1]:.2f}x CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--sets", default="stsb,sts12,sts13,sts14,sickr")
    parser.add_argument("--data-dir", default=str(default_data_dir()))
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    results_file.add_flag(parser, "zero_shot_layers")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from transformers import AutoModel, AutoTokenizer

    path = resolve_model(args.model)
    model, tokenizer = AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    max_length = default_max_length(path)
    suite = load_suite(args.sets.split(","), args.data_dir)
    layers = list(range(model.config.num_hidden_layers + 1))
    print(
        f"model {args.model} (layers 0..{layers[-1]}), {len(suite.sentences)} unique sentences of {args.sets}, "
        f"batch {args.batch_size}, max length {max_length}, {args.threads} threads\n"
    )

    one_pass, one_pass_time = timed(
        "one forward for all layers",
        lambda: pooled_layers(
            model, tokenizer, suite.sentences, layers, ["mean"], batch_size=args.batch_size, max_length=max_length
        ),
    )
    full, full_time = timed(
        "a full forward per layer (the authors' way)",
        lambda: {
            layer: pooled_layers(
                model,
                tokenizer,
                suite.sentences,
                [layers[-1], layer],
                ["mean"],
                batch_size=args.batch_size,
                max_length=max_length,
            )[(layer, "mean")]
            for layer in layers
        },
    )
    truncated, truncated_time = timed(
        "a truncated forward per layer",
        lambda: {
            layer: encode_sentences(
                truncate(model, layer),
                tokenizer,
                suite.sentences,
                "mean",
                batch_size=args.batch_size,
                max_length=max_length,
            )
            for layer in layers
        },
    )

    print(f"\n{'layer':>5} {'mean Spearman':>14} " + " ".join(f"{name + ' rho':>12}" for name in suite.sets))
    gap = 0.0
    for layer in layers:
        ours = suite.score(one_pass[(layer, "mean")])
        for baseline in (full[layer], truncated[layer]):
            gap = max(gap, max(abs(ours[k] - v) for k, v in suite.score(baseline).items()))
        print(
            f"{layer:>5} {ours['mean_spearman']:>14.2f} "
            + " ".join(f"{ours[name + '_spearman']:>12.2f}" for name in suite.sets)
        )
    print(
        f"\nspeed-up of one pass over a full forward per layer: {speed_up(full_time, one_pass_time)} "
        f"(goal: close to {len(layers)}x)"
    )
    print(
        f"speed-up of one pass over a truncated forward per layer: {speed_up(truncated_time, one_pass_time)} "
        f"(by the arithmetic above: about {len(layers) / 2:.1f}x)"
    )
    print(f"largest score difference between the variants: {gap:.4f} points")
    results_file.write(
        args.results_json,
        "zero_shot_layers",
        ["figure", "value"],
        [
            ["speed-up of one pass over a full forward per layer", speed_up(full_time, one_pass_time)],
            ["speed-up of one pass over a truncated forward per layer", speed_up(truncated_time, one_pass_time)],
            ["largest score difference between the variants", f"{gap:.4f} points"],
        ],
        summary=f"{args.model}: every layer 0..{layers[-1]} scored zero-shot (mean pooling) on {args.sets}.",
    )


if __name__ == "__main__":
    main()
