"""`--search pareto`: a multi-objective search of the size-accuracy front, with early stopping by
non-dominated rank (MO-ASHA).

Objectives: the contract's primary metric (its best dev score so far, in the contract's mode) and
a size to minimise (`--pareto-size`): `params` (the truncated encoder's parameters,
`params_truncated`) or `encode-time` (the measured encode time per dev sentence,
`encode_ms_per_sentence`).

Space: every axis of the method's grid that varies (e.g. model, layer, seed) becomes a categorical
choice over the grid's values; `--pareto-tune KEYS` adds those keys of the method's Optuna space
(`Method.search_space`, e.g. `lr`), or, written `KEY=V1:V2:V3`, a choice among those values of it
(e.g. `lr=2e-5:5e-5:1e-4`: the same points as a grid over three learning rates). Optuna's
multi-objective TPE sampler proposes the points,
through Ray Tune's `OptunaSearch` with a list of metrics and modes; a point proposed before is
told to Optuna as pruned and another is asked for (`DistinctOptunaSearch`), so no grid point runs
twice, and the search ends early once every point of an all-categorical space has run.

Early stopping (`ParetoASHA`): asynchronous successive halving with rungs at epochs
g, g·η, g·η², ... below `--epochs` (g = 1, η = `--pareto-eta`). A trial reaching a rung is
placed among every trial recorded at that rung by `trainables.core.pareto.survival_order`
(non-dominated rank, then crowding distance); it goes on if it is among the best ceil(n / η) of
the n recorded there, or on the front there (rank 0: no trial recorded at the rung is both smaller
and better), and is stopped otherwise. Without the second rule the quota's crowding ties go to the
front's two ends, and its middle (the mid-size layers) stops at the first rung. The rung records are kept in
`<sweep dir>/pareto-rungs.state` (JSON; not named *.json, which sweeps/engine/seal.py treats as Tune's
state), so `--resume` judges later trials against every earlier one.
Each result a trial reports at a rung carries `pareto_rung` (the epoch), `pareto_rank` (its
non-dominated rank there) and `pareto_kept` (1 or 0): `ParetoRecorder`, placed before the MLflow
callback, puts them into the result that is logged. A trial's last epoch is its last rung: there it
is ranked among the trials that finished, and stopped by nothing.
"""

from __future__ import annotations

import json
import math
from argparse import Namespace

import numpy as np
from ray.tune import Callback
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch
from ray.tune.search.sample import Categorical, Domain

from sweeps.engine import ray_internals, storage
from trainables.core import object_storage
from trainables.core.errors import SweepInputError
from trainables.core.pareto import nondominated_ranks, survival_order
from trainables.core.schema import config_hash

SIZE_METRICS = {"params": "params_truncated", "encode-time": "encode_ms_per_sentence"}
SIZE_AXES = ("model", "layer", "dim", "width")
RUNGS_FILE = "pareto-rungs.state"


def milestones(max_t: int, grace_period: int, eta: int) -> list[int]:
    """The rungs (epochs) at which trials are judged: g, g·η, ... strictly below max_t."""
    rungs, t = [], grace_period
    while t < max_t:
        rungs.append(t)
        t *= eta
    return rungs


def rung_decision(records: dict, key: str, eta: int) -> tuple[bool, int]:
    """(kept, rank) of trial `key` among `records` (trial key -> objective vector to minimise)."""
    ids = list(records)
    points = np.array([records[i] for i in ids], dtype=float)
    order = survival_order(points)
    position = int(np.flatnonzero(order == ids.index(key))[0])
    rank = int(nondominated_ranks(points)[ids.index(key)])
    return position < math.ceil(len(ids) / eta) or rank == 0, rank


