"""Evaluation in bfloat16 on the CPU against fp32: how far each layer's dev and test score moves.

Reads a finished TMFT sweep (its trials' `best/` weights, e.g. the README's first command), builds each
trial's model in this process, and scores its dev and test sets twice with the same weights: the
trial's fp32 forward, then the same forward under bf16 autocast (`--precision bf16`'s evaluation).
Printed: per layer the fp32 and bf16 dev and test Spearman (x100, as the runs log it), their differences and the seconds
each evaluation took, then the largest difference and the median time of one forward of 128 dev
sentences in each precision (alternated). The rule of the project: evaluation in bf16 only
if every layer's dev and test score moves by at most 0.02.

    python benchmarks/bf16_eval.py --sweep runs/electra_layers-<time>
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from benchmarks import results_file  # noqa: E402
from benchmarks.truncation import make_trial  # noqa: E402
from trainables.core.paths import default_data_dir  # noqa: E402
from trainables.encoders.loading import resolve_model  # noqa: E402
from trainables.encoders.precision import resolve  # noqa: E402
from trainables.methods.tmft.trainable import TMFTData  # noqa: E402
from trainables.training.pair_training import PairFineTuning  # noqa: E402
from trainables.training.tokenized import load_task, tokenize_task  # noqa: E402

LIMIT = 0.02


def best_folders(sweep: Path) -> dict[int, tuple[dict, Path]]:
    """{layer: (trial config, its last checkpoint's best/)} of a finished sweep's trials."""
    out = {}
    for trial in sorted(p for p in sweep.iterdir() if p.is_dir()):
        params = json.loads((trial / "params.json").read_text())
        checkpoints = sorted(trial.glob("checkpoint_*/best"), key=lambda p: int(p.parent.name.rsplit("_", 1)[1]))
        if checkpoints:
            out[int(params["layer"])] = (params, checkpoints[-1])
    return out


def scores(trial) -> tuple[dict, float]:
    started = time.perf_counter()
    metrics = PairFineTuning.evaluate(trial, ("dev", "test"))
    return {k: metrics[f"{k}_spearman"] for k in ("dev", "test")}, time.perf_counter() - started


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", required=True, help="a finished TMFT sweep's folder (it holds sweep.json)")
    parser.add_argument("--data-dir", default=str(default_data_dir()))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a trial's one CPU by default)")
    parser.add_argument("--repeats", type=int, default=7, help="forwards timed in each precision")
    parser.add_argument("--timing-only", action="store_true", help="only the forward times, no scores")
    results_file.add_flag(parser, "bf16_eval")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    trials = best_folders(Path(args.sweep))
    model = next(iter(trials.values()))[0]["model"]
    examples, checksums = load_task("stsb", args.data_dir)
    data = TMFTData({model: tokenize_task("stsb", resolve_model(model), examples, checksums, None)})
    from safetensors.torch import load_file

    print(
        f"{'layer':>5} {'dev fp32':>9} {'dev bf16':>9} {'Δ':>7} {'test fp32':>10} {'test bf16':>10} {'Δ':>7}"
        "  s fp32/bf16"
    )
    largest, rows = 0.0, []
    for layer, (params, best) in sorted(trials.items()):
        trial = make_trial("truncated", data, {**params, "precision": "fp32"})
        weights = load_file(str(best / "model.safetensors"))
        trial.model.load_state_dict({k: v.float() for k, v in weights.items()})
        if args.timing_only:
            continue
        fp32, fp32_s = scores(trial)
        trial.precision = resolve("bf16", torch.device("cpu"))
        bf16, bf16_s = scores(trial)
        moved = {k: bf16[k] - fp32[k] for k in fp32}
        largest = max(largest, *(abs(v) for v in moved.values()))
        print(
            f"{layer:>5} {fp32['dev']:>9.3f} {bf16['dev']:>9.3f} {moved['dev']:>+7.4f} {fp32['test']:>10.3f} "
            f"{bf16['test']:>10.3f} {moved['test']:>+7.4f}  {fp32_s:.1f}/{bf16_s:.1f}",
            flush=True,
        )
        rows.append(
            [layer, f"{fp32['dev']:.3f}", f"{moved['dev']:+.4f}", f"{fp32['test']:.3f}", f"{moved['test']:+.4f}"]
        )
    if not args.timing_only:
        verdict = "within" if largest <= LIMIT else "over"
        print(f"\nlargest move: {largest:.4f} points ({verdict} the {LIMIT} limit)")
    fp32_ms, bf16_ms = forward_times(trial, args.repeats)
    print(
        f"the last layer's forward of 128 dev sentences, median of {args.repeats} alternated: fp32 {fp32_ms:.0f} ms, "
        f"bf16 {bf16_ms:.0f} ms ({fp32_ms / bf16_ms:.2f}x)"
    )
    if rows:
        results_file.write(
            args.results_json,
            "bf16_eval",
            ["layer", "dev fp32", "dev bf16 − fp32", "test fp32", "test bf16 − fp32"],
            rows,
            summary=f"Each best-dev layer scored in fp32 and under bf16 autocast with the same weights "
            f"(Spearman x100); "
            f"largest move {largest:.4f} ({'within' if largest <= LIMIT else 'over'} the {LIMIT} limit). One forward "
            f"of 128 dev sentences: fp32 {fp32_ms:.0f} ms, bf16 {bf16_ms:.0f} ms ({fp32_ms / bf16_ms:.2f}x).",
        )


def forward_times(trial, repeats: int) -> tuple[float, float]:
    """Median ms of one forward of 128 dev sentences in fp32 and under bf16 autocast, alternated (the load
    of a shared machine falls on both alike)."""
    import statistics

    sentences = list(dict.fromkeys(tuple(s) for s in trial.task.splits["dev"].s1))[:128]
    precisions = {"fp32": resolve("fp32", torch.device("cpu")), "bf16": resolve("bf16", torch.device("cpu"))}
    times: dict[str, list[float]] = {name: [] for name in precisions}
    trial.model.eval()
    with torch.no_grad():
        for _ in range(repeats):
            for name, precision in precisions.items():
                trial.precision = precision
                started = time.perf_counter()
                trial._embed(sentences, chunk=128)
                times[name].append(1000 * (time.perf_counter() - started))
    return statistics.median(times["fp32"]), statistics.median(times["bf16"])


if __name__ == "__main__":
    main()
