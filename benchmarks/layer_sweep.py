"""A whole TMFT layer sweep the authors' way against the project's sweep, in one run.

- authors: trials one after another in this process, as their released training script runs
  them (benchmarks/truncation.py's `authors` trial): the full model with hidden states on,
  `hidden_states[l]`, each side of a pair padded on its own, dev after every epoch, then dev
  and test again with the best-dev model;
- project: `sweeps/electra_layers.py` on a local Ray (its start-up included), arms:
  `project` = the sweep's default flags (truncated encoders, costliest trials first, length-sorted
  forward chunks on the CPU, each distinct evaluation sentence encoded once, the test set scored
  once with the best-dev weights); `whole` = the same with `--forward-chunk 0` (each batch encoded
  whole: the chunking lever's own ratio); `grouped` = the default plus `--length-grouped`.

Same model, layers 0..L, seeds, epochs, training subset and full STS-B dev and test. Printed: the
whole-sweep wall time of each and its ratio to the authors'; for each project arm its start-up
(the call to the first trial's start) and its tail (how long one of two slots sat idle while the
last trial finished: what lending that trial the free threads could at most save); per layer the
mean test Spearman at the best dev epoch over seeds with the seed std, and whether each project
arm's mean is within two seed standard deviations of the authors' (the larger of the two stds), with
the difference of the means.

    python benchmarks/layer_sweep.py                                   # all-MiniLM-L6-v2, 3 seeds, 1 epoch, 1,000 pairs
    python benchmarks/layer_sweep.py --model sentence-transformers/all-mpnet-base-v2 --seeds 0,1,2
    python benchmarks/layer_sweep.py --arms project                    # the default arm only
    python benchmarks/layer_sweep.py --seeds 0 --arms project --within 0.8   # one seed: within 0.8 points
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from benchmarks import results_file  # noqa: E402
from benchmarks.truncation import make_trial, stsb_config  # noqa: E402
from trainables.core.paths import default_data_dir  # noqa: E402
from trainables.encoders.loading import load_config, model_depth, resolve_model  # noqa: E402
from trainables.methods.tmft.trainable import TMFTData
from trainables.training.tokenized import load_task, tokenize_task  # noqa: E402


def authors_sweep(args, layers, seeds) -> tuple[float, dict]:
    """(seconds, {(layer, seed): test Spearman at the best dev epoch})."""
    started = time.perf_counter()
    examples, checksums = load_task("stsb", args.data_dir)
    path = resolve_model(args.model)
    data = TMFTData({args.model: tokenize_task("stsb", path, examples, checksums, args.train_samples)})
    base = stsb_config(args.model, epochs=args.epochs, batch_size=32, test_every_epoch=True)
    scores = {}
    for layer in layers:
        for seed in seeds:
            trial = make_trial("authors", data, {**base, "layer": layer, "seed": seed})
            result = {"done": False}
            while not result["done"]:
                result = trial.step()
            scores[(layer, seed)] = result["test_spearman_at_best_dev"]
    return time.perf_counter() - started, scores


ARMS = {"project": [], "whole": ["--forward-chunk", "0"], "grouped": ["--length-grouped"]}


def project_sweep(args, layers, seeds, flags: list[str]) -> tuple[float, dict, dict]:
    """(seconds, {(layer, seed): test Spearman}, {"startup": s, "tail": s})."""
    from mlflow import MlflowClient

    from sweeps.electra_layers import main

    root = Path(tempfile.mkdtemp(prefix="layer-sweep-"))
    argv = [
        "--models",
        args.model,
        "--layers",
        ",".join(map(str, layers)),
        "--seeds",
        ",".join(map(str, seeds)),
        "--epochs",
        str(args.epochs),
        "--max-train-samples",
        str(args.train_samples),
        "--storage-path",
        str(root),
        "--data-dir",
        args.data_dir,
        "--name",
        "bench",
        "--cpus-per-trial",
        str(args.cpus_per_trial),
        *flags,
    ]
    started, started_at = time.perf_counter(), time.time()
    if main(argv) != 0:
        raise SystemExit("the project's sweep failed")
    seconds = time.perf_counter() - started
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    runs = [
        r
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id])
        if "test_spearman_at_best_dev" in r.data.metrics
    ]
    ends = sorted(r.info.end_time / 1000 for r in runs)
    timeline = {
        "startup": min(r.info.start_time / 1000 for r in runs) - started_at,
        "tail": ends[-1] - ends[-2] if len(ends) > 1 else 0.0,
    }
    scores = {
        (int(r.data.params["layer"]), int(r.data.params["seed"])): r.data.metrics["test_spearman_at_best_dev"]
        for r in runs
    }
    return seconds, scores, timeline


def _stats(scores: dict, layer: int, seeds) -> tuple[float, float]:
    values = [scores[(layer, s)] for s in seeds]
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--data-dir", default=str(default_data_dir()))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--train-samples", type=int, default=1000)
    parser.add_argument("--cpus-per-trial", type=float, default=1.0)
    parser.add_argument(
        "--within",
        type=float,
        default=None,
        help="judge each layer by this many test points from the authors' mean (with one seed there is no std)",
    )
    parser.add_argument(
        "--arms",
        default=",".join(ARMS),
        help="the project's arms beside the authors' way: project (default flags), whole (--forward-chunk 0), "
        "grouped (--length-grouped)",
    )
    results_file.add_flag(parser, "layer_sweep")
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or set(arms) - set(ARMS):
        parser.error(f"--arms takes some of {', '.join(ARMS)}, got {args.arms!r}")
    seeds = [int(s) for s in args.seeds.split(",")]
    layers = list(range(model_depth(load_config(resolve_model(args.model))) + 1))
    print(
        f"{args.model}: layers 0..{layers[-1]}, seeds {args.seeds}, {args.epochs} epoch(s) on {args.train_samples} "
        f"training pairs, full STS-B dev and test, {os.cpu_count()} CPUs\n",
        flush=True,
    )
    results = {"authors": authors_sweep(args, layers, seeds)}
    print(f"authors: {results['authors'][0]:.0f} s", flush=True)
    timelines = {}
    for name in arms:
        seconds, scores, timelines[name] = project_sweep(args, layers, seeds, ARMS[name])
        results[name] = seconds, scores
        print(
            f"{name}: {seconds:.0f} s (start-up {timelines[name]['startup']:.1f} s, "
            f"tail {timelines[name]['tail']:.1f} s)",
            flush=True,
        )

    authors_s = results["authors"][0]
    print("\nwhole sweep: " + ", ".join(f"{n} {s:.0f} s ({authors_s / s:.2f}x)" for n, (s, _) in results.items()))
    if "project" in results:
        default_s = results["project"][0]
        print(
            "levers, the default's wall time against each arm's: "
            + ", ".join(
                f"forward chunks {results['whole'][0] / default_s:.2f}x"
                if n == "whole"
                else f"--length-grouped on top {default_s / results['grouped'][0]:.2f}x"
                for n in arms
                if n != "project"
            )
        )
        timeline = timelines["project"]
        print(
            f"the default's start-up is {timeline['startup'] / default_s:.1%} of its sweep; lending the last trial "
            f"the idle slot's threads would save at most {timeline['tail'] / 2:.1f} s "
            f"({timeline['tail'] / 2 / default_s:.1%})"
        )
    print(
        f"\n{'layer':>5}"
        + "".join(f"{n + ' test rho':>26}" for n in results)
        + (
            f"   within {args.within} of the authors' (difference)"
            if args.within
            else "   within 2 std of the authors' (difference)"
        )
    )
    rows = []
    for layer in layers:
        cells, verdicts = [], []
        reference = _stats(results["authors"][1], layer, seeds)
        for name, (_, scores) in results.items():
            mean, std = _stats(scores, layer, seeds)
            cells.append(f"{mean:>17.2f} ± {std:>5.2f} ")
            if name != "authors":
                bound = args.within if args.within else 2 * max(std, reference[1])
                within = abs(mean - reference[0]) <= bound
                verdicts.append(f"{'yes' if within else 'NO'} ({mean - reference[0]:+.2f})")
        print(f"{layer:>5}" + "".join(cells) + "   " + " / ".join(verdicts))
        rows.append([layer, *(cell.strip() for cell in cells), " / ".join(verdicts)])
    within_what = f"within {args.within}" if args.within else "within 2 seed stds"
    results_file.write(
        args.results_json,
        "layer_sweep",
        ["layer", *(f"{name}: test Spearman (mean ± std)" for name in results), f"{within_what} of the authors'"],
        rows,
        summary=f"{args.model}, layers 0-{layers[-1]}, seeds {args.seeds}, {args.epochs} epoch(s) on "
        f"{args.train_samples} pairs: "
        + ", ".join(f"{n} {s:.0f} s ({authors_s / s:.2f}x)" for n, (s, _) in results.items()),
    )


if __name__ == "__main__":
    main()
