"""A console progress line a person can read while a sweep runs:

    [12:04 elapsed | ~31:10 left] trials 14/40 done, 2 running, 23 pending, 1 errored | best test_spearman_at_best_dev 81.23 (bert-base-cased L9 s2)

Printed at most every `interval` seconds and whenever a trial finishes or errors. The remaining
time is the work left (a mean finished-trial time for each pending trial, and what is left of
it for each running one) divided by the number of trials running at once.
"""
from __future__ import annotations

import sys
import time

from ray import tune


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class ProgressLine(tune.Callback):
    def __init__(self, metric: str, interval: float = 15.0, stream=None):
        self.metric = metric
        self.interval = interval
        self.stream = stream or sys.stdout
        self._start = time.time()
        self._last = 0.0
        self._finished_times: list[float] = []
        self._started: dict[str, float] = {}
        self._best = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["stream"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.stream = sys.stdout

    def setup(self, **info):
        self._start = time.time()

    def on_trial_start(self, iteration, trials, trial, **info):
        self._started.setdefault(trial.trial_id, time.time())

    def on_trial_result(self, iteration, trials, trial, result, **info):
        value = result.get(self.metric)
        if value is not None and (self._best is None or value > self._best[0]):
            config = trial.config
            label = f"{str(config.get('model', '')).rstrip('/').split('/')[-1]} L{config.get('layer')} s{config.get('seed')}"
            self._best = (float(value), label)

    def on_trial_complete(self, iteration, trials, trial, **info):
        elapsed = (trial.last_result or {}).get("wall_time_s")
        if elapsed:
            self._finished_times.append(float(elapsed))
        self.print_line(trials)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.print_line(trials)

    def on_step_end(self, iteration, trials, **info):
        if time.time() - self._last >= self.interval:
            self.print_line(trials)

    def on_experiment_end(self, trials, **info):
        self.print_line(trials)

    def line(self, trials) -> str:
        counts = {"TERMINATED": 0, "RUNNING": 0, "PENDING": 0, "ERROR": 0, "PAUSED": 0}
        for trial in trials:
            counts[trial.status] = counts.get(trial.status, 0) + 1
        elapsed = time.time() - self._start
        text = f"[{_clock(elapsed)} elapsed"
        if self._finished_times and counts["PENDING"] + counts["RUNNING"] + counts["PAUSED"]:
            mean = sum(self._finished_times) / len(self._finished_times)
            now = time.time()
            work = mean * (counts["PENDING"] + counts["PAUSED"]) + sum(
                max(0.0, mean - (now - self._started.get(t.trial_id, now))) for t in trials if t.status == "RUNNING")
            text += f" | ~{_clock(work / max(1, counts['RUNNING']))} left"
        text += (
            f"] trials {counts['TERMINATED']}/{len(trials)} done, {counts['RUNNING']} running, "
            f"{counts['PENDING'] + counts['PAUSED']} pending, {counts['ERROR']} errored"
        )
        if self._best:
            text += f" | best {self.metric} {self._best[0]:.2f} ({self._best[1]})"
        return text

    def print_line(self, trials) -> None:
        self._last = time.time()
        print(self.line(trials), file=self.stream, flush=True)
