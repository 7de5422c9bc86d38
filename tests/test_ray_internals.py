"""sweeps/engine/ray_internals.py: the one module naming Ray's private parts, its version guard, and a
canary for each private part it uses (the double-counted actor death has its own, in
tests/test_trial_reset_death.py).

- No other module of the project (sweeps, trainables, analysis, benchmarks, tests) names a private
  module or attribute of Ray (read from each file's syntax tree, not run).
- A Ray outside `SUPPORTED_RAY` or a torch below `TORCH_FLOOR` is refused by every script in one line,
  exit 2, before Ray is imported and before anything is written. The other versions are installed the
  way pip would leave them to the metadata the guard reads: a `*.dist-info` folder ahead on the path.
- The wraps refuse a changed signature, count their calls, and detect being replaced.
- The canaries: each private part still is what the module expects of it, in a real Ray.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from sweeps.engine import ray_internals, torn_saves

ROOT = Path(__file__).resolve().parents[1]
THE_MODULE = ROOT / "sweeps" / "engine" / "ray_internals.py"  # and this file, whose data and fakes name them
PARTS = ("sweeps", "trainables", "analysis", "benchmarks", "tests")

# Ray's files whose private attributes the project could reach: Tune's controller, trials, trainables,
# searchers, schedulers, callbacks, the storage context, the worker's global node.
RAY_SOURCES = (
    "tune/execution/tune_controller.py",
    "tune/experiment/trial.py",
    "tune/trainable/trainable.py",
    "tune/search/searcher.py",
    "tune/search/optuna/optuna_search.py",
    "tune/schedulers/trial_scheduler.py",
    "tune/callback.py",
    "train/_internal/storage.py",
    "_private/worker.py",
)
# Internal names without an underscore: Tune's controller and its class cache.
INTERNAL_NAMES = {"TuneController", "class_cache", "ENV_VARS_TO_PROPAGATE", "save_to_dir"}
INTERNAL_MODULE = re.compile(r"^ray(\.\w+)*\.(_(?!_)\w+|tune\.execution)\b")
# The project's own attributes that happen to share a name with a private attribute of a Ray class they do
# not belong to (a progress line's start time, a simulated trial's): `self.<name>` in project classes only.
OWN = {"_start", "_finished"}


def ray_private_names() -> set[str]:
    """Private attribute and method names Ray's own classes in `RAY_SOURCES` define or use on themselves."""
    root = Path(importlib.util.find_spec("ray").origin).parent
    names: set[str] = set()
    for relative in RAY_SOURCES:
        text = (root / relative).read_text()
        names |= set(re.findall(r"\b(?:self|cls)\.(_[a-z]\w*)", text))
        names |= set(re.findall(r"\bdef (_[a-z]\w*)", text))
        names |= set(re.findall(r"^\s+(_[a-z]\w*)\s*[:=]", text, re.M))
    return names


