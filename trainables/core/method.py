"""The method contract: what a method declares so that the sweep engine (sweeps/engine/) can plan,
pack, run, track, report and analyse it without knowing anything else about it.

A method is one registered subclass of `Method` (`@register_method("name")`) in its own package
under `trainables/methods/` (importing `trainables.methods` imports every such package, which
registers it); its sweep script in `sweeps/` calls `sweeps.engine.runner.main(method="name")`.
It declares:

- `info`: its `MethodInfo` (display name, one-line description, BibTeX citation, main metric),
  which the report, `--list-presets` and the docs read;
- `settings`: its settings, declared once and typed (trainables/core/settings.py `Setting`): its
  flags, their --help, checks, and the trial config's keys (so the MLflow params) all come from
  them; `smoke`: the setting values of `--smoke-test`; `check(args)`: refuse what no single
  setting can (values that clash), before any work. Every method receives typed values;
- `plan(args, context) -> MethodPlan`: the driver-side work done once before trials (resolving
  models, loading and tokenising data, the specs of upstream stages) and what reaches the
  trials: the trial configs (the grid), the shared `data` shipped through Ray's object store, the
  sweep-wide params, the data checksums, and each trial's cost (`TrialCost`: GPU memory and
  seconds from the method's own cost model, for packing, the GPU-hours plan and the time left);
- `metrics(args) -> MetricContract`: the primary metric and its direction, the score reported at
  the selection, the companion, the per-epoch metric that schedulers see, the axes the sweep
  varies and the axis a table selects over (e.g. the best layer per model by mean dev score);
- optionally `search_space(args, base_config)`: the Optuna space of `--search optuna`;
- optionally `presets` (name -> `Preset`: the flags of one table or figure of a paper, what it
  reproduces and the paper's published numbers; `--preset NAME`, `--list-presets`) and
  `estimate(args) -> Estimate` (trials and GPU-hours of a grid from public configs alone, without
  loading any model, for `--list-presets`);
- `trainable`: the Ray Tune Trainable class a trial runs, or its path `"package.module:Class"`, imported
  only when a plan or a trial needs it (not to print `--help` or refuse a flag).

The contract is logged on the sweep's parent run and on every trial run (`MetricContract.params`),
and the analysis groups and selects by what was logged.
"""

from __future__ import annotations

from argparse import Namespace
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trainables.core.errors import SweepInputError
from trainables.core.registry import Registry
from trainables.core.settings import Setting, config_values


@dataclass(frozen=True)
class TrialCost:
    """What one trial needs: GPU memory (bytes, for packing) and time (seconds on one whole GPU
    at the sweep's --gpu-tflops, for the GPU-hours plan and the time left); `gpu=False` for a
    trial that never touches a GPU (it gets no GPU share); `weight_bytes`: the size of the model
    its checkpoints save (0 for a trial that saves none)."""

    memory_bytes: float
    seconds: float
    gpu: bool = True
    weight_bytes: float = 0.0  # the trial's saved model (fp32), for the plan's disk figure


def best_value(means: dict, mode: str):
    """The value (e.g. a layer) whose mean primary metric over seeds is best: the highest for mode
    "max", the lowest for "min"; ties go to the lower value; NaN means are skipped (None: none left).
    The one rule by which the end-of-sweep table and the analysis select."""
    ranked = [(mean if mode == "min" else -mean, value) for value, mean in means.items() if mean == mean]
    return min(ranked)[1] if ranked else None


