"""`--seeds-by-need`: a Ray Tune Searcher that runs a grid's seeds in rounds, only where the
conclusion is still open (the rule and its statistics: trainables/core/seed_need.py, docs/methods/search.md).

Round 0 suggests every configuration (the grid's configs less the seed axis) with its first
`--initial-seeds` seeds, in the order of `--seeds`; when every trial of a round has finished, each
group of configurations (the contract's row axes: e.g. one model; every layer of it compared) is
decided on the contract's primary metric, and each configuration whose conclusion is open gets its
next seed. The sweep ends when no configuration gets one. Each round's decisions (the interval, and
why a configuration got or did not get another seed) are printed and logged on the sweep's MLflow
parent run as `seeds_by_need/round_<k>.json`, plus the metric `seed_round_trials` per round. The
searcher's state is saved by Tune with the experiment (`searcher-state-*.pkl`, sealed like Tune's
other pickles), so `--resume` continues at the round it was in. A trial reused from a finished run
(sweeps/engine/reuse.py, e.g. on a sweep that `--extend`s another) counts with its recorded value where a
round asks for it, and is not run: an extended sweep continues the rounds where they stand.
"""

from __future__ import annotations

import json
import pickle
import sys

from ray.tune.search import Searcher

from trainables.core.errors import SweepInputError
from trainables.core.seed_need import decide


def check(args, contract) -> None:
    """Refuse, before anything runs, a seeds-by-need sweep that has no seeds to decide on."""
    seeds = getattr(args, "seeds", None)
    if contract.seed != "seed" or seeds is None:  # e.g. SED's replicas: distinct teachers, not seeds
        raise SweepInputError(
            "--seeds-by-need needs a grid with a --seeds axis; this method's grid has none: drop --seeds-by-need"
        )
    if len(seeds) <= args.initial_seeds:
        raise SweepInputError(
            f"--seeds-by-need: --seeds allows {len(seeds)} seed(s), not more than --initial-seeds "
            f"{args.initial_seeds}: nothing left to decide; pass more seeds (e.g. --seeds 0-4) or drop --seeds-by-need"
        )
    if args.search != "grid":
        raise SweepInputError(
            f"--seeds-by-need runs the grid's seeds in rounds; it cannot be combined with --search {args.search}"
        )


def config_key(config: dict, seed_axis: str) -> str:
    return json.dumps({k: v for k, v in config.items() if k != seed_axis}, sort_keys=True, default=str)


