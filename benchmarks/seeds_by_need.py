"""Seeds by need against the full seed grid, on the default job's shape.

The grid: `sweeps/electra_layers.py` with all-MiniLM-L6-v2, layers 0..6, 1 epoch on 1,000 STS-B
pairs and 5 seeds (35 trials), run once (or read back with --mlflow-uri from a grid run before).
Seeds by need is then replayed on the grid's trials: the project's own searcher
(sweeps/engine/seed_search.py, the rule of trainables/core/seed_need.py) suggests trials round by
round, and a trial it suggests is answered by the grid's trial of the same layer and seed (its dev
score and its trial seconds, `wall_time_s`), in two seed orders (0..4 and 4..0). Printed for each
order: trial-seconds used (fraction of the grid's), seeds per layer, whether the best layer (by mean
dev) is the grid's, whether every layer's mean dev and test score lies inside the grid's 95% t
interval of that layer, and the largest difference of a layer's mean from the grid's.

    python benchmarks/seeds_by_need.py                                  # runs the grid (~35 trials), then replays
    python benchmarks/seeds_by_need.py --mlflow-uri sqlite:///runs/mlflow.db   # a grid already run
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from benchmarks import results_file  # noqa: E402
from sweeps.engine.seed_search import SeedsByNeed  # noqa: E402
from trainables.core.method import MetricContract, best_value  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
CONTRACT = MetricContract(
    primary="best_dev_spearman", report="test_spearman_at_best_dev", axes=("model", "layer", "seed"), select="layer"
)


def run_grid(seeds: list[int]) -> str:
    from sweeps.electra_layers import main

    root = Path(tempfile.mkdtemp(prefix="seeds-by-need-"))
    argv = ["--models", MODEL, "--seeds", ",".join(map(str, seeds)), "--epochs", "1", "--max-train-samples", "1000"]
    if main([*argv, "--storage-path", str(root), "--name", "grid"]) != 0:
        raise SystemExit("the grid sweep failed")
    return f"sqlite:///{root / 'mlflow.db'}"


def grid_trials(uri: str) -> dict:
    """{(layer, seed): {dev, test, seconds}} of the finished trial runs in the store."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    trials = {}
    for run in client.search_runs(experiments, "attributes.status = 'FINISHED'", max_results=10000):
        params, metrics = run.data.params, run.data.metrics
        if "layer" in params and CONTRACT.primary in metrics:
            trials[(int(params["layer"]), int(params["seed"]))] = {
                "dev": metrics[CONTRACT.primary],
                "test": metrics[CONTRACT.report],
                "seconds": metrics["wall_time_s"],
            }
    return trials


def replay(trials: dict, seeds: list[int], initial: int, width: float, pooled: bool) -> tuple[dict, float]:
    """({layer: [(seed, trial)]} that seeds by need ran, its trial seconds), answering from the grid."""
    layers = sorted({layer for layer, _ in trials})
    configs = [{"model": MODEL, "layer": layer, "seed": seed} for layer in layers for seed in seeds]
    searcher = SeedsByNeed(configs, CONTRACT, initial, width, pooled=pooled)
    ran, seconds, count = {layer: [] for layer in layers}, 0.0, 0
    while True:
        suggested = []
        while isinstance(config := searcher.suggest(f"t{count + len(suggested)}"), dict):
            suggested.append(config)
        if not suggested:
            return ran, seconds
        for config in suggested:
            trial = trials[(config["layer"], config["seed"])]
            ran[config["layer"]].append((config["seed"], trial))
            seconds += trial["seconds"]
            searcher.on_trial_complete(f"t{count}", {CONTRACT.primary: trial["dev"]})
            count += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mlflow-uri", help="a grid already run (default: run it)")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--initial-seeds", type=int, default=2)
    parser.add_argument("--seed-ci-width", type=float, default=2.0)
    parser.add_argument("--seed-spread", choices=("pooled", "own"), default="pooled")
    results_file.add_flag(parser, "seeds_by_need")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    trials = grid_trials(args.mlflow_uri or run_grid(seeds))
    layers = sorted({layer for layer, _ in trials})
    grid_seconds = sum(trials[(layer, seed)]["seconds"] for layer in layers for seed in seeds)
    full = {
        metric: {layer: [trials[(layer, seed)][metric] for seed in seeds] for layer in layers}
        for metric in ("dev", "test")
    }
    grid_ci = {
        metric: {
            layer: stats.t.interval(0.95, len(v) - 1, loc=np.mean(v), scale=stats.sem(v)) for layer, v in by.items()
        }
        for metric, by in full.items()
    }
    grid_best = best_value({layer: np.mean(v) for layer, v in full["dev"].items()}, "max")
    print(
        f"grid: {len(layers)} layers x {len(seeds)} seeds, {grid_seconds:.0f} trial-seconds, best layer {grid_best}; "
        f"seeds by need: --initial-seeds {args.initial_seeds} --seed-ci-width {args.seed_ci_width:g} "
        f"--seed-spread {args.seed_spread}"
    )
    rows = []
    for name, order in (("seeds in order", seeds), ("seeds reversed", seeds[::-1])):
        ran, seconds = replay(trials, order, args.initial_seeds, args.seed_ci_width, args.seed_spread == "pooled")
        means = {m: {layer: np.mean([t[m] for _, t in ran[layer]]) for layer in layers} for m in ("dev", "test")}
        best = best_value(means["dev"], "max")
        inside = {
            m: all(grid_ci[m][layer][0] <= means[m][layer] <= grid_ci[m][layer][1] for layer in layers) for m in means
        }
        largest = {m: max(abs(means[m][layer] - np.mean(full[m][layer])) for layer in layers) for m in means}
        print(
            f"{name} ({','.join(map(str, order))}): {sum(len(r) for r in ran.values())} trials, "
            f"{seconds:.0f} trial-seconds = {seconds / grid_seconds:.2f} of the grid's; seeds per layer "
            + " ".join(f"L{layer}:{len(ran[layer])}" for layer in layers)
            + f"; best layer {best} ({'same' if best == grid_best else 'DIFFERENT'}); every layer's mean inside the "
            f"grid's 95% interval: dev {inside['dev']}, test {inside['test']}; largest difference dev "
            f"{largest['dev']:.3f}, test {largest['test']:.3f}"
        )
        rows.append(
            [
                ",".join(map(str, order)) + ("" if args.seed_spread == "pooled" else ", `--seed-spread own`"),
                sum(len(r) for r in ran.values()),
                f"{seconds:,.0f} ({seconds / grid_seconds:.2f})",
                " ".join(str(len(ran[layer])) for layer in layers),
                f"{best} ({'same' if best == grid_best else 'DIFFERENT'})",
                f"{'yes' if inside['dev'] else 'no'}, {'yes' if inside['test'] else 'no'}",
                f"{largest['dev']:.3f}, {largest['test']:.3f}",
            ]
        )
    results_file.write(
        args.results_json,
        "seeds_by_need",
        [
            "seed order",
            "trials",
            "trial-seconds (of the grid's)",
            f"seeds per layer {layers[0]}..{layers[-1]}",
            "best layer",
            "every layer's mean in the grid's 95% interval (dev, test)",
            "largest difference (dev, test)",
        ],
        rows,
        summary=f"The grid: {len(layers)} layers x {len(seeds)} seeds, {grid_seconds:,.0f} trial-seconds, best layer "
        f"{grid_best}; seeds by need replayed on its trials (--initial-seeds {args.initial_seeds}, --seed-ci-width "
        f"{args.seed_ci_width:g}, --seed-spread {args.seed_spread}).",
    )


if __name__ == "__main__":
    main()