class ParetoASHA(FIFOScheduler):
    """MO-ASHA: asynchronous successive halving by non-dominated rank (see the module docstring)."""

    supports_buffered_results = False  # each result is judged as it comes

    def __init__(self, metric: str, mode: str, size_metric: str, max_t: int, eta: int = 3, state_path=None):
        super().__init__()
        TrialScheduler.set_search_properties(self, metric, mode)  # sets `self.metric` (Tune's later call: the override)
        self.objective_mode, self.size_metric = mode, size_metric
        self.max_t, self.eta, self.state_path = int(max_t), int(eta), state_path
        self.rungs = milestones(self.max_t, 1, self.eta)
        self.records: dict[str, dict[str, list[float]]] | None = None  # rung -> config hash -> objectives
        self.decisions: dict[str, dict] = {}  # trial id -> its latest rung's {pareto_rung, pareto_rank, pareto_kept}

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return True  # metric and mode are this scheduler's own

    def _load(self) -> dict:
        if self.records is None:
            self.records = read_rungs(self.state_path, self.eta, self.max_t) if self.state_path else {}
        return self.records

    def objectives(self, result: dict) -> list[float]:
        score = float(result[self.metric])
        return [-score if self.objective_mode == "max" else score, float(result[self.size_metric])]

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        iteration = int(result.get("training_iteration", 0))
        if iteration not in self.rungs and iteration != self.max_t or self.metric not in result:
            return TrialScheduler.CONTINUE
        return TrialScheduler.CONTINUE if self.judge(trial, result) else TrialScheduler.STOP

    def judge(self, trial, result: dict) -> bool:
        """Record the trial at the rung of `result` and say whether it goes on (the last rung stops nothing).
        Records are keyed by the trial's config: a trial lost in a kill and proposed again after --resume
        replaces its own record."""
        if self.size_metric not in result:
            raise SweepInputError(
                f"--search pareto: the trials report no {self.size_metric!r}; pick another --pareto-size"
            )
        iteration = int(result["training_iteration"])
        records = self._load().setdefault(str(iteration), {})
        key = config_hash(trial.config)
        records[key] = self.objectives(result)
        kept, rank = rung_decision(records, key, self.eta)
        kept = kept or iteration >= self.max_t
        self.decisions[trial.trial_id] = {"pareto_rung": iteration, "pareto_rank": rank, "pareto_kept": int(kept)}
        if self.state_path:
            storage.write_json(self.state_path, {"rungs": self.records, "eta": self.eta, "max_t": self.max_t})
        return kept

    def debug_string(self) -> str:
        return f"ParetoASHA: rungs {self.rungs}, eta {self.eta}, max_t {self.max_t}"


def read_rungs(path: str, eta: int, max_t: int) -> dict:
    """The rung records at `path` ({} before the first rung was reached), checked as strictly as
    sweep.json: JSON written by this scheduler for the same --pareto-eta and --epochs, every rung one of
    the scheduler's, every record two finite numbers. SweepInputError (one line) on a file that cannot be
    read or is not such a record: it is never treated as empty, so it is never overwritten."""
    import math as _math

    try:
        data = object_storage.read_bytes(path)
    except OSError as error:
        raise SweepInputError(
            f"{path}: the Pareto search's rung records cannot be read ({error.strerror or type(error).__name__}); "
            "make the file readable again and resume (deleting it judges the remaining trials without the "
            "earlier records)"
        ) from None
    if data is None:
        return {}
    try:
        value = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        value = None
    allowed = {str(r) for r in milestones(max_t, 1, eta)} | {str(max_t)}

    def problem() -> str | None:
        if not isinstance(value, dict) or not isinstance(value.get("rungs"), dict):
            return "not a JSON object with a 'rungs' object"
        if value.get("eta") != eta or value.get("max_t") != max_t:
            return f"written for eta {value.get('eta')!r} and {value.get('max_t')!r} epochs, not {eta} and {max_t}"
        for rung, records in value["rungs"].items():
            if rung not in allowed or not isinstance(records, dict):
                return f"rung {rung!r} is not one of this search's rungs ({', '.join(sorted(allowed, key=int))})"
            for key, point in records.items():
                ok = isinstance(point, list) and len(point) == 2
                if not ok or not all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and _math.isfinite(x) for x in point
                ):
                    return f"the record {key!r} at rung {rung} is {point!r}, not two finite numbers"
        return None

    found = problem()
    if found:
        raise SweepInputError(
            f"{path}: the Pareto search's rung records are damaged ({found}); restore the file, or delete it to "
            "judge the remaining trials without the earlier records"
        )
    return value["rungs"]