@dataclass(frozen=True)
class MetricContract:
    """How a method's runs are scored, selected and labelled.

    primary:    the final metric that ranks trials and selects (e.g. `best_dev_spearman`)
    report:     the held-out score shown at the selection (e.g. `test_spearman_at_best_dev`)
    companion:  a second score reported beside the primary (e.g. `test_pearson_at_best_dev`)
    epoch:      the per-step metric a scheduler (ASHA) and Optuna optimise (e.g. `dev_spearman`)
    mode:       "max" or "min"
    axes:       the config keys a sweep of the method varies, seed included, e.g. (model, layer, seed)
    select:     the axis a table picks the best value of, by the mean primary over seeds (None: none)
    seed:       the axis averaged over (None: no repeats)
    columns:    more final metrics for the end-of-sweep table (e.g. one per evaluation set)
    label:      the primary's display name
    averaged_over: what the primary, report and companion are each the mean over within one run (e.g.
                "layers": the adaptive-layer method's scores are the mean of its layers'); tables name them
                as means
    reference:  (axis, value): the rows with that value of the axis are references (e.g. each
                source encoder alone, or the untrained encoder); a table puts every row beside its own
    reference_by: the axes a row shares with its reference row (e.g. model and corpus: each
                method beside the same model untrained); where several reference rows qualify (e.g.
                every source alone, with reference_by empty), the best of them by mean primary
    """

    primary: str
    report: str
    companion: str = ""
    epoch: str = ""
    mode: str = "max"
    axes: tuple[str, ...] = ("model", "seed")
    select: str | None = None
    seed: str | None = "seed"
    columns: tuple[str, ...] = ()
    label: str = ""
    averaged_over: str = ""
    short: dict = field(default_factory=dict)  # axis -> prefix in run names, e.g. {"layer": "L", "seed": "s"}
    reference: tuple[str, str] | None = None
    reference_by: tuple[str, ...] = ()

    def __post_init__(self):
        if self.mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {self.mode!r}")
        for axis in (self.select, self.seed, self.reference[0] if self.reference else None, *self.reference_by):
            if axis is not None and axis not in self.axes:
                raise ValueError(f"{axis!r} is not one of the sweep's axes {self.axes}")

    def params(self) -> dict:
        """What the engine logs on every run, and the analysis reads back."""
        return {
            "metric_primary": self.primary,
            "metric_report": self.report,
            "metric_companion": self.companion,
            "metric_mode": self.mode,
            "sweep_axes": ",".join(self.axes),
            "select_axis": self.select or "",
            "seed_axis": self.seed or "",
            "metric_columns": ",".join(self.columns),
            "reference_rows": "=".join(self.reference) if self.reference else "",
            "reference_by": ",".join(self.reference_by),
            **({"metric_averaged_over": self.averaged_over} if self.averaged_over else {}),
        }

    @property
    def groups(self) -> tuple[str, ...]:
        """The axes that make one row of a table: every axis but the selected one and the seed."""
        return tuple(a for a in self.axes if a not in (self.select, self.seed))

    def label_of(self, config: dict) -> str:
        """A short run label, e.g. `all-MiniLM-L6-v2 L3 s0`."""
        parts = []
        for axis in self.axes:
            value = config.get(axis)
            if value is None:
                continue
            if axis in self.short:
                parts.append(f"{self.short[axis]}{value}")
            elif "/" in str(value) or axis == "model":
                parts.append(str(value).rstrip("/").split("/")[-1])
            else:
                parts.append(f"{axis}={value}")
        return " ".join(parts)

    def better(self, a: float, b: float | None) -> bool:
        return b is None or (a > b if self.mode == "max" else a < b)


@dataclass(frozen=True)
class PublishedScore:
    """One row of a paper's table: the score of `model` under `method` on `task` at the layer the
    paper selected (scores x100; `params_m` in millions, as the paper counts them)."""

    method: str
    model: str
    layer: int
    params_m: float
    dev_spearman: float
    dev_pearson: float
    test_spearman: float
    test_pearson: float
    selection: str = "best"  # "best": the layer with the best dev score; "last": the model's last layer
    task: str = "stsb"


@dataclass(frozen=True)
class PublishedColumn:
    """A column of a paper's table other than the ELECTRA paper's layer rows (`PublishedRow`): its
    name as the paper prints it, the run metrics whose mean per run is the paper's number (e.g. the
    five STS sets of an "Avg." column, each `<set>_spearman_wmean`), and the statistic over the
    matching runs: "mean" (shown with the std), "max" or "std". A column with `of` (names of other
    columns) is their mean in the same row instead, e.g. a paper's Avg. over tasks that different
    runs score (TSDAE's Table 2: each task's runs train on its own corpus)."""

    name: str
    metrics: tuple[str, ...]
    stat: str = "mean"
    of: tuple[str, ...] = ()


