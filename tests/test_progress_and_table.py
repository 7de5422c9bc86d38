"""The console a person watches: the time left comes from the cost model (not the mean of the
cheap trials that finish first), the best is named by the method's contract, and the end table
shows no spread for a single seed."""

import pickle

import pandas as pd

from sweeps.engine.progress import ProgressLine
from sweeps.engine.summary import summary_table
from trainables.core.method import MetricContract
from trainables.core.schema import config_hash

CONTRACT = MetricContract(
    primary="best_dev_spearman",
    report="test_spearman_at_best_dev",
    axes=("model", "layer", "seed"),
    select="layer",
    seed="seed",
    short={"layer": "L", "seed": "s"},
)


class FakeTrial:
    def __init__(self, layer, status, wall=None, progress=None):
        self.config = {"model": "m", "layer": layer, "seed": 0}
        self.trial_id, self.status = f"t{layer}", status
        self.last_result = {"wall_time_s": wall, "progress": progress, "done": status == "TERMINATED"}


def test_time_left_scales_the_cost_model_by_the_finished_trials(monkeypatch):
    trials = [FakeTrial(0, "TERMINATED", wall=10.0), FakeTrial(12, "PENDING"), FakeTrial(6, "RUNNING", progress=0.5)]
    estimates = {config_hash(t.config): seconds for t, seconds in zip(trials, (1.0, 12.0, 6.0))}
    line = ProgressLine(CONTRACT, estimates=estimates, stream=open("/dev/null", "w"))
    clock = [1000.0]
    monkeypatch.setattr("sweeps.engine.progress.time.time", lambda: clock[0])
    line.setup()
    line.on_trial_start(0, trials, trials[2])
    line.on_trial_result(0, trials, trials[2], trials[2].last_result)
    line.on_trial_complete(0, trials, trials[0])
    clock[0] += 30  # the running trial is half done after 30 s: 30 s left; the pending one: 12 x 10 s
    text = line.line(trials)
    assert "~2:30 left" in text, (
        text
    )  # (120 + 30) s over one running trial; the mean of the finished trials would say 0:10
    line.on_trial_result(0, trials, trials[2], {"best_dev_spearman": 71.5})
    assert "best dev Spearman 71.50 (m L6 s0)" in line.line(trials)


def test_a_running_trial_past_its_estimate_is_never_zero_left(monkeypatch):
    trials = [FakeTrial(0, "TERMINATED", wall=10.0), FakeTrial(1, "RUNNING")]
    line = ProgressLine(CONTRACT, estimates={config_hash(t.config): 1.0 for t in trials}, stream=open("/dev/null", "w"))
    clock = [0.0]
    monkeypatch.setattr("sweeps.engine.progress.time.time", lambda: clock[0])
    line.on_trial_start(0, trials, trials[1])
    line.on_trial_complete(0, trials, trials[0])
    clock[0] += 40.0
    assert "~0:04 left" in line.line(trials)


def test_end_table_shows_no_spread_for_one_seed_and_picks_by_dev():
    frame = pd.DataFrame(
        {
            "config/model": ["m"] * 3,
            "config/layer": [0, 6, 12],
            "config/seed": [0, 0, 0],
            "best_dev_spearman": [50.0, 80.0, 70.0],
            "test_spearman_at_best_dev": [49.0, 75.0, 79.0],
        }
    )
    table = summary_table(frame, CONTRACT)
    row = table.splitlines()[-1]
    assert "±" not in table and row.split()[:4] == ["m", "6", "80.00", "75.00"], table
    two_seeds = pd.concat([frame, frame.assign(**{"config/seed": 1, "best_dev_spearman": [50.0, 82.0, 70.0]})])
    assert "81.00 ± 1.41" in summary_table(two_seeds, CONTRACT)


def test_the_total_counts_trials_not_yet_created_and_failed_trials_are_not_done():
    """Under --max-concurrent Tune creates trials lazily: 2 of 6 exist, so 4 more are pending."""
    trials = [FakeTrial(0, "TERMINATED", wall=1.0), FakeTrial(1, "TERMINATED", wall=1.0)]
    trials[1].last_result["trial_failed"] = "TrialFailure: training diverged"
    line = ProgressLine(CONTRACT, stream=open("/dev/null", "w"), total=6)
    text = line.line(trials)
    assert "trials 1/6 done, 0 running, 4 pending, 1 errored" in text, text


