"""The report of a `--seeds-by-need` sweep: seeds per configuration and the intervals its rule used.

For each sweep whose runs logged `seeds_by_need` = 1 and each group of the contract's row axes (e.g.
one model), one row per configuration (the contract's axes less the seed): the seeds it ran, the
mean primary (dev) score with its 95% Student's t interval, computed as the sweep's rule computed it
(trainables/core/seed_need.py, with the sweep's `seed_spread`), and the mean held-out score; and a
figure of the means with their intervals drawn and each point's seed count beside it. The rounds'
decisions themselves are artifacts of the sweep's parent run (`seeds_by_need/round_<k>.json`).
"""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.ticker import MaxNLocator

from analysis.names import display_names, metric_name
from analysis.plots import new_figure, save_figure
from analysis.tables import to_markdown
from trainables.core.seed_need import intervals


def rows(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration of every seeds-by-need sweep in `runs` (see the module docstring)."""
    if "seeds_by_need" not in runs or not (runs["seeds_by_need"].astype(str) == "1").any():
        return pd.DataFrame()
    chosen = runs[(runs["seeds_by_need"].astype(str) == "1") & (runs["status"] == "FINISHED")]
    out = []
    for sweep, sweep_runs in chosen.groupby("sweep", sort=True):
        first = sweep_runs.iloc[0]
        axes = [a for a in str(first["sweep_axes"]).split(",") if a]
        seed, select = first["seed_axis"], first.get("select_axis") or ""
        config_axes = [a for a in axes if a != seed]
        group_axes = [a for a in config_axes if a != select]
        primary, report = first["metric_primary"], first["metric_report"]
        pooled = str(first.get("seed_spread", "pooled")) != "own"
        for group_key, group in sweep_runs.groupby(group_axes, sort=True) if group_axes else [((), sweep_runs)]:
            values, tests = {}, {}
            for key, config_runs in group.groupby(config_axes, sort=True):
                key = key if isinstance(key, tuple) else (key,)
                values[key] = pd.to_numeric(config_runs[primary], errors="coerce").dropna().tolist()
                tests[key] = pd.to_numeric(config_runs[report], errors="coerce").mean()
            for key, interval in intervals(values, pooled=pooled).items():
                out.append(
                    {
                        "sweep": sweep,
                        **dict(zip(config_axes, key)),
                        "select_axis": select,
                        "group": ", ".join(
                            str(v) for v in (group_key if isinstance(group_key, tuple) else (group_key,))
                        ),
                        "metric": primary,
                        "n_seeds": interval.n,
                        "mean": interval.mean,
                        "ci_low": interval.low,
                        "ci_high": interval.high,
                        "test_mean": tests[key],
                    }
                )
    return pd.DataFrame(out)


def plot(group: pd.DataFrame, title: str):
    """The group's means against the select axis, the 95% intervals as error bars, n beside each point."""
    fig, ax = new_figure((7.0, 4.2))
    select = group["select_axis"].iloc[0]
    x = pd.to_numeric(group[select], errors="coerce") if select else pd.Series(range(len(group)))
    if x.isna().any():
        x = pd.Series(range(len(group)), index=group.index)
    low = (group["mean"] - group["ci_low"]).where(lambda d: d.map(math.isfinite), 0.0)
    high = (group["ci_high"] - group["mean"]).where(lambda d: d.map(math.isfinite), 0.0)
    ax.errorbar(x, group["mean"], yerr=[low, high], fmt="o", capsize=4)
    for xi, yi, n in zip(x, group["mean"], group["n_seeds"]):
        ax.annotate(f"n={n}", (xi, yi), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xlabel(select or "configuration")
    ax.set_ylabel(
        f"{metric_name(str(group['metric'].iloc[0]).removeprefix('best_dev_'))} ×100 (dev): mean, 95% interval"
    )
    if select:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3)
    return fig


def sections(out) -> list[str]:
    """The report's seeds-by-need section (empty when no run is of such a sweep)."""
    runs, figures, tables, write_csv, report = out.runs, out.figures, out.tables, out.write_csv, out.report
    table = rows(runs)
    if table.empty:
        return []
    write_csv(table, tables / "seeds_by_need.csv")
    lines = [
        "",
        "## Seeds by need",
        "",
        "Sweeps run with `--seeds-by-need`: the seeds each configuration got and the 95% Student's t interval of "
        "its mean dev score, as the sweep's rule computed it (the rounds' decisions are artifacts of the parent "
        "run, `seeds_by_need/round_<k>.json`; [CSV](tables/seeds_by_need.csv)).",
        "",
    ]
    for (sweep, group_name), group in table.groupby(["sweep", "group"], sort=True):
        label = display_names([group_name]).get(group_name, group_name) if group_name else sweep
        files = save_figure(plot(group, f"{sweep}: {label}"), figures, f"seeds_by_need_{sweep}_{len(lines)}")
        report.files += files
        shown = group.drop(columns=["sweep", "select_axis", "group", "metric"]).copy()
        if "model" in shown:
            shown["model"] = shown["model"].map(lambda m: display_names([m])[str(m)])
        for column in ("mean", "ci_low", "ci_high", "test_mean"):
            shown[column] = shown[column].map(lambda v: f"{v:.2f}")
        lines += [f"![{label}](figures/{files[0].name})", "", to_markdown(shown), ""]
    return lines
