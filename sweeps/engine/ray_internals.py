"""Every private name of Ray and Ray Tune the project uses, in one module, behind a version guard.

Ray changes its private modules and attributes between releases without notice, so the project names
them here only (tests/test_ray_internals.py fails if another module does), and runs only under the
Ray versions it was tested with: `SUPPORTED_RAY`. `require_supported_versions()` refuses any other
Ray, and a torch below `TORCH_FLOOR`, with one line each and exit status 2; every script calls it
first (sweeps/engine/runner.py `main`, sweeps/local_cluster.py, sweeps/cluster_config.py), before
Ray is imported. It reads the installed versions from the packages' metadata, which imports neither.

What is used, and why no public name serves:

- Two wraps of `TuneController` methods while a sweep's Tuner runs (`patched`: the method's signature is
  checked when the wrap is installed, the wrap counts its calls, and one replaced while installed is an
  error): `_schedule_trial_task`, so that one actor death costs a trial one failure
  (`one_failure_per_actor_death`, reading `_trial_to_actor`, `_actor_to_trial`, `_resetting_trials`;
  sweeps/engine/actor_deaths.py says why), and `save_to_dir`, around which the resume seal and the
  checkpoint keeping act (`around_state_saves`; sweeps/engine/state_saves.py), with the controller's
  storage (`wait_for_state_upload`, `experiment_location`, `staging_folder`).
- `OptunaSearch._ot_study` / `_ot_trials`: a point proposed twice is told to Optuna as pruned
  (`prune_optuna_trial`; sweeps/engine/pareto_asha.py).
- `Trainable._iteration`: a trial restored from a newer checkpoint than Tune chose counts from it
  (`set_iteration`); `Trainable._storage`: the sweep's folder name for a model card (`experiment_dir_name`).
- `class_cache.ENV_VARS_TO_PROPAGATE`: the driver's cloud credentials kept off the trials' runtime
  environments (`stop_propagating`; sweeps/engine/ray_start.py).
- `ray._private.worker._global_node`: the session's log and session folders (`ray_logs_dir`, `session_dir`).
- `ray._raylet.GcsClient` and `ray_constants.DEBUG_AUTOSCALING_STATUS`: the autoscaler's report read in
  process (`gcs_client`, `autoscaler_report`; sweeps/local_cluster.py).
- `ray.autoscaler._private`: `ray up`'s own offline config checks and the fake multi-node provider's names
  (`prepare_config`, `validate_config`, `fake_multinode_names`; sweeps/cluster_config.py), and its AWS
  launcher for the tests that run it against a local AWS (`aws_launcher`).
- The logger of Ray's token-authentication notice (`AUTH_LOGGER`).

Each of these has a canary in tests/test_ray_internals.py (and tests/test_trial_reset_death.py) that fails
when the Ray behaviour it relies on or works around changes: update this module, then `SUPPORTED_RAY`.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet

# Ray 2.60: the whole suite ran with 2.60.0 only; a 2.60 patch release (fixes, which have not renamed
# internals) is let through, and the canaries would show otherwise. Widen only after the suite and the canaries
# pass under the new version.
SUPPORTED_RAY = ">=2.60.0,<2.61"
TORCH_FLOOR = "2.13"  # the lowest torch the tests ran with
RAY_FIX = f"pip install 'ray[tune]{SUPPORTED_RAY}'"
TORCH_FIX = f"pip install 'torch>={TORCH_FLOOR}'"

AUTH_LOGGER = "ray._private.authentication"


class RayInternalsChanged(RuntimeError):
    """A private part of Ray the project relies on is not what `SUPPORTED_RAY` had."""


def _installed(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def version_refusals() -> list[str]:
    """One line per installed Ray or torch this project does not run with (empty: both are fine)."""
    from packaging.version import InvalidVersion, Version

    lines = []
    ray = _installed("ray")
    try:
        ray_ok = ray is not None and Version(ray) in SpecifierSet(SUPPORTED_RAY, prereleases=True)
    except InvalidVersion:
        ray_ok = False
    if not ray_ok:
        found = f"Ray {ray} is installed" if ray else "Ray is not installed"
        lines.append(f"{found}; embsweep runs with Ray {SUPPORTED_RAY} only (it relies on Ray's internals): {RAY_FIX}")
    torch = _installed("torch")
    try:
        torch_ok = torch is not None and Version(torch).release >= Version(TORCH_FLOOR).release
    except InvalidVersion:
        torch_ok = False
    if not torch_ok:
        found = f"torch {torch} is installed" if torch else "torch is not installed"
        lines.append(f"{found}; embsweep needs torch {TORCH_FLOOR} or newer: {TORCH_FIX}")
    return lines


def require_supported_versions() -> None:
    """Exit with status 2 and one line per refusal when Ray or torch is outside what the project runs with."""
    refusals = version_refusals()
    if refusals:
        for line in refusals:
            print(f"error: {line}", file=sys.stderr)
        sys.exit(2)


# --- wraps of Tune's controller --------------------------------------------------------------------

SCHEDULE_TRIAL_TASK = "_schedule_trial_task"
SAVE_TO_DIR = "save_to_dir"
# The parameters after `self` each wrapped method had in the supported Ray: a wrap refuses to install over
# another signature.
EXPECTED_PARAMETERS = {
    SCHEDULE_TRIAL_TASK: ("trial", "method_name", "args", "kwargs", "on_result", "on_error", "_return_future"),
    SAVE_TO_DIR: (),
}


def tune_controller():
    """Tune's `TuneController` class (not part of Tune's public API)."""
    from ray.tune.execution.tune_controller import TuneController

    return TuneController


def parameters(owner, name: str) -> tuple[str, ...]:
    """The names of the parameters of the method `owner.<name>` after its first (`self`)."""
    return tuple(inspect.signature(getattr(owner, name)).parameters)[1:]


@dataclass
class Wrap:
    """An installed wrap: how often the wrapped method was called through it."""

    owner: type
    name: str
    calls: int = 0


@contextlib.contextmanager
def patched(owner, name: str, make):
    """While active, `owner.<name>` is `make(inner)` (the wrap); yields a `Wrap` counting its calls.
    Refuses (`RayInternalsChanged`) a method whose parameters are not `EXPECTED_PARAMETERS[name]`, and,
    when the body ends normally, a wrap that something replaced meanwhile (its calls were lost)."""
    if not hasattr(owner, name):
        raise RayInternalsChanged(f"{owner.__name__}.{name} is gone: Ray is not {SUPPORTED_RAY}? {RAY_FIX}")
    found = parameters(owner, name)
    if found != EXPECTED_PARAMETERS[name]:
        raise RayInternalsChanged(
            f"{owner.__name__}.{name} takes {found}, not {EXPECTED_PARAMETERS[name]}: Ray is not {SUPPORTED_RAY}? "
            f"{RAY_FIX}"
        )
    inner = getattr(owner, name)
    installed = Wrap(owner, name)
    replacement = make(inner)

    def wrapper(*args, **kwargs):
        installed.calls += 1
        return replacement(*args, **kwargs)

    setattr(owner, name, wrapper)
    try:
        yield installed
    finally:
        current = getattr(owner, name)
        setattr(owner, name, inner)
    if current is not wrapper:
        raise RayInternalsChanged(f"{owner.__name__}.{name} was replaced while wrapped: the wrap's calls were lost")


def one_failure_per_actor_death(log):
    """While active, a trial task's failure is dropped when it is the death of an actor whose failure Tune
    has already handled (the actor belongs to no trial any more) and the trial is back in line (PENDING);
    a failed `reset` no longer leaves the trial among Tune's resetting trials. `log(trial)` is called for
    each dropped failure. Yields the `Wrap`."""
    from ray.exceptions import RayActorError
    from ray.tune.experiment import Trial

    def make(inner):
        def schedule_trial_task(controller, trial, method_name, *args, on_error=None, **kwargs):
            if on_error is None:
                return inner(controller, trial, method_name, *args, **kwargs)
            tracked_actor = controller._trial_to_actor.get(trial)

            def counted_once(failed_trial, exception):
                if method_name == "reset":
                    controller._resetting_trials.discard(failed_trial)
                already_handled = tracked_actor not in controller._actor_to_trial
                if isinstance(exception, RayActorError) and already_handled and failed_trial.status == Trial.PENDING:
                    log(trial)
                    return None
                return on_error(failed_trial, exception)

            return inner(controller, trial, method_name, *args, on_error=counted_once, **kwargs)

        return schedule_trial_task

    return patched(tune_controller(), SCHEDULE_TRIAL_TASK, make)


def around_state_saves(before, after):
    """While active, each of Tune's experiment-state saves (`TuneController.save_to_dir`) calls
    `before(controller)` first and `after(controller)` once Tune wrote the state into its staging folder.
    Yields the `Wrap`."""

    def make(inner):
        def save_to_dir(controller, *args, **kwargs):
            before(controller)
            result = inner(controller, *args, **kwargs)
            after(controller)
            return result

        return save_to_dir

    return patched(tune_controller(), SAVE_TO_DIR, make)


def wait_for_state_upload(controller) -> None:
    """Wait for the copy of Tune's previous experiment state into the sweep folder (raises its error)."""
    controller._storage.syncer.wait()