def test_trials_tune_ended_unfinished_are_never_counted_done():
    """A store lost mid-sweep: Tune ends the running trials (TERMINATED, their last result not `done`);
    the line counts only the trial that finished."""
    trials = [FakeTrial(0, "TERMINATED", wall=1.0), FakeTrial(1, "TERMINATED"), FakeTrial(2, "TERMINATED")]
    for trial in trials[1:]:
        trial.last_result["done"] = False
    text = ProgressLine(CONTRACT, stream=open("/dev/null", "w"), total=10).line(trials)
    assert "trials 1/10 done, 0 running, 7 pending, 0 errored, 2 stopped unfinished" in text, text


def test_seeds_by_need_counts_the_trials_its_rounds_suggested_not_the_maximum():
    """A seeds-by-need sweep of at most 35 trials whose rounds stopped at 14: 14/14 done, none pending."""
    from sweeps.engine.progress import planned_trials

    trials = [FakeTrial(layer, "TERMINATED", wall=1.0) for layer in range(14)]
    by_need = {"search": "grid", "seeds_by_need": True}
    text = ProgressLine(CONTRACT, stream=open("/dev/null", "w"), total=planned_trials(by_need, 35)).line(trials)
    assert "trials 14/14 done, 0 running, 0 pending" in text, text
    assert planned_trials({"search": "grid"}, 35) == 35
    assert planned_trials({"search": "optuna", "num_samples": 20}, 1) == 20


class CountingTrial(FakeTrial):
    """A trial whose `last_result` counts its reads, as Ray's property builds its answer anew on each."""

    def __init__(self, layer, status, done=True):
        super().__init__(layer, status, wall=1.0)
        self._result, self.reads = {"wall_time_s": 1.0, "done": done}, 0

    @property
    def last_result(self):
        self.reads += 1
        return self._result

    @last_result.setter
    def last_result(self, value):
        self._result = value


def test_the_line_reads_an_ended_trials_result_once_and_no_waiting_trials_result():
    """The line is printed after every trial that ends: at 1,000 trials, reading every trial's last result each
    time (Ray builds it anew, and waits for a default one from the actor of a trial that has not reported) took
    15 s. A running trial's progress comes from its reported results."""
    ended = [CountingTrial(i, "TERMINATED") for i in range(50)]
    waiting = [CountingTrial(50 + i, "RUNNING" if i < 10 else "PENDING") for i in range(50)]
    trials = ended + waiting
    line = ProgressLine(CONTRACT, estimates={config_hash(t.config): 1.0 for t in trials}, stream=open("/dev/null", "w"))
    line.on_trial_complete(0, trials, ended[0])  # a finished trial: the time left is shown
    for trial in waiting[:10]:
        line.on_trial_start(0, trials, trial)
    for _ in range(20):
        text = line.line(trials)
    assert "left" in text and "trials 50/100 done, 10 running, 40 pending" in text, text
    assert [t.reads for t in trials] == [2] + [1] * 49 + [0] * 50  # the first: also its wall time, once


def test_an_ended_trial_that_starts_again_is_read_anew():
    """A trial Tune ended unfinished (a lost store) and started again (--resume, a retry) is counted by its new end."""
    trial = CountingTrial(0, "TERMINATED", done=False)
    line = ProgressLine(CONTRACT, stream=open("/dev/null", "w"), total=1)
    assert "0/1 done" in line.line([trial]) and "1 stopped unfinished" in line.line([trial])
    trial.status = "RUNNING"
    line.on_trial_start(0, [trial], trial)
    assert "1 running" in line.line([trial])
    trial.status, trial.last_result = "TERMINATED", {"wall_time_s": 1.0, "done": True}
    assert "1/1 done" in line.line([trial])
    restored = pickle.loads(pickle.dumps(line))
    assert restored._ended == {} and "1/1 done" in restored.line([trial])