class DistinctOptunaSearch(OptunaSearch):
    """OptunaSearch that proposes each point once (see the module docstring)."""

    MAX_ASKS = 1000

    def __init__(self, *args, points: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._points, self._seen = points, set()

    def suggest(self, trial_id: str):
        for _ in range(self.MAX_ASKS):
            if self._points is not None and len(self._seen) >= self._points:
                return Searcher.FINISHED
            config = super().suggest(trial_id)
            if not isinstance(config, dict):
                return config
            key = json.dumps(config, sort_keys=True, default=str)
            if key not in self._seen:
                self._seen.add(key)
                return config
            ray_internals.prune_optuna_trial(self, trial_id)
        return Searcher.FINISHED


class ParetoRecorder(Callback):
    """Copies the scheduler's rung decision into the result the later callbacks (MLflow) log."""

    def __init__(self, scheduler: ParetoASHA):
        self.scheduler = scheduler

    def on_trial_result(self, iteration, trials, trial, result, **info):
        at = result.get("training_iteration")
        decision = self.scheduler.decisions.get(trial.trial_id)
        if at == self.scheduler.max_t and result.get("done") and (decision or {}).get("pareto_rung") != at:
            self.scheduler.judge(trial, result)  # Tune does not ask the scheduler about a trial's last result
            decision = self.scheduler.decisions[trial.trial_id]
        if decision and decision["pareto_rung"] == at:
            result.update(decision)


def check(args, configs: list[dict], contract, method_cls) -> None:
    """Refuse, before anything runs, a pareto search that has nothing to search or no size."""
    if args.pareto_eta < 2:
        raise SweepInputError(f"--pareto-eta must be 2 or more, got {args.pareto_eta}")
    varying = [k for k in configs[0] if len({repr(c.get(k)) for c in configs}) > 1]
    if not any(axis in varying for axis in SIZE_AXES):
        raise SweepInputError(
            "--search pareto needs a size axis with several values in the grid (e.g. --layers 0,3,6 or several "
            f"--models); this grid varies only {', '.join(varying) or 'nothing'}"
        )
    derived = [k for k in varying if k not in contract.axes]
    if derived:
        raise SweepInputError(
            f"--search pareto searches the grid's axes ({', '.join(contract.axes)}); these keys vary with them and "
            f"cannot be searched: {', '.join(derived)}"
        )
    tuned = list(parse_tuned(args.pareto_tune))
    if tuned:
        try:
            space = method_cls.search_space(Namespace(**vars(args)), configs[0])
        except SweepInputError:
            space = {}
        tunable = [k for k, v in space.items() if isinstance(v, Domain) and k not in varying]
        missing = [k for k in tuned if k not in tunable]
        if missing:
            raise SweepInputError(
                f"--pareto-tune: {', '.join(missing)} is not in {method_cls.name}'s search space; choose from "
                f"{', '.join(tunable) or 'nothing (this method has no search space)'}"
            )


def _value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_tuned(text: str) -> dict:
    """`--pareto-tune`: key -> None (the method's own distribution) or the list of values to choose from."""
    tuned = {}
    for entry in (e.strip() for e in (text or "").split(",")):
        if entry:
            key, listed, values = entry.partition("=")
            choices = [_value(v.strip()) for v in values.split(":") if v.strip()] if listed else None
            if listed and not choices:
                raise SweepInputError(f"--pareto-tune {entry!r}: give the values as KEY=V1:V2, e.g. lr=2e-5:5e-5")
            tuned[key.strip()] = choices
    return tuned


def search_space(args: dict, configs: list[dict], method_cls) -> dict:
    """The grid's varying axes as categorical choices, the tuned keys from the method's space."""
    from ray import tune

    varying = [k for k in configs[0] if len({repr(c.get(k)) for c in configs}) > 1]
    space = {k: v for k, v in configs[0].items() if k not in varying}
    for key in varying:
        space[key] = tune.choice(sorted({c[key] for c in configs}, key=lambda v: (str(type(v)), v)))
    tuned = parse_tuned(args.get("pareto_tune") or "")
    if tuned:
        method_space = method_cls.search_space(Namespace(**args), configs[0])
        space.update({k: tune.choice(v) if v else method_space[k] for k, v in tuned.items()})
    return space


def tuner(plan, trainable, run_config):
    """The Tuner of a pareto search: Optuna's multi-objective sampler and ParetoASHA."""
    from ray import tune
    from ray.tune.search import ConcurrencyLimiter

    args, contract = plan.args, plan.contract
    size = SIZE_METRICS[args["pareto_size"]]
    scheduler = ParetoASHA(
        contract.primary,
        contract.mode,
        size,
        max_t=max(1, int(args.get("epochs") or 1)),
        eta=args["pareto_eta"],
        state_path=storage.join(plan.sweep_dir, RUNGS_FILE),
    )
    run_config.callbacks.insert(0, ParetoRecorder(scheduler))
    space = search_space(args, plan.configs, plan.method_cls)
    domains = [v for v in space.values() if isinstance(v, Domain)]
    discrete = all(isinstance(d, Categorical) for d in domains)
    searcher = DistinctOptunaSearch(
        metric=[contract.primary, size],
        mode=[contract.mode, "min"],
        seed=plan.configs[0].get(contract.seed or "", 0),
        points=math.prod(len(d.categories) for d in domains) if discrete else None,
    )
    tune_config = tune.TuneConfig(
        num_samples=args["num_samples"],
        reuse_actors=not args.get("no_reuse_actors"),
        search_alg=ConcurrencyLimiter(searcher, max_concurrent=args["max_concurrent"] or 2),
        scheduler=scheduler,
    )
    return tune.Tuner(trainable, param_space=space, tune_config=tune_config, run_config=run_config)