@dataclass(frozen=True)
class PublishedRow:
    """A row of a paper's table, compared by `analysis/published.py` with the runs whose params
    equal `match` (param -> value, or a tuple of accepted values): `values` holds the paper's
    number per column name of the preset's `columns` (scores x100; a column the paper leaves empty
    is left out). `group` is the part of the table the row sits in (e.g. "ensemble models")."""

    label: str
    match: tuple[tuple[str, Any], ...]
    values: tuple[tuple[str, float], ...]
    group: str = ""


@dataclass(frozen=True)
class Preset:
    """The grid of one table or figure of a paper, by name.

    method:     the registered method that runs it (its script is `script`)
    reproduces: what it reproduces, e.g. "Table 1: TMFT, WS+TMFT and DAPT+TMFT on STS-B"
    flags:      flag values (argparse dests) the preset sets; flags given on the command line win
    source:     the citation of the published numbers
    published:  the paper's numbers for the report to put beside the sweep's (empty: plot only)
    note:       what else the reader needs (e.g. "the paper gives only a plot"), and where the sweep's
                numbers are not comparable with the paper's, what differs and why
    follow_up:  commands to run after the sweep ({sweep_dir}, {mlflow_uri} filled in)
    paper:      the paper's short title: `--list-presets` groups every method's presets by it
    columns:    the columns of `PublishedRow` rows (`PublishedColumn`); empty for `PublishedScore` rows
    before:     commands to run before the sweep (e.g. the teachers a SED preset distils), listed
    shown:      run params whose values the report states above the comparison, as (param, label), e.g.
                the DAPT corpus that ran beside the note naming the paper's
    """

    name: str
    method: str
    script: str
    reproduces: str
    flags: dict
    source: str = ""
    published: tuple = ()  # PublishedScore rows (the ELECTRA paper's layer tables) or PublishedRow rows
    note: str = ""
    follow_up: tuple[str, ...] = ()
    paper: str = ""
    columns: tuple[PublishedColumn, ...] = ()
    before: tuple[str, ...] = ()
    shown: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Estimate:
    """What a grid costs, priced without loading any model: trials and GPU-hours on one GPU, and
    (for --dry-run) each trial's cost and the upstream stages it needs."""

    trials: int
    gpu_hours: float | None
    note: str = ""  # what this grid's figure leaves out or approximates
    basis: str = ""  # how every figure of the method is priced
    costs: tuple[TrialCost, ...] = ()  # each trial's cost (for --dry-run's resources and disk; empty: unknown)
    stages: tuple[str, ...] = ()  # the upstream stages the grid runs first, one line each


@dataclass
class PlanContext:
    """What the engine hands a method at planning time."""

    storage_path: str  # absolute local path or URI of the sweep's storage
    mlflow_uri: str  # the tracking store (to resolve runs:/ model references)
    smoke_test: bool = False
    default_models: list[str] = field(
        default_factory=list
    )  # the default --models (a smoke test swaps it for a tiny model)


@dataclass
class MethodPlan:
    """The driver-side result of `Method.plan`: everything trials need, computed once."""

    configs: list[dict]
    data: Any = None  # shipped to every trial once (tune.with_parameters)
    costs: dict = field(default_factory=dict)  # values of the method's `cost_axes` (a tuple) -> TrialCost
    static_params: dict = field(default_factory=dict)
    checksums: dict = field(default_factory=dict)
    stages: dict = field(default_factory=dict)  # upstream stage specs by key (trainables/stages/upstream.py), run
    # by the engine before the trials; configs name theirs by `stage_key`
    # (a key, or a list of keys: the engine sets `upstream_run_id`
    # to the stage's run id, or the list of their ids)
    method_label: str | None = None  # the method name(s) recorded on the parent run


@dataclass(frozen=True)
class MethodInfo:
    """What a method is, for people: its name in reports, a one-line description, the paper to cite
    (BibTeX) and the metric its tables rank by. `labels`: the display names of other method labels
    its runs record (e.g. TMFT's upstream variants `ws+tmft`)."""

    display_name: str
    description: str
    citation: str
    main_metric: str
    labels: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("display_name", "description", "citation", "main_metric"):
            if not str(getattr(self, name)).strip():
                raise ValueError(f"MethodInfo.{name} is empty")
        if not self.citation.lstrip().startswith("@"):
            raise ValueError("MethodInfo.citation must be a BibTeX entry (@article{...}, @inproceedings{...})")


