"""Seeds by need: confidence intervals of a configuration's mean over seeds, and the rule that says
which configurations get another seed (the `--seeds-by-need` search, its benchmark and its report).

Intervals are Student's t intervals of the mean (scipy.stats.t). With `pooled` (the default), the
seed standard deviation is pooled over the configurations compared together (one model and task:
every layer of it), with degrees of freedom sum(n_i - 1): the seed spread is a property of the
recipe on that model and task, and pooling gives two-seed configurations a usable interval (t with
1 degree of freedom is 12.7 at 95%). Without it each configuration's own sample std is used.

The rule (`decide`): within a group, the best configuration is the best mean (the contract's mode;
trainables.core.method.best_value). A configuration gets another seed while it has fewer than
`max_seeds` and its conclusion is open: fewer than two results (no interval), an interval wider
than `width`, or an interval that overlaps the best's (the best itself is open while any other
configuration overlaps it). Otherwise it stops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from trainables.core.method import best_value


@dataclass(frozen=True)
class Interval:
    n: int
    mean: float
    low: float  # -inf/inf where there is no interval (fewer than 2 values, no degrees of freedom)
    high: float

    @property
    def width(self) -> float:
        return self.high - self.low

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high


def _sd(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def intervals(values: dict, confidence: float = 0.95, pooled: bool = True) -> dict:
    """{key: Interval} of the mean of each key's values (one group compared together)."""
    with_spread = [v for v in values.values() if len(v) >= 2]
    df_pooled = sum(len(v) - 1 for v in with_spread)
    sd_pooled = math.sqrt(sum((len(v) - 1) * _sd(v) ** 2 for v in with_spread) / df_pooled) if df_pooled else math.nan
    out = {}
    for key, vals in values.items():
        n = len(vals)
        mean = sum(vals) / n if n else math.nan
        sd, df = (sd_pooled, df_pooled) if pooled else ((_sd(vals), n - 1) if n >= 2 else (math.nan, 0))
        if n == 0 or (not pooled and n < 2) or df < 1 or not math.isfinite(sd):
            out[key] = Interval(n, mean, -math.inf, math.inf)
        elif sd == 0:
            out[key] = Interval(n, mean, mean, mean)
        else:
            low, high = stats.t.interval(confidence, df, loc=mean, scale=sd / math.sqrt(n))
            out[key] = Interval(n, mean, float(low), float(high))
    return out


@dataclass(frozen=True)
class Decision:
    key: object
    interval: Interval
    more: bool
    reason: str


def decide(
    values: dict, max_seeds: dict, width: float, mode: str = "max", confidence: float = 0.95, pooled: bool = True
) -> list[Decision]:
    """One group's decisions: `values` {key: [the metric of each finished seed]}, `max_seeds` {key: the
    most results it can have (the --seeds count less its failed trials)}, `width` the interval target."""
    found = intervals(values, confidence, pooled)
    best = best_value({k: i.mean for k, i in found.items() if i.n}, mode)
    out = []
    for key, interval in found.items():
        at_max = len(values[key]) >= max_seeds[key]
        others_overlap = [
            k for k, i in found.items() if k != key and i.n and best is not None and i.overlaps(found[key])
        ]
        if best is None or interval.n < 2 or not math.isfinite(interval.width):
            more, reason = True, "fewer than 2 results: no interval yet"
        elif interval.width > width:
            more, reason = True, f"interval width {interval.width:.2f} > {width:g}"
        elif key == best and others_overlap:
            more, reason = True, f"the best; overlapped by {len(others_overlap)} other(s)"
        elif key == best:
            more, reason = False, "the best; no other interval overlaps it"
        elif interval.overlaps(found[best]):
            more, reason = True, f"overlaps the best's [{found[best].low:.2f}, {found[best].high:.2f}]"
        else:
            more, reason = False, f"separated from the best's [{found[best].low:.2f}, {found[best].high:.2f}]"
        if more and at_max:
            more, reason = False, f"{reason}; but all {max_seeds[key]} seeds ran"
        out.append(Decision(key, interval, more, reason))
    return out


def miss_rate(df: int, confidence: float = 0.95) -> float:
    """The chance that two configurations of equal true mean (equal n, pooled sd with `df` degrees of
    freedom) get non-overlapping intervals in one round: P(|T_df| > sqrt(2) t_{df,(1+c)/2})."""
    t = stats.t.ppf((1 + confidence) / 2, df)
    return float(2 * stats.t.sf(math.sqrt(2) * t, df))