def experiment_location(controller) -> str:
    """Where the controller copies its experiment state (the sweep folder, a path or URI)."""
    return getattr(controller._storage, "experiment_fs_path", "the sweep folder")


def staging_folder(controller) -> str:
    """The local folder Tune writes its experiment state into before copying it into the sweep folder."""
    return controller._storage.experiment_driver_staging_path


# --- searchers, trainables -------------------------------------------------------------------------


def optuna_study(searcher):
    """The Optuna study an `OptunaSearch` asks."""
    return searcher._ot_study


def prune_optuna_trial(searcher, trial_id: str) -> None:
    """Tell Optuna that the trial `searcher` (an `OptunaSearch`) just proposed for `trial_id` was pruned."""
    import optuna

    optuna_study(searcher).tell(searcher._ot_trials.pop(trial_id), state=optuna.trial.TrialState.PRUNED)


def set_iteration(trainable, iteration: int) -> None:
    """Tune's count of a trainable's steps (`training_iteration` of its next result is one more)."""
    trainable._iteration = iteration


def experiment_dir_name(trainable) -> str | None:
    """The sweep folder's name of a running trainable (None outside a Tune run)."""
    return getattr(getattr(trainable, "_storage", None), "experiment_dir_name", None)


# --- the Ray session -----------------------------------------------------------------------------------