class Method:
    """Base of every registered method (see the module docstring)."""

    name: ClassVar[str] = ""
    trainable: ClassVar[type | str | None] = None  # the class, or "module:Class" (imported on first use)
    info: ClassVar[MethodInfo | None] = None
    settings: ClassVar[tuple[Setting, ...]] = ()
    smoke: ClassVar[dict] = {}
    cost_axes: ClassVar[tuple[str, ...]] = ()  # the config keys a trial's cost depends on
    presets: ClassVar[dict[str, Preset]] = {}
    renamed: ClassVar[dict[str, str]] = {}  # old setting name -> new: a sweep recorded before resumes

    @classmethod
    def check(cls, args: Namespace) -> None:
        """Refuse values of the method's settings that clash with each other (SweepInputError); each
        setting alone was checked by its declaration."""

    @classmethod
    def base_config(cls, args: Namespace) -> dict:
        """The trial-config entries every trial shares: the method's name and each declared setting
        that goes into the config (trainables/core/settings.py `config_values`)."""
        return {"method": cls.name, **config_values(args, cls.settings)}

    @classmethod
    def metrics(cls, args: Namespace) -> MetricContract:
        raise NotImplementedError

    @classmethod
    def plan(cls, args: Namespace, context: PlanContext) -> MethodPlan:
        raise NotImplementedError

    @classmethod
    def search_space(cls, args: Namespace, base: dict) -> dict:
        raise SweepInputError(f"--search optuna is not available for method {cls.name!r}")

    @classmethod
    def estimate(cls, args: Namespace) -> Estimate | None:
        """Trials and GPU-hours of the grid `args` describe, from public configs alone (None: unknown)."""
        return None

    @classmethod
    def trainable_class(cls) -> type:
        """The Ray Tune Trainable class of a trial (its module imported now when `trainable` names it)."""
        if cls.trainable is None:
            raise NotImplementedError(f"method {cls.name!r} declares no trainable")
        if isinstance(cls.trainable, str):
            import importlib

            module, name = cls.trainable.split(":")
            return getattr(importlib.import_module(module), name)
        return cls.trainable


METHODS = Registry("method", Method)


def register_method(name: str, *aliases: str):
    """Register a method class under `name`, refusing one whose declarations are incomplete: no
    `MethodInfo`, a setting that is not a `Setting`, two settings of one name, a default its own kind
    refuses, a `smoke` value for no setting, or a `smoke` or preset value its setting refuses."""
    register = METHODS.register(name, *aliases)

    def decorate(cls):
        if not isinstance(cls.info, MethodInfo):
            raise TypeError(f"method {name!r} ({cls.__name__}) declares no `info = MethodInfo(...)`")
        if not isinstance(cls.__dict__.get("settings", ()), tuple):
            return register(cls)  # computed when read (from other registries): checked by the tests of every method
        names = [s.name for s in cls.settings]
        if not all(isinstance(s, Setting) for s in cls.settings):
            raise TypeError(f"method {name!r}: every entry of `settings` must be a Setting")
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"method {name!r} declares {', '.join(repeated)} twice")
        for setting in cls.settings:
            if setting.default is not None:
                setting.parse(setting.default)
        unknown = [key for key in cls.smoke if key not in names]
        if unknown:
            raise ValueError(f"method {name!r}: smoke values for undeclared settings {', '.join(unknown)}")
        declared = dict(zip(names, cls.settings))
        values = [("smoke", key, value) for key, value in cls.smoke.items()]
        presets = cls.__dict__.get("presets", {})
        for preset in presets.values() if isinstance(presets, dict) else ():
            values += [(f"preset {preset.name}", k, v) for k, v in preset.flags.items() if k in declared]
        for where, key, value in values:  # parsed now, as --smoke-test and --preset would parse them
            try:
                declared[key].parse(value)
            except SweepInputError as error:
                raise ValueError(f"method {name!r}: its {where} value {key}={value!r} is refused: {error}") from None
        return register(cls)

    return decorate
