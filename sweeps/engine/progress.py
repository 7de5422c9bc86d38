"""A console progress line a person can read while a sweep runs:

    [12:04 elapsed | ~31:10 left] trials 14/40 done, 2 running, 23 pending, 1 errored | best dev Spearman 81.23
    (bert-base-cased L9 s2)

Printed at most every `interval` seconds and whenever a trial finishes or errors. "done" counts the
trials that finished by Tune's own trial states (`ProgressLine.state`): a trial Tune ended without
its last result (the sweep stopping, a store lost) is "stopped unfinished", never done. The best is the
method's primary metric (its metric contract). The time left comes from the method's cost model:
each trial's estimated seconds, scaled by how long the finished trials really took against their
estimates (so cheap trials finishing first do not make the rest look cheap); a running trial
that reports `progress` (the share of its epochs done) is charged the rest of it. The work left
is divided by the number of trials running at once.

The line is printed after every trial that ends, so it must not cost in proportion to all the trials
each time: an ended trial's state is read from its last result once and kept until it starts again
and a running trial's progress is the one its results reported, never read back from Tune (Ray's
`Trial.last_result` builds its answer anew on each read, and for a trial that has not reported yet it
waits for a default result from the trial's actor): reading them took 15 s of the driver's loop at 1,000
trials.
"""

from __future__ import annotations

import sys
import time

from ray import tune

from sweeps.engine.summary import title
from trainables.core.method import MetricContract
from trainables.core.schema import config_hash


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def planned_trials(args: dict, grid: int) -> int | None:
    """The trials the line counts towards: the grid's, or the search's samples; None under `--seeds-by-need`,
    whose rounds decide how many run (the line then counts the trials suggested so far, not the maximum)."""
    if args.get("seeds_by_need"):
        return None
    return grid if args["search"] == "grid" else args["num_samples"]


class ProgressLine(tune.Callback):
    def __init__(
        self,
        contract: MetricContract,
        estimates: dict | None = None,
        interval: float = 15.0,
        stream=None,
        total: int | None = None,
    ):
        self.contract = contract
        self.total = total  # trials the sweep will run (Tune creates them lazily under --max-concurrent)
        self.estimates = dict(estimates or {})  # config hash -> estimated seconds (cost model)
        self.interval = interval
        self.stream = stream or sys.stdout
        self._start = time.time()
        self._last = 0.0
        self._finished: list[tuple[float, float]] = []  # (measured seconds, estimate)
        self._started: dict[str, float] = {}
        self._best = None
        self._ended: dict[str, str] = {}  # trial id -> its state once Tune ended it (`state`), until it starts again
        self._progress: dict[str, float] = {}  # trial id -> the `progress` of its latest result

    def __getstate__(self):
        state = dict(self.__dict__)
        state["stream"] = None
        state["_ended"] = {}  # a restored sweep's trials may run again
        return state

    def __setstate__(self, state):
        state.setdefault("_ended", {})  # pickled before these were kept
        state.setdefault("_progress", {})
        self.__dict__.update(state)
        self.stream = sys.stdout

    def setup(self, **info):
        self._start = time.time()

    def on_trial_start(self, iteration, trials, trial, **info):
        self._started.setdefault(trial.trial_id, time.time())
        self._ended.pop(trial.trial_id, None)

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._ended.pop(trial.trial_id, None)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._progress[trial.trial_id] = float(result.get("progress") or 0.0)
        value = result.get(self.contract.primary)
        if value is not None and self.contract.better(float(value), None if self._best is None else self._best[0]):
            self._best = (float(value), self.contract.label_of(trial.config))

    def on_trial_complete(self, iteration, trials, trial, **info):
        measured = (trial.last_result or {}).get("wall_time_s")
        if measured:
            self._finished.append((float(measured), self._estimate(trial)))
        self.print_line(trials)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.print_line(trials)

    def on_step_end(self, iteration, trials, **info):
        if time.time() - self._last >= self.interval:
            self.print_line(trials)

    def on_experiment_end(self, trials, **info):
        self.print_line(trials)

    def _estimate(self, trial) -> float:
        return float(self.estimates.get(config_hash(trial.config), 0.0))

    def _scale(self) -> float | None:
        """Measured seconds per estimated second, over the finished trials (None before any)."""
        if not self._finished:
            return None
        measured = sum(m for m, _ in self._finished)
        estimated = sum(e for _, e in self._finished)
        return measured / estimated if estimated > 0 else None

    def _left(self, trial, now: float, scale: float | None, mean: float) -> float:
        expected = self._estimate(trial) * scale if scale else mean
        if trial.status != "RUNNING":
            return expected
        elapsed = now - self._started.get(trial.trial_id, now)
        done = self._progress.get(trial.trial_id, 0.0)
        if 0 < done < 1:
            return elapsed * (1 - done) / done
        return max(expected - elapsed, 0.1 * elapsed)

    @staticmethod
    def state(trial) -> str:
        """The trial's state for the line, from Tune's own: TERMINATED only for a trial that finished (its
        last result is `done`: its last epoch, or stopped by the scheduler), ERROR for one that failed,
        STOPPED for one Tune ended without finishing it (the sweep stopping, a lost store)."""
        if trial.status != "TERMINATED":
            return trial.status
        result = trial.last_result or {}
        if result.get("trial_failed"):
            return "ERROR"
        return "TERMINATED" if result.get("done") else "STOPPED"

    def _state_of(self, trial) -> str:
        """`state`, an ended trial's read once (it changes only if the trial starts again)."""
        if trial.status != "TERMINATED":
            return trial.status
        known = self._ended.get(trial.trial_id)
        if known is None:
            known = self._ended[trial.trial_id] = self.state(trial)
        return known

    def line(self, trials) -> str:
        counts = {"TERMINATED": 0, "RUNNING": 0, "PENDING": 0, "ERROR": 0, "PAUSED": 0, "STOPPED": 0}
        for trial in trials:
            key = self._state_of(trial)
            counts[key] = counts.get(key, 0) + 1
        not_created = max(0, (self.total or 0) - len(trials))
        now = time.time()
        text = f"[{_clock(now - self._start)} elapsed"
        waiting = [t for t in trials if t.status in ("PENDING", "PAUSED", "RUNNING")]
        if self._finished and waiting:
            scale = self._scale()
            mean = sum(m for m, _ in self._finished) / len(self._finished)
            work = sum(self._left(t, now, scale, mean) for t in waiting)
            text += f" | ~{_clock(work / max(1, counts['RUNNING']))} left"
        text += (
            f"] trials {counts['TERMINATED']}/{len(trials) + not_created} done, {counts['RUNNING']} running, "
            f"{counts['PENDING'] + counts['PAUSED'] + not_created} pending, {counts['ERROR']} errored"
            + (f", {counts['STOPPED']} stopped unfinished" if counts["STOPPED"] else "")
        )
        if self._best:
            text += f" | best {title(self.contract.primary)} {self._best[0]:.2f} ({self._best[1]})"
        return text

    def print_line(self, trials) -> None:
        self._last = time.time()
        print(self.line(trials), file=self.stream, flush=True)
