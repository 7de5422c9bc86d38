"""Every layer from one run beside one model per layer: the adaptive-layer method's layer curve beside
TMFT's, per layer, with the compute each took and the CKA between the two models at each layer.

- `layer_rows(runs)`: one row per (adaptive-layer run, layer): its held-out score at that layer
  (`layer<k>_<report metric>`), the run's wall time (one run for every layer) and, once
  `python -m analysis.one_run` has logged it, the CKA with TMFT's model of that layer
  (`layer<k>_cka_tmft`).
- `comparison(runs)`: per (model, task, layer), mean ± std over seeds of both methods' held-out
  scores, the difference, the compute (TMFT: its trial of that layer, mean over seeds; the one run:
  its whole wall time, which every layer shares; their sums in `sections`) and the mean CKA.
- `sections(...)`: the report's section (figure and table) where both methods ran on one model and task.

`python -m analysis.one_run --mlflow-uri URI [--data-dir D] [--max-sentences N]` computes the CKA:
for each adaptive-layer run and each TMFT run of the same model, task and seed, linear CKA
(analysis/cka.py) between the mean-pooled layer k of the one model and the last layer of TMFT's
layer-k model, on the STS-B test sentences, both from their best-dev folders (`best/` under the
runs' `embsweep.checkpoint`); logged as `layer<k>_cka_tmft` on the adaptive-layer run.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.names import display_names, method_name, metric_name, task_name
from analysis.plots import new_figure, save_figure
from analysis.tables import to_markdown
from trainables.core.errors import SweepInputError

ONE_RUN = "adaptive-layer"
PER_LAYER = re.compile(r"^layer(\d+)_(.+)$")


def layer_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (finished adaptive-layer run, layer); see the module docstring."""
    mine = runs[(runs.get("method") == ONE_RUN) & (runs.get("status") == "FINISHED")] if "method" in runs else runs[:0]
    rows = []
    for run in mine.to_dict("records"):
        report = run.get("metric_report")
        for column, value in run.items():
            match = PER_LAYER.match(column)
            if match and match.group(2) == report and pd.notna(value):
                layer = int(match.group(1))
                rows.append(
                    {
                        "model": run["model"],
                        "task": run.get("task"),
                        "seed": run.get("seed"),
                        "layer": layer,
                        "metric": report,
                        "score": float(value),
                        "seconds": run.get("wall_time_s"),
                        "cka": run.get(f"layer{layer}_cka_tmft", np.nan),
                    }
                )
    return pd.DataFrame(rows)