def _docstrings(tree) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def private_uses(path: Path, private: set[str]) -> list[str]:
    """Where the file at `path` names a private part of Ray: an import of a private or internal Ray module,
    such a module path in a string, an attribute (or a getattr/setattr name) Ray keeps private, or one of
    Tune's internal names."""
    tree = ast.parse(path.read_text())
    docstrings = _docstrings(tree)
    found = []

    where = path.relative_to(ROOT) if ROOT in path.parents else path

    def add(node, what):
        found.append(f"{where}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{where}:{node.lineno}: import {a.name}" for a in node.names if INTERNAL_MODULE.match(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if INTERNAL_MODULE.match(node.module) or (
                node.module == "ray" and any(a.name.startswith("_") for a in node.names)
            ):
                add(node, f"from {node.module} import ...")
            found += [f"{where}:{node.lineno}: import {a.name}" for a in node.names if a.name in INTERNAL_NAMES]
        elif isinstance(node, ast.Attribute):
            chain = ast.unparse(node)
            if INTERNAL_MODULE.match(chain) or node.attr in INTERNAL_NAMES:
                add(node, chain)
            elif node.attr in private and not (node.attr in OWN and ast.unparse(node.value) == "self"):
                add(node, chain)
        elif isinstance(node, ast.Name) and node.id in INTERNAL_NAMES:
            add(node, node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if INTERNAL_MODULE.match(node.value) or node.value in private or node.value in INTERNAL_NAMES:
                add(node, repr(node.value))
    return found


def project_files():
    for part in PARTS:
        for path in sorted((ROOT / part).rglob("*.py")):
            if path not in (THE_MODULE, Path(__file__).resolve()) and "notebooks" not in path.parts:
                yield path


def test_no_module_but_ray_internals_names_a_private_part_of_ray():
    private = ray_private_names()
    assert {"_trial_to_actor", "_iteration", "_ot_study", "_storage", "_callbacks"} <= private  # it reads Ray
    found = [line for path in project_files() for line in private_uses(path, private)]
    assert found == [], "name these through sweeps/engine/ray_internals.py:\n" + "\n".join(found)


def test_the_check_finds_each_kind_of_private_use(tmp_path):
    """The check can fail: each way of naming a private part of Ray in a file is found, prose is not."""
    private = ray_private_names()
    found = {
        "import ray._private.services": True,
        "from ray.autoscaler._private.util import prepare_config": True,
        "from ray.tune.execution import class_cache": True,
        "x = controller._trial_to_actor": True,
        "y = getattr(trainable, '_storage', None)": True,
        "self._iteration = 3": True,
        "folder = ray._private.worker._global_node": True,
        "logging.getLogger('ray._private.authentication')": True,
        "self._start = 0  # the project's own": False,
        "'''ray._private in a docstring is prose'''": False,
        "print(ray.__version__)": False,
    }
    for number, (code, expected) in enumerate(found.items()):
        path = tmp_path / f"probe_{number}.py"
        path.write_text(code + "\n")
        assert bool(private_uses(path, private)) is expected, (code, private_uses(path, private))


# --- the version guard ------------------------------------------------------------------------------


def installed_as(tmp_path: Path, **versions) -> dict:
    """An environment in which the packages' metadata says `versions` (e.g. ray="2.59.0") are installed:
    a dist-info folder of each, ahead of site-packages on the path, as a pip install would leave it."""
    for name, version in versions.items():
        info = tmp_path / "site" / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)])}


def _refused(done, *needles):
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert done.stdout == ""


@pytest.mark.parametrize("version", ["2.59.0", "2.61.0", "3.0.0"])
def test_a_sweep_under_another_ray_is_refused_in_one_line_and_writes_nothing(tmp_path, version):
    env = installed_as(tmp_path, ray=version)
    runs = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "sweeps/electra_layers.py", "--smoke-test", "--storage-path", str(runs)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    _refused(done, f"Ray {version} is installed", ray_internals.SUPPORTED_RAY, ray_internals.RAY_FIX)
    assert not runs.exists()