def stop_propagating(names) -> None:
    """Tune copies these environment variables of the driver, when set, into every trial actor's runtime
    environment; after this call it copies none of `names`."""
    from ray.tune.execution import class_cache

    class_cache.ENV_VARS_TO_PROPAGATE = frozenset(class_cache.ENV_VARS_TO_PROPAGATE) - frozenset(names)


def propagated_env() -> frozenset:
    """The driver's environment variables Tune copies into trial actors' runtime environments."""
    from ray.tune.execution import class_cache

    return frozenset(class_cache.ENV_VARS_TO_PROPAGATE)


def _global_node():
    import ray._private.worker

    return ray._private.worker._global_node


def ray_logs_dir() -> str | None:
    """The connected Ray session's log folder on this node (None when this process started no Ray)."""
    node = _global_node()
    return None if node is None else node.get_logs_dir_path()


def session_dir() -> str | None:
    """The connected Ray session's folder on this node (None when this process started no Ray)."""
    node = _global_node()
    return None if node is None else node.get_session_dir_path()


def gcs_client(address: str):
    """A client of the Ray cluster's GCS at `address`, as `ray status` makes one."""
    import ray._raylet

    return ray._raylet.GcsClient(address=address)


def autoscaler_status_key() -> bytes:
    """The GCS key under which the autoscaler keeps its status."""
    from ray._private.ray_constants import DEBUG_AUTOSCALING_STATUS

    return DEBUG_AUTOSCALING_STATUS.encode()