def comparison(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (model, task, layer): both methods' mean ± std over seeds, Δ, compute and CKA."""
    one = layer_rows(runs)
    if one.empty or "layer" not in runs:  # no layer sweep in these runs: nothing to put beside
        return pd.DataFrame()
    tmft = runs[(runs["method"] == "tmft") & (runs["status"] == "FINISHED")]
    rows = []
    for (model, task, layer), group in one.groupby(["model", "task", "layer"], sort=True):
        theirs = tmft[(tmft["model"] == model) & (tmft["task"] == task) & (tmft["layer"] == layer)]
        report = group["metric"].iloc[0]
        scores = pd.to_numeric(theirs.get(report), errors="coerce").dropna() if report in theirs else pd.Series([])
        rows.append(
            {
                "model": model,
                "task": task,
                "layer": int(layer),
                "metric": report,
                "one_run_mean": group["score"].mean(),
                "one_run_std": group["score"].std(ddof=1),
                "one_run_seeds": len(group),
                "tmft_mean": scores.mean() if len(scores) else np.nan,
                "tmft_std": scores.std(ddof=1) if len(scores) > 1 else np.nan,
                "tmft_seeds": len(scores),
                "delta": group["score"].mean() - scores.mean() if len(scores) else np.nan,
                "tmft_seconds": pd.to_numeric(theirs.get("wall_time_s"), errors="coerce").mean(),
                "one_run_seconds": pd.to_numeric(group["seconds"], errors="coerce").mean(),
                "cka": pd.to_numeric(group["cka"], errors="coerce").mean(),
            }
        )
    return pd.DataFrame(rows)


def plot_comparison(frame: pd.DataFrame, title: str):
    fig, ax = new_figure((7.5, 4.6))
    ax.errorbar(
        frame["layer"],
        frame["tmft_mean"],
        yerr=frame["tmft_std"].fillna(0),
        marker="o",
        capsize=3,
        label=f"{method_name('tmft')}: one model per layer",
    )
    ax.errorbar(
        frame["layer"],
        frame["one_run_mean"],
        yerr=frame["one_run_std"].fillna(0),
        marker="s",
        capsize=3,
        label=f"{method_name(ONE_RUN)}: every layer of one model",
    )
    ax.set_xlabel("layer (0 = embedding output)")
    ax.set_ylabel(f"test {metric_name(frame['metric'].iloc[0].split('_')[1])}")
    ax.set_title(title)
    ax.legend(loc="upper left")
    return fig


def _pm(mean, std) -> str:
    return "" if pd.isna(mean) else f"{mean:.2f}" + ("" if pd.isna(std) else f" ± {std:.2f}")


def sections(out) -> list[str]:
    """The report's part for these runs (`out`: analysis/report.py `ReportParts`)."""
    runs, figures, tables, write_csv, report = out.runs, out.figures, out.tables, out.write_csv, out.report
    frame = comparison(runs)
    frame = frame[frame["tmft_seeds"] > 0] if not frame.empty else frame
    if frame.empty:
        return []
    write_csv(frame, tables / "one_run_vs_tmft.csv")
    names = display_names(frame["model"].unique())
    lines = []
    for (model, task), group in frame.groupby(["model", "task"], sort=True):
        title = f"{names[model]} on {task_name(task)}"
        files = save_figure(
            plot_comparison(group, title), figures, f"one_run_vs_tmft_{names[model]}_{task}".replace("/", "_")
        )
        report.files += files
        shown = pd.DataFrame(
            {
                "layer": group["layer"],
                method_name("tmft"): [_pm(m, s) for m, s in zip(group["tmft_mean"], group["tmft_std"])],
                method_name(ONE_RUN): [_pm(m, s) for m, s in zip(group["one_run_mean"], group["one_run_std"])],
                "Δ": group["delta"].map("{:+.2f}".format),
                "TMFT s (this layer)": group["tmft_seconds"].map("{:.0f}".format),
                "CKA": group["cka"].map(lambda v: "" if pd.isna(v) else f"{v:.3f}"),
            }
        ).astype(str)
        one_run_s, tmft_s = group["one_run_seconds"].iloc[0], group["tmft_seconds"].sum()
        lines += [
            "",
            f"## {method_name(ONE_RUN)} beside {method_name('tmft')}: {title}",
            "",
            f"![one run against one model per layer](figures/{files[0].name})",
            "",
            f"Test score per layer, mean ± std over seeds ({int(group['one_run_seeds'].max())} one-run seed(s), "
            f"{int(group['tmft_seeds'].max())} TMFT seed(s) per layer); Δ = one run − TMFT. Compute per seed: "
            f"TMFT {tmft_s:.0f} s for all {len(group)} layers (one trial each), the one run {one_run_s:.0f} s for "
            f"every layer ({tmft_s / one_run_s:.2f}x less). CKA: linear CKA between the one model's layer and "
            "TMFT's model of that layer on the STS-B test sentences (`python -m analysis.one_run`; blank until run). "
            "[CSV](tables/one_run_vs_tmft.csv)",
            "",
            to_markdown(shown),
        ]
    return lines


# ---- the CKA command --------------------------------------------------------------------------
def _best_folder(run) -> Path | None:
    from trainables.core.schema import TAG_CHECKPOINT

    checkpoint = run.data.tags.get(TAG_CHECKPOINT)
    folder = Path(checkpoint) / "best" if checkpoint else None
    return folder if folder is not None and (folder / "config.json").is_file() else None


def log_cka(tracking_uri: str, data_dir=None, max_sentences: int | None = None, batch_size: int = 64) -> pd.DataFrame:
    """Compute and log `layer<k>_cka_tmft` on every adaptive-layer run (see the module docstring)."""
    from mlflow import MlflowClient

    from analysis.cka import hidden_state_embeddings, linear_cka, stsb_test_sentences
    from trainables.core.paths import default_data_dir

    client = MlflowClient(tracking_uri)
    runs = [
        r
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id], max_results=5000)
        if r.info.status == "FINISHED" and r.data.params.get("method") in (ONE_RUN, "tmft")
    ]
    ones = [r for r in runs if r.data.params["method"] == ONE_RUN and _best_folder(r)]
    if not ones:
        raise SweepInputError(
            f"no finished {ONE_RUN} run with a best-dev folder in {tracking_uri}; run sweeps/adaptive_layer.py"
        )
    sentences = stsb_test_sentences(data_dir or default_data_dir(), max_sentences)
    rows = []
    for one in ones:
        key = {k: one.data.params.get(k) for k in ("model", "task", "seed")}
        theirs = [
            r
            for r in runs
            if r.data.params["method"] == "tmft"
            and all(r.data.params.get(k) == v for k, v in key.items())
            and _best_folder(r)
        ]
        if not theirs:
            continue
        states = hidden_state_embeddings(_best_folder(one), sentences, batch_size)
        metrics = {}
        for run in theirs:
            layer = int(run.data.params["layer"])
            metrics[f"layer{layer}_cka_tmft"] = linear_cka(
                states[layer], hidden_state_embeddings(_best_folder(run), sentences, batch_size)[layer]
            )
            rows.append({**key, "layer": layer, "cka": metrics[f"layer{layer}_cka_tmft"]})
        for name, value in metrics.items():
            client.log_metric(one.info.run_id, name, float(value))
    if not rows:
        raise SweepInputError("no TMFT run of the same model, task and seed as an adaptive-layer run; run both sweeps")
    return pd.DataFrame(rows).sort_values(["model", "seed", "layer"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.one_run", description="CKA per layer: one run vs TMFT")
    parser.add_argument("--mlflow-uri", required=True)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--max-sentences", type=int, default=None, help="the first N STS-B test sentences")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    try:
        frame = log_cka(args.mlflow_uri, args.data_dir, args.max_sentences, args.batch_size)
    except SweepInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(frame.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