def test_a_torch_below_the_floor_is_refused_in_one_line(tmp_path):
    env = installed_as(tmp_path, torch="2.12.1")
    done = subprocess.run(
        [sys.executable, "sweeps/tsdae.py", "--storage-path", str(tmp_path / "runs")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    _refused(done, "torch 2.12.1 is installed", f"torch {ray_internals.TORCH_FLOOR} or newer", ray_internals.TORCH_FIX)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "command", [["-m", "sweeps.local_cluster", "status"], ["-m", "sweeps.cluster_config", "cluster.yaml"]]
)
def test_the_cluster_commands_refuse_another_ray_too(tmp_path, command):
    done = subprocess.run(
        [sys.executable, *command], cwd=ROOT, env=installed_as(tmp_path, ray="2.59.0"), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    _refused(done, ray_internals.SUPPORTED_RAY)


def test_the_refusal_comes_before_ray_or_torch_is_imported(tmp_path):
    code = textwrap.dedent(
        """
        import json, sys
        from sweeps.engine import runner
        try:
            runner.main(["--smoke-test"], method="tmft")
        except SystemExit as stop:
            print(json.dumps({"code": stop.code, "loaded": sorted({"ray", "torch"} & set(sys.modules))}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=installed_as(tmp_path, ray="2.61.0"), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert json.loads(done.stdout) == {"code": 2, "loaded": []}, done.stderr[-2000:]


def test_the_installed_versions_pass_and_the_range_matches_the_declared_dependency():
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    assert ray_internals.version_refusals() == []
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {}
    for line in [*project["dependencies"], *sum(project.get("optional-dependencies", {}).values(), [])]:
        requirement = Requirement(line)
        declared.setdefault(requirement.name, requirement.specifier)
    lows = {
        name: min(Version(s.version) for s in declared[name] if s.operator in (">=", "==", "~="))
        for name in ("ray", "torch")
    }  # the lowest versions pyproject.toml lets a user install
    assert lows["ray"] in SpecifierSet(ray_internals.SUPPORTED_RAY), lows
    assert lows["torch"].release >= Version(ray_internals.TORCH_FLOOR).release, lows
    highs = [Version(s.version) for s in declared["ray"] if s.operator in ("<", "<=", "==")]
    assert highs and max(highs) <= Version(re.search(r"<=?([\d.]+)", ray_internals.SUPPORTED_RAY).group(1)), (
        "pyproject.toml lets a user install a Ray the guard refuses"
    )


# --- the wraps ------------------------------------------------------------------------------------------


class Controller:
    def save_to_dir(self):
        return "saved"


def test_a_wrap_counts_its_calls_and_is_undone(monkeypatch):
    monkeypatch.setitem(ray_internals.EXPECTED_PARAMETERS, "save_to_dir", ())
    original = Controller.__dict__["save_to_dir"]
    with ray_internals.patched(Controller, "save_to_dir", lambda inner: lambda c: "wrapped " + inner(c)) as wrap:
        assert Controller().save_to_dir() == "wrapped saved"
        Controller().save_to_dir()
    assert wrap.calls == 2 and Controller.__dict__["save_to_dir"] is original


def test_a_wrap_replaced_while_installed_is_an_error(monkeypatch):
    """Another patch over the wrap would leave it uncalled: the sweep hears of it, not silently."""
    monkeypatch.setitem(ray_internals.EXPECTED_PARAMETERS, "save_to_dir", ())
    with pytest.raises(ray_internals.RayInternalsChanged, match="was replaced while wrapped"):
        with ray_internals.patched(Controller, "save_to_dir", lambda inner: inner):
            Controller.save_to_dir = lambda self: "someone else's"
    assert Controller().save_to_dir() == "saved"


def test_a_wrap_refuses_a_method_whose_signature_changed(monkeypatch):
    monkeypatch.setitem(ray_internals.EXPECTED_PARAMETERS, "save_to_dir", ("path",))
    with pytest.raises(ray_internals.RayInternalsChanged, match="takes"):
        with ray_internals.patched(Controller, "save_to_dir", lambda inner: inner):
            pass
    assert Controller().save_to_dir() == "saved"


def test_a_body_that_raised_undoes_the_wrap_and_keeps_its_error(monkeypatch):
    monkeypatch.setitem(ray_internals.EXPECTED_PARAMETERS, "save_to_dir", ())
    with pytest.raises(KeyError):
        with ray_internals.patched(Controller, "save_to_dir", lambda inner: inner):
            raise KeyError("fit failed")
    assert Controller.__dict__["save_to_dir"].__name__ == "save_to_dir"


# --- canaries: what Ray has now -------------------------------------------------------------------------


def test_canary_the_wrapped_controller_methods_have_the_expected_signatures():
    controller = ray_internals.tune_controller()
    for name, expected in ray_internals.EXPECTED_PARAMETERS.items():
        assert ray_internals.parameters(controller, name) == expected, name


def test_canary_loopback_only_turns_rays_cluster_mode_off_and_back():
    """Ray on Linux keeps 127.0.0.1 as a node's address only with its cluster mode off; the scope turns it off
    and restores it (tests/test_ray_listens.py checks what a real sweep's processes then listen on)."""
    before = ray_internals.cluster_mode()
    with ray_internals.loopback_only():
        assert ray_internals.cluster_mode() is False
    assert ray_internals.cluster_mode() == before


def test_canary_ray_reads_its_authentication_mode_again_when_told(monkeypatch, tmp_path):
    """`reload_auth_config` makes Ray read RAY_AUTH_MODE and its token path again: the mode Ray reports follows."""
    from ray.util import get_node_ip_address  # noqa: F401  (Ray imported, its config read once)

    token = tmp_path / "token"
    token.write_text("a" * 64)
    token.chmod(0o600)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    ray_internals.reload_auth_config()
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    ray_internals.reload_auth_config()  # back as the other tests expect; raises if Ray's names changed


def test_canary_a_trainables_step_count_is_the_private_one_tune_reports():
    from ray import tune

    class Steps(tune.Trainable):
        def step(self):
            return {"done": False}

    trainable = Steps()
    try:
        assert trainable.train()["training_iteration"] == 1
        ray_internals.set_iteration(trainable, 41)
        assert trainable.iteration == 41 and trainable.train()["training_iteration"] == 42
        assert ray_internals.experiment_dir_name(trainable) is None  # outside a Tune run: no sweep folder
    finally:
        trainable.stop()


def test_canary_a_proposed_optuna_point_can_be_told_pruned():
    import optuna
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    searcher = OptunaSearch(space={"x": tune.choice([1, 2])}, metric="score", mode="max", seed=0)
    assert searcher.suggest("t1")["x"] in (1, 2)
    ray_internals.prune_optuna_trial(searcher, "t1")
    assert [t.state for t in ray_internals.optuna_study(searcher).trials] == [optuna.trial.TrialState.PRUNED]
    assert searcher.suggest("t2")["x"] in (1, 2)  # the searcher goes on


CANARY = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path

    import ray
    from ray import tune

    from sweeps.engine import ray_internals

    seen = {"before": [], "after": [], "staged": [], "setup": 0, "env": {}}


    class Setup(tune.Callback):
        def setup(self, **info):
            seen["setup"] += 1


    def trainable_seeing_its_env(name):
        class Trial(tune.Trainable):
            def step(self):
                env = ray.get_runtime_context().runtime_env.get("env_vars", {})
                sweep = ray_internals.experiment_dir_name(self)
                return {"done": True, "aws": env.get("AWS_ACCESS_KEY_ID"), "sweep": sweep}

        Trial.__name__ = name
        return Trial


    def before(controller):
        ray_internals.wait_for_state_upload(controller)
        seen["before"].append(ray_internals.experiment_location(controller))


    def after(controller):
        staging = Path(ray_internals.staging_folder(controller))
        seen["after"].append(sorted(p.name.split("-")[0] for p in staging.glob("experiment_state-*.json")))
        seen["staged"].append(sorted(p.name for p in staging.iterdir() if p.is_file()))


    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)  # never a cluster found running
    os.environ["AWS_ACCESS_KEY_ID"] = "canary"
    results = {}
    for arm in ("propagated", "stopped"):
        if arm == "stopped":
            ray_internals.stop_propagating({"AWS_ACCESS_KEY_ID"})
        tuner = tune.Tuner(
            trainable_seeing_its_env(arm),
            run_config=tune.RunConfig(storage_path=sys.argv[1], name=arm, verbose=0, callbacks=[Setup()]),
        )
        with ray_internals.around_state_saves(before, after) as saves:
            with ray_internals.one_failure_per_actor_death(print) as tasks:
                grid = tuner.fit()
        metrics = grid[0].metrics
        results[arm] = {"aws": metrics["aws"], "sweep": metrics["sweep"], "saves": saves.calls, "tasks": tasks.calls}
    gcs = ray_internals.gcs_client(ray.get_runtime_context().gcs_address)
    print(json.dumps({
        **results, **seen, "propagated_after": "AWS_ACCESS_KEY_ID" in ray_internals.propagated_env(),
        "logs": os.path.isdir(ray_internals.ray_logs_dir()), "session": os.path.isdir(ray_internals.session_dir()),
        "report": ray_internals.autoscaler_report(gcs),
    }))
    """
)


@pytest.mark.sweep
def test_canary_tunes_private_parts_in_a_real_run(tmp_path):
    """One real local Ray and two Tune fits, through every private part the engine uses in a sweep: the
    two wraps are called, the controller's storage is where the module reads it, Tune copies the driver's
    AWS key into trial actors until told not to, a trial knows its sweep's folder name, and the session's
    folders and the GCS's status are found."""
    script = tmp_path / "canary.py"
    script.write_text(CANARY)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "runs")], cwd=ROOT, capture_output=True, text=True,
        timeout=240, env={**env, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["propagated"]["aws"] == "canary" and seen["stopped"]["aws"] is None, seen  # the workaround's cause
    assert not seen["propagated_after"]
    for arm in ("propagated", "stopped"):
        assert seen[arm]["saves"] >= 1 and seen[arm]["tasks"] >= 1, seen  # both wraps still wrap what Tune calls
        assert seen[arm]["sweep"] == arm, seen
    assert seen["setup"] == 2  # Tune sets its callbacks up once per fit (checkpoint_keeping relies on it)
    assert all(where.endswith(("propagated", "stopped")) for where in seen["before"]), seen["before"]
    assert ["experiment_state"] in seen["after"], seen["after"]  # the state is in the staging folder after a save
    # The trial list and the searcher's state are two files of one save, copied one by one: a copy cut short can
    # tear them apart (sweeps/engine/torn_saves.py pairs them by the trial list's name).
    assert any(
        sum(name.startswith(torn_saves.TRIAL_LIST) for name in names) == 1
        and any(name.startswith("basic-variant-state-") for name in names)
        for names in seen["staged"]
    ), seen["staged"]
    assert seen["logs"] and seen["session"] and isinstance(seen["report"], dict)