class SeedsByNeed(Searcher):
    """Suggests the grid's trials round by round (see the module docstring)."""

    def __init__(self, configs, contract, initial: int, width: float, pooled: bool = True, log=None, known=None):
        super().__init__(metric=contract.primary, mode=contract.mode)
        self.known = dict(known or {})  # config_key(config, "") -> primary value of a trial reused, not run
        self.contract, self.initial, self.width, self.pooled, self.log = contract, initial, width, pooled, log
        seed = contract.seed
        self.configs: dict[str, list[dict]] = {}  # configuration -> its grid configs in seed order
        for config in configs:
            self.configs.setdefault(config_key(config, seed), []).append(config)
        self.round = 0
        self.queue: list[dict] = [c for cs in self.configs.values() for c in cs[:initial]]
        self.pending: dict[str, str] = {}  # trial id -> configuration
        self.started: dict[str, int] = {k: 0 for k in self.configs}  # seeds suggested per configuration
        self.values: dict[str, list[float]] = {k: [] for k in self.configs}
        self.failed: dict[str, int] = {k: 0 for k in self.configs}
        self.history: list[dict] = []
        self.finished = False

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True  # the contract's metric and mode are this searcher's own

    def suggest(self, trial_id: str):
        while not self.finished:
            if not self.queue:
                if self.pending:
                    return None  # the round is still running
                self._next_round()  # a round whose every trial was known already: decided at once
                continue
            config = self.queue.pop(0)
            key = config_key(config, self.contract.seed)
            self.started[key] += 1
            value = self.known.get(config_key(config, ""))
            if value is not None:  # finished before (a reused trial): its value counts, nothing runs
                self.values[key].append(float(value))
                continue
            self.pending[trial_id] = key
            return dict(config)
        return Searcher.FINISHED

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        key = self.pending.pop(trial_id, None)
        if key is None:
            return
        value = (result or {}).get(self.contract.primary)
        if error or value is None or value != value:
            self.failed[key] += 1
        else:
            self.values[key].append(float(value))
        if not self.pending and not self.queue:
            self._next_round()

    def _group(self, key: str) -> tuple:
        config = self.configs[key][0]
        return tuple(config.get(axis) for axis in self.contract.groups)

    def _next_round(self) -> None:
        groups: dict[tuple, list[str]] = {}
        for key in self.configs:
            groups.setdefault(self._group(key), []).append(key)
        rows = []
        for members in groups.values():
            values = {k: self.values[k] for k in members}
            allowed = {k: len(self.configs[k]) - self.failed[k] for k in members}
            for d in decide(values, allowed, self.width, self.contract.mode, pooled=self.pooled):
                more = d.more and self.started[d.key] < len(self.configs[d.key])
                if more:
                    self.queue.append(self.configs[d.key][self.started[d.key]])
                rows.append(
                    {
                        "configuration": self.contract.label_of({**self.configs[d.key][0], self.contract.seed: None}),
                        "seeds": d.interval.n,
                        "mean": d.interval.mean,
                        "low": d.interval.low,
                        "high": d.interval.high,
                        "another_seed": more,
                        "why": d.reason,
                    }
                )
        record = {"round": self.round, "next_trials": len(self.queue), "decisions": rows}
        self.history.append(record)
        print(
            f"seeds by need, round {self.round}: {len(self.queue)} configuration(s) get another seed"
            + "".join(
                f"\n  {r['configuration']}: n={r['seeds']} mean {r['mean']:.2f} [{r['low']:.2f}, {r['high']:.2f}] "
                f"-> {'another seed' if r['another_seed'] else 'stop'} ({r['why']})"
                for r in rows
            ),
            flush=True,
        )
        if self.log is not None:
            self.log(record)
        self.round += 1
        self.finished = not self.queue

    def get_state(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("log",)}

    def set_state(self, state: dict) -> None:
        self.__dict__.update(state)

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.get_state(), f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.set_state(pickle.load(f))


class MlflowRounds:
    """Logs a round's decisions on the parent run (picklable: a client is made per call)."""

    def __init__(self, tracking_uri: str, parent_run_id: str):
        self.tracking_uri, self.parent_run_id = tracking_uri, parent_run_id

    def __call__(self, record: dict) -> None:
        from mlflow import MlflowClient

        try:
            client = MlflowClient(tracking_uri=self.tracking_uri)
            client.log_dict(self.parent_run_id, record, f"seeds_by_need/round_{record['round']}.json")
            client.log_metric(self.parent_run_id, "seed_round_trials", record["next_trials"], step=record["round"])
        except Exception as error:  # the round's decisions are also printed and kept in the searcher's state
            print(f"warning: round {record['round']}'s decisions not logged to MLflow: {error}", file=sys.stderr)


def tuner(plan, trainable, run_config, ordered: list[dict], placeholders: dict):
    """The Tuner of a seeds-by-need sweep (`ordered`: the grid's configs, costliest first)."""
    from ray import tune
    from ray.tune.search import ConcurrencyLimiter

    args = plan.args
    searcher = SeedsByNeed(
        ordered,
        plan.contract,
        args["initial_seeds"],
        args["seed_ci_width"],
        pooled=args["seed_spread"] == "pooled",
        log=MlflowRounds(plan.mlflow_uri, plan.parent_run_id),
        known={
            config_key(item.config, ""): item.run.data.metrics[plan.contract.primary]
            for item in plan.reused
            if plan.contract.primary in item.run.data.metrics
        },
    )
    search = ConcurrencyLimiter(searcher, max_concurrent=args["max_concurrent"]) if args["max_concurrent"] else searcher
    tune_config = tune.TuneConfig(
        search_alg=search, num_samples=len(plan.configs), reuse_actors=not args.get("no_reuse_actors")
    )
    return tune.Tuner(trainable, param_space=placeholders, tune_config=tune_config, run_config=run_config)
