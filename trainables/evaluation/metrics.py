"""Evaluation: correlations x100 (scipy), and best-dev-epoch bookkeeping.

`correlations(pred, gold)` returns Spearman and Pearson x100, the STS primary metric being
Spearman (docs/methods/electra.md M1). `BestTracker` keeps the epoch with the highest dev score and the
test scores at that epoch, so no selection ever looks at test. A NaN dev score (a collapsed
model whose cosines are all equal has no correlation) ranks below every number: it is kept only
until a finite score comes (`improves`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np


def correlations(predicted, gold) -> dict[str, float]:
    from scipy.stats import pearsonr, spearmanr

    predicted, gold = np.asarray(predicted, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    return {
        "spearman": float(spearmanr(predicted, gold).statistic * 100.0),
        "pearson": float(pearsonr(predicted, gold).statistic * 100.0),
    }


def improves(new, old) -> bool:
    """Whether dev score `new` beats `old` (None: nothing yet); NaN is worse than any number."""
    if old is None:
        return True
    if np.isnan(new):
        return False
    return bool(np.isnan(old) or new > old)


@dataclass
class BestTracker:
    """Best dev epoch so far (primary metric `dev_<primary>`) and every metric at that epoch."""

    primary: str = "spearman"
    best_epoch: int | None = None
    at_best: dict = field(default_factory=dict)

    def update(self, epoch: int, metrics: dict) -> bool:
        key = f"dev_{self.primary}"
        if improves(metrics[key], None if self.best_epoch is None else self.at_best[key]):
            self.best_epoch, self.at_best = epoch, dict(metrics)
            return True
        return False

    def summary(self) -> dict:
        """Final metrics: best_dev_<primary>, <split>_<metric>_at_best_dev, best_epoch."""
        out = {"best_epoch": self.best_epoch, f"best_dev_{self.primary}": self.at_best[f"dev_{self.primary}"]}
        for name, value in self.at_best.items():
            if name.startswith(("dev_", "test_")):
                out[f"{name}_at_best_dev"] = value
        return out

    def state_dict(self) -> dict:
        """Plain Python values only (checkpoints are read with torch.load(weights_only=True))."""
        state = asdict(self)
        best = state["best_epoch"]
        return {
            **state,
            "best_epoch": None if best is None else int(best),
            "at_best": {k: float(v) for k, v in state["at_best"].items()},
        }

    def load_state_dict(self, state: dict) -> None:
        self.primary, self.best_epoch, self.at_best = state["primary"], state["best_epoch"], dict(state["at_best"])