def autoscaler_report(gcs) -> dict:
    """The autoscaler's latest report as `ray status` reads it (empty before its first)."""
    import json

    raw = gcs.internal_kv_get(autoscaler_status_key(), None)
    return json.loads(raw).get("autoscaler_report", {}) if raw else {}


# --- `ray up`'s offline steps ---------------------------------------------------------------------------


def prepare_config(config: dict) -> dict:
    """`ray up`'s first step: the provider's defaults filled in, the setup commands merged."""
    from ray.autoscaler._private.util import prepare_config as prepare

    return prepare(config)


def validate_config(config: dict) -> None:
    """`ray up`'s second step: Ray's JSON schema and its head-node-type and worker-bound checks."""
    from ray.autoscaler._private.util import validate_config as validate

    validate(config)


def fill_node_type_min_max_workers(config: dict) -> None:
    from ray.autoscaler._private.util import fill_node_type_min_max_workers as fill

    fill(config)


@dataclass(frozen=True)
class FakeMultinode:
    head_node_type: str  # the name the fake provider gives its head's node type
    head_node_id: str  # its head node's id
    launcher_keys: tuple  # every launcher key of Ray's base config, which its autoscaler reads as written


def fake_multinode_names() -> FakeMultinode:
    from ray.autoscaler._private.fake_multi_node.node_provider import FAKE_HEAD_NODE_ID, FAKE_HEAD_NODE_TYPE
    from ray.autoscaler._private.monitor import BASE_READONLY_CONFIG

    return FakeMultinode(FAKE_HEAD_NODE_TYPE, FAKE_HEAD_NODE_ID, tuple(BASE_READONLY_CONFIG))


def aws_launcher():
    """The parts of `ray up`'s AWS launcher the tests run against a local AWS: its config and utils
    modules, `bootstrap_aws`, `AWSNodeProvider`, `get_or_create_head_node` (its provider and command
    runner given) and `NodeUpdaterThread`."""
    from types import SimpleNamespace

    from ray.autoscaler._private import commands, updater
    from ray.autoscaler._private.aws import config, node_provider, utils

    def get_or_create_head_node(config, config_file, no_restart, restart_only, yes, name, provider, runner):
        commands.get_or_create_head_node(
            config, config_file, no_restart, restart_only, yes, name, _provider=provider, _runner=runner
        )

    return SimpleNamespace(
        config=config,
        utils=utils,
        bootstrap_aws=config.bootstrap_aws,
        AWSNodeProvider=node_provider.AWSNodeProvider,
        get_or_create_head_node=get_or_create_head_node,
        NodeUpdaterThread=updater.NodeUpdaterThread,
    )


def loopback_only():
    """While Ray starts a local node: its node address is the loopback address, so every Ray process binds
    127.0.0.1 only. Ray on Linux always replaces 127.0.0.1 (`ray.init(_node_ip_address=...)`, `ray start
    --node-ip-address`) with the machine's outward address unless its cluster mode is off, which
    `ray_constants.ENABLE_RAY_CLUSTER` says (read from RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER when Ray is
    imported, so set here for the start only). Checked against Ray 2.60.0; `ray_start.init_ray` checks the
    address Ray took, and tests/test_ray_listens.py what its processes listen on."""
    import contextlib

    import ray._private.ray_constants as ray_constants

    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
        raise RayInternalsChanged("Ray's ray_constants.ENABLE_RAY_CLUSTER is gone: update loopback_only")

    @contextlib.contextmanager
    def scope():
        saved = ray_constants.ENABLE_RAY_CLUSTER
        ray_constants.ENABLE_RAY_CLUSTER = False
        try:
            yield
        finally:
            ray_constants.ENABLE_RAY_CLUSTER = saved

    return scope()


def cluster_mode() -> bool:
    """Ray's `ray_constants.ENABLE_RAY_CLUSTER` now (what `loopback_only` turns off)."""
    import ray._private.ray_constants as ray_constants

    return ray_constants.ENABLE_RAY_CLUSTER


def reload_auth_config() -> None:
    """Have Ray read its authentication mode and token from the environment again (it reads them once, when
    imported), as Ray's own switch to token mode does (`authentication_token_setup._enable_token_auth`, 2.60.0)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
