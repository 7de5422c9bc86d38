"""The table printed at the end of a sweep, from Tune's results and the method's metric contract:
one row per group of the contract's axes (every axis but the selected one and the seed). With a
selected axis (e.g. the layer), each row is that axis's best value by the mean primary metric
over seeds; without one, every value is a row. Scores are mean ± sample std over seeds, the
spread left out when there is one seed. Where the contract's scores are each a mean within a run
(`averaged_over`, e.g. the adaptive-layer method's mean over its layers), their headers say so."""

from __future__ import annotations

import pandas as pd

from trainables.core.method import MetricContract, best_value

LABEL_WIDTH = 45
WORDS = {"spearman": "Spearman", "pearson": "Pearson", "f1": "F1"}


def _cell(values: pd.Series, width: int) -> str:
    values = values.dropna()
    if values.empty:
        return f"{'-':>{width}}"
    if len(values) == 1:
        return f"{values.mean():>{width - 7}.2f}       "
    return f"{values.mean():>{width - 7}.2f} ± {values.std():>4.2f}"


def title(metric: str) -> str:
    """A metric's display name: `best_dev_spearman` -> `dev Spearman`, `test_f1_at_best_dev` -> `test F1`."""
    words = metric.removeprefix("best_").removesuffix("_at_best_dev").split("_")
    return " ".join(WORDS.get(w, w) for w in words)


def _label(contract: MetricContract, key: tuple) -> str:
    text = " ".join(contract.label_of(dict(zip(contract.groups, key))).split()) or "all"
    return text[-LABEL_WIDTH:]


def summary_table(frame: pd.DataFrame, contract: MetricContract) -> str:
    config = {axis: f"config/{axis}" for axis in contract.axes}
    metrics = list(dict.fromkeys([contract.primary, contract.report, *contract.columns]))
    if frame.empty or contract.primary not in frame or any(c not in frame for c in config.values()):
        return "No finished trials."
    if contract.select:
        frame = frame[frame[contract.primary].notna()]
        if frame.empty:
            return "No finished trials."
    shown = [m for m in metrics if m in frame]
    means = {contract.primary, contract.report, contract.companion} if contract.averaged_over else set()
    titles = {m: title(m) + (f" (mean over {contract.averaged_over})" if m in means else "") for m in shown}
    width = max([16, *(len(t) for t in titles.values())])
    select = contract.select
    header = (
        f"{'':<{LABEL_WIDTH}} " + (f"{select:>6} " if select else "") + " ".join(f"{titles[m]:>{width}}" for m in shown)
    )
    lines = ["", header + (f" {'seeds':>5}" if contract.seed else "")]
    group_columns = [config[a] for a in contract.groups]
    groups = frame.groupby(group_columns, dropna=False, sort=True) if group_columns else [((), frame)]
    for key, rows in groups:
        key = key if isinstance(key, tuple) else (key,)
        if select:
            best = best_value(rows.groupby(config[select])[contract.primary].mean().to_dict(), contract.mode)
            if best is None:
                continue
            picks = [(best, rows[rows[config[select]] == best])]
        elif contract.seed:
            others = [config[a] for a in contract.axes if a not in contract.groups and a != contract.seed]
            picks = [(None, part) for _, part in rows.groupby(others)] if others else [(None, rows)]
        else:
            picks = [(None, rows.iloc[[i]]) for i in range(len(rows))]
        for value, part in picks:
            line = f"{_label(contract, key):<{LABEL_WIDTH}} " + (f"{value!s:>6} " if select else "")
            line += " ".join(_cell(part[m], width) for m in shown)
            if contract.seed:
                line += f" {len(part):>5}"
            lines.append(line)
    return "\n".join(lines)
