"""The size-accuracy front: the full grid against `--search pareto`, in one run.

- grid: `sweeps/electra_layers.py` once per learning rate, every layer and seed (layers 0..L x
  `--lrs` x `--seeds`: 42 trials for all-MiniLM-L6-v2's layers 0-6, three rates and two seeds);
- search: one `--search pareto` sweep over the same points (the layer and seed as the grid's axes,
  `--pareto-tune lr=...` for the rates), `--num-samples` of them, with early stopping by
  non-dominated rank at rungs (epochs 1, eta, ...) below `--epochs`.

Same model, data, epochs and training subset; full STS-B dev and test (or `--eval-samples` of each).
Each front is taken over the trials that ran their whole budget, on (parameters, test Spearman at the
best dev epoch), by dominance (trainables/core/pareto.py). The hypervolume of each front is the area it dominates up to
a reference point: 1.1 x the largest parameter count of the grid, and the grid's lowest test score
minus a tenth of the grid's score range. Trial-seconds are the sum of every trial's own wall time
(`wall_time_s`: set-up, training and evaluation, stopped trials included); as the machine's load may
change between the arms, the search is also priced at the grid's own seconds per epoch of each layer
(its epochs run, at the grid's mean trial seconds / epochs of that layer). Printed: both fronts,
the hypervolume ratio (search / grid; on dev scores too, the objective the search sees) and the
trial-seconds ratio (search / grid); the target is a ratio of at least 0.98 at no more than 1/3 of
the grid's trial-seconds.

    python benchmarks/pareto_search.py                       # all-MiniLM-L6-v2, 3 epochs of 333 pairs, 18 samples
    python benchmarks/pareto_search.py --epochs 3 --train-samples 1000 --num-samples 14
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402

from benchmarks import results_file  # noqa: E402
from trainables.core.pareto import hypervolume_2d, nondominated_ranks  # noqa: E402
from trainables.core.paths import default_data_dir  # noqa: E402


def _sweep(argv: list[str]) -> float:
    from sweeps.electra_layers import main

    started = time.perf_counter()
    if main(argv) != 0:
        print(f"warning: a trial failed in {' '.join(argv)}; the comparison uses the trials that finished")
    return time.perf_counter() - started


def _trials(uri: str, experiment: str) -> list[dict]:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    rows = []
    for run in client.search_runs([found.experiment_id], max_results=1000):
        if run.data.tags.get("embsweep.role") != "trial":
            continue
        metrics, params = run.data.metrics, run.data.params
        rows.append(
            {
                "layer": int(params["layer"]),
                "seed": int(params["seed"]),
                "lr": float(params["lr"]),
                "params": float(params.get("params_truncated", "nan")),
                "dev": metrics.get("best_dev_spearman", float("nan")),
                "test": metrics.get("test_spearman_at_best_dev", float("nan")),
                "seconds": metrics.get("wall_time_s", 0.0),
                "completed": "test_spearman_at_best_dev" in metrics,
                "epochs_run": int(metrics.get("pareto_rung", params["epochs"])),
            }
        )
    return rows


def front(rows: list[dict], score: str = "test") -> list[dict]:
    done = [r for r in rows if r["completed"]]
    ranks = nondominated_ranks(np.array([[r["params"], -r[score]] for r in done]))
    return sorted((r for r, rank in zip(done, ranks) if rank == 0), key=lambda r: r["params"])


def reference(rows: list[dict], score: str) -> tuple[float, float]:
    scores = [r[score] for r in rows if r["completed"]]
    return 1.1 * max(r["params"] for r in rows), min(scores) - 0.1 * (max(scores) - min(scores))


def hypervolume(points: list[dict], ref: tuple[float, float], score: str) -> float:
    return hypervolume_2d([[r["params"], -r[score]] for r in points], [ref[0], -ref[1]])


def _print_front(title: str, points: list[dict]) -> None:
    print(f"\n{title}: {len(points)} points")
    print(f"{'layer':>5} {'params (M)':>10} {'lr':>8} {'seed':>4} {'dev':>7} {'test':>7}")
    for r in points:
        print(
            f"{r['layer']:>5} {r['params'] / 1e6:>10.2f} {r['lr']:>8g} {r['seed']:>4} "
            f"{r['dev']:>7.2f} {r['test']:>7.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--layers", default="0,1,2,3,4,5,6")
    parser.add_argument("--lrs", default="2e-5,5e-5,1e-4")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--epochs", type=int, default=3, help="the budget: epochs (rungs at 1, eta, ... below it)")
    parser.add_argument("--train-samples", type=int, default=333, help="training pairs per epoch")
    parser.add_argument("--eval-samples", type=int, default=None, help="a subset of dev and test (default: all)")
    parser.add_argument("--num-samples", type=int, default=18, help="points the search runs")
    parser.add_argument("--eta", type=int, default=3)
    parser.add_argument("--data-dir", default=str(default_data_dir()))
    parser.add_argument("--cpus-per-trial", default="1")
    parser.add_argument("--storage", default=None, help="where both arms keep their sweeps (default: a temp folder)")
    parser.add_argument(
        "--report-only", action="store_true", help="run nothing: print the comparison of the sweeps in --storage"
    )
    parser.add_argument("--skip-grid", action="store_true", help="reuse the grid already in --storage")
    parser.add_argument("--search-name", default="search", help="the search arm's sweep and experiment name")
    results_file.add_flag(parser, "pareto_search")
    args = parser.parse_args()

    root = Path(args.storage or tempfile.mkdtemp(prefix="pareto-bench-"))
    uri = f"sqlite:///{root / 'mlflow.db'}"
    common = [
        *("--models", args.model, "--layers", args.layers, "--seeds", args.seeds, "--epochs", str(args.epochs)),
        *("--max-train-samples", str(args.train_samples), "--data-dir", args.data_dir),
        *("--storage-path", str(root), "--mlflow-uri", uri, "--cpus-per-trial", args.cpus_per_trial),
        *(("--max-eval-samples", str(args.eval_samples)) if args.eval_samples else ()),
    ]
    lrs = [float(v) for v in args.lrs.split(",")]
    if not args.report_only:
        grid_wall = (
            0.0
            if args.skip_grid
            else sum(
                _sweep([*common, "--lr", str(lr), "--experiment", "grid", "--name", f"grid-lr{lr:g}"]) for lr in lrs
            )
        )
        tuned = "lr=" + ":".join(f"{lr:g}" for lr in lrs)
        search_wall = _sweep(
            [
                *common,
                *("--search", "pareto", "--num-samples", str(args.num_samples), "--pareto-eta", str(args.eta)),
                *("--pareto-tune", tuned, "--experiment", args.search_name, "--name", args.search_name),
            ]
        )
        print(f"wall time (sweeps, start-up included): grid {grid_wall:.0f} s, search {search_wall:.0f} s")
    grid, search = _trials(uri, "grid"), _trials(uri, args.search_name)
    evaluated = f"the first {args.eval_samples} STS-B dev and test pairs" if args.eval_samples else "full dev, test"
    print(
        f"\n{args.model}: layers {args.layers}, lrs {args.lrs}, seeds {args.seeds}, {args.epochs} epochs of "
        f"{args.train_samples} pairs; {evaluated}; results in {root}"
    )

    grid_front, search_front = front(grid), front(search)
    _print_front(f"grid front ({len(grid)} trials)", grid_front)
    stopped = sum(not r["completed"] for r in search)
    _print_front(f"search front ({len(search)} trials, {stopped} stopped at a rung)", search_front)
    ratios = {}
    for score in ("test", "dev"):
        ref = reference(grid, score)
        ratios[score] = ratio = hypervolume(front(search, score), ref, score) / hypervolume(
            front(grid, score), ref, score
        )
        print(
            f"\nhypervolume ratio on {score} Spearman (search / grid): {ratio:.4f}  (reference point: "
            f"{ref[0] / 1e6:.2f} M parameters, {ref[1]:.2f})"
        )
    grid_s, search_s = sum(r["seconds"] for r in grid), sum(r["seconds"] for r in search)
    print(f"trial-seconds: grid {grid_s:.0f}, search {search_s:.0f}, ratio (search / grid) {search_s / grid_s:.3f}")
    per_epoch = {
        layer: np.mean([r["seconds"] / r["epochs_run"] for r in grid if r["layer"] == layer])
        for layer in {r["layer"] for r in grid}
    }
    priced = sum(per_epoch[r["layer"]] * r["epochs_run"] for r in search)
    print(
        f"the search priced at the grid's own seconds per epoch of each layer (one load for both): {priced:.0f} s, "
        f"ratio (search / grid) {priced / grid_s:.3f}; epochs run: grid {sum(r['epochs_run'] for r in grid)}, "
        f"search {sum(r['epochs_run'] for r in search)}"
    )
    _write_results(args, grid, search, grid_front, search_front, stopped, ratios, search_s / grid_s, priced / grid_s)


def _write_results(args, grid, search, grid_front, search_front, stopped, ratios, seconds, priced) -> None:
    """The comparison as benchmarks/results/pareto_search.json (docs/benchmarks.md)."""
    evaluated = f"the first {args.eval_samples} STS-B dev and test pairs" if args.eval_samples else "full dev, test"

    def layers(rows):
        return ", ".join(str(layer) for layer in sorted({r["layer"] for r in rows}))

    results_file.write(
        args.results_json,
        "pareto_search",
        [
            "search",
            "points run (stopped at a rung)",
            "front found",
            "hypervolume / grid's (test; dev)",
            "trial-seconds / grid's (measured; at the grid's per-epoch seconds)",
        ],
        [
            [f"the grid ({len(grid)} trials)", len(grid), f"layers {layers(grid_front)}", "1.00; 1.00", "1.00; 1.00"],
            [
                f"`--search pareto`, η = {args.eta}, {args.num_samples} points",
                f"{len(search)} ({stopped})",
                f"layers {layers(search_front)}",
                f"{ratios['test']:.2f}; {ratios['dev']:.2f}",
                f"{seconds:.2f}; {priced:.2f}",
            ],
        ],
        summary=f"{args.model}: layers {args.layers} x lrs {args.lrs}, seeds {args.seeds}, {args.epochs} epochs of "
        f"{args.train_samples} pairs; {evaluated}. Fronts on (parameters, test Spearman) compared by hypervolume.",
    )


if __name__ == "__main__":
    main()
