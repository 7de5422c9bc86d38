"""Adding a method is one new package under trainables/methods/ and one script under sweeps/, with no
edit elsewhere: a toy method is written into a copy of the whole project (every existing file
byte-compared: none edited), which then finds it by name, gives its script the engine's flags plus
its own (a setting declared once is a flag, is checked, and reaches every trial's config), plans its
grid, writes its docs row with the docs command, selects its smoke test by mark, and (slow) runs a
whole sweep of it, then a report that names it and cites its paper."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sweep_helpers import run_script

ROOT = Path(__file__).resolve().parents[1]

TOY_PACKAGE = '''\
"""A toy regression method, to show what a method package holds."""
'''

TOY_METHOD = '''\
"""Toy: fit y = w x + b by gradient descent; the grid is learning rates x seeds."""
import numpy as np
import torch

from trainables.core import settings as shared
from trainables.core.method import Method, MethodInfo, MethodPlan, MetricContract, TrialCost, register_method
from trainables.core.settings import Float, FloatList, Setting
from trainables.training.trainable import EpochTrainable


def r2(pred, y):
    return float(100 * (1 - ((pred - y) ** 2).sum() / ((y - y.mean()) ** 2).sum()))


class ToyTrainable(EpochTrainable):
    primary_metric = "r2"

    def build(self, config, data):
        x, y = (torch.tensor(a, dtype=torch.float32) for a in data)
        self.splits = {"train": (x[:80], y[:80]), "dev": (x[80:90], y[80:90]), "test": (x[90:], y[90:])}
        self.w = torch.zeros(2, requires_grad=True)
        self.optimizer = torch.optim.SGD([self.w], lr=float(config["lr"]), momentum=float(config["momentum"]))

    def predict(self, x):
        return self.w[0] * x + self.w[1]

    def train_epoch(self, epoch):
        x, y = self.splits["train"]
        loss = ((self.predict(x) - y) ** 2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"train_loss": float(loss)}

    def evaluate(self):
        with torch.no_grad():
            return {f"{s}_r2": r2(self.predict(self.splits[s][0]), self.splits[s][1]) for s in ("dev", "test")}

    def parameter_count(self):
        return 2

    def method_state(self, checkpoint_dir):
        return {"w": self.w.detach().clone(), "optimizer": self.optimizer.state_dict()}

    def load_method_state(self, state, checkpoint_dir):
        with torch.no_grad():
            self.w.copy_(state["w"])
        self.optimizer.load_state_dict(state["optimizer"])


@register_method("toy")
class Toy(Method):
    trainable = ToyTrainable
    info = MethodInfo(
        display_name="Toy Regression",
        description="a toy regression: y = w x + b by gradient descent",
        citation="@misc{toy2026, title = {A Toy Regression}, author = {Doe, Jane}, year = {2026}}",
        main_metric="test R2 at the best dev epoch",
    )
    settings = (
        Setting("lrs", FloatList(Float(above=0)), [0.1, 0.3], "comma-separated learning rates", group="toy", axis=True),
        shared.SEEDS.but(default=[0, 1]),
        shared.EPOCHS.but(default=5),
        Setting("momentum", Float(low=0, below=1), 0.0, "SGD momentum", group="toy"),
    )
    smoke = {"epochs": 2, "lrs": "0.1"}

    @classmethod
    def metrics(cls, args):
        return MetricContract(primary="best_dev_r2", report="test_r2_at_best_dev", epoch="dev_r2",
                              axes=("lr", "seed"), select="lr", label="R2")

    @classmethod
    def plan(cls, args, context):
        x = np.random.default_rng(0).normal(size=100)
        y = 2 * x + 1 + 0.1 * np.random.default_rng(1).normal(size=100)
        configs = [{**cls.base_config(args), "lr": lr, "seed": seed} for lr in args.lrs for seed in args.seeds]
        return MethodPlan(configs=configs, data=(x, y), costs={(): TrialCost(0, 1.0, gpu=False)})
'''

TOY_SCRIPT = '''\
"""Toy sweeps: learning rates x seeds of a toy regression."""
import functools

from sweeps.engine import quick_exit, runner

main = functools.partial(runner.main, prog="toy", description=__doc__, method="toy")

if __name__ == "__main__":
    quick_exit.exit_now(main())
'''


NEW_FILES = ["sweeps/toy.py", "trainables/methods/toy/__init__.py", "trainables/methods/toy/method.py"]


def _tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.split("\0") if name and (ROOT / name).is_file()]


def _snapshot(root: Path, names) -> dict[str, bytes]:
    return {name: (root / name).read_bytes() for name in names if (root / name).is_file()}


@pytest.fixture
def project_with_toy(tmp_path):
    """A copy of the whole project (every tracked file: code, docs, tests) with the toy method's package
    and script added; every existing file is byte-compared before and after: none is edited."""
    copy = tmp_path / "project"
    tracked = _tracked()
    for name in tracked:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    before = _snapshot(copy, tracked)
    (copy / "trainables/methods/toy").mkdir()
    (copy / "trainables/methods/toy/__init__.py").write_text(TOY_PACKAGE)
    (copy / "trainables/methods/toy/method.py").write_text(TOY_METHOD)
    (copy / "sweeps/toy.py").write_text(TOY_SCRIPT)
    assert _snapshot(copy, tracked) == before  # no existing file changed
    added = {str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file()} - set(tracked)
    assert sorted(added) == NEW_FILES
    return copy


def run_in(copy: Path, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=copy, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.sweep
def test_a_new_package_and_script_are_a_method_the_engine_finds_and_plans(project_with_toy, tmp_path):
    done = run_in(
        project_with_toy,
        f"""
        import json
        import trainables
        from trainables.methods import get_method
        from sweeps.engine.runner import parser_for, plan_sweep

        assert trainables.__file__.startswith({str(project_with_toy)!r}), trainables.__file__
        toy = get_method("toy")
        args = parser_for("toy").parse_args(["--storage-path", {str(tmp_path / "runs")!r},
                                             "--mlflow-uri", "sqlite:///{tmp_path / "mlflow.db"}"])
        plan = plan_sweep(args, method="toy", prog="toy")
        from sweeps import toy as script
        refused = script.main(["--momentum", "-1", "--storage-path", {str(tmp_path / "refused")!r}])
        print(json.dumps({{"refused": refused, "class": toy.__name__,
                          "trials": [[c["lr"], c["seed"]] for c in plan.configs],
                          "select": plan.contract.select, "cpu": plan.resources["cpu"],
                          "momentum": sorted({{c["momentum"] for c in plan.configs}})}}))
    """,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["class"] == "Toy" and out["select"] == "lr"
    assert out["trials"] == [[0.1, 0], [0.1, 1], [0.3, 0], [0.3, 1]]
    assert out["momentum"] == [0.0]  # a declared setting reaches every trial's config (so its MLflow params)
    assert out["refused"] == 2 and "error: --momentum must be >= 0 and < 1, got -1" in done.stderr, done.stderr
    assert not (tmp_path / "refused").exists()  # refused before anything was written

    shown = subprocess.run(
        [sys.executable, "sweeps/toy.py", "--help"],
        cwd=project_with_toy,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(project_with_toy)},
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert "--lrs" in shown.stdout and "--storage-path" in shown.stdout and "--resume" in shown.stdout
    assert "--momentum" in shown.stdout and "SGD momentum" in shown.stdout


@pytest.mark.sweep
def test_the_toy_method_runs_a_whole_sweep_into_mlflow(project_with_toy, tmp_path, data_dir):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "PYTHONPATH": str(project_with_toy)}
    store = ["--storage-path", str(tmp_path / "runs"), "--mlflow-uri", uri, "--data-dir", str(data_dir)]
    flags = "--name toy --cpus-per-trial 1 --gpus-per-trial 0 --momentum 0.5".split()
    run_script(["sweeps/toy.py", *store, *flags], project_with_toy, env)
    import mlflow

    runs = mlflow.MlflowClient(uri).search_runs(
        [e.experiment_id for e in mlflow.MlflowClient(uri).search_experiments()],
        "tags.`mlflow.parentRunId` != ''",
        max_results=100,
    )
    finished = [r for r in runs if "best_dev_r2" in r.data.metrics]
    assert len(finished) == 4
    assert max(r.data.metrics["best_dev_r2"] for r in finished) > 90  # it learned y = 2x + 1
    assert {r.data.params["momentum"] for r in finished} == {"0.5"}  # the new setting is an MLflow param

    report = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "analysis", "report", "--mlflow-uri", uri, "--out", str(report)],
        cwd=project_with_toy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    index = (report / "README.md").read_text()
    assert "Toy Regression" in index and "@misc{toy2026, title = {A Toy Regression}" in index


@pytest.mark.sweep
def test_the_new_methods_docs_row_is_generated_and_its_smoke_test_joins_the_sweep_step(project_with_toy):
    """No hand edit anywhere: the docs command adds the method's row to docs/methods/index.md's generated table
    and its script to the CLI reference (and changes no other byte of any file), and the new script's smoke sweep is
    selected by the `sweep` mark that every script's smoke test carries, never by the fast run."""
    tracked = _tracked()
    before = _snapshot(project_with_toy, tracked)
    assert (
        run_in(
            project_with_toy, "from analysis.__main__ import main; raise SystemExit(main(['docs', '--check']))"
        ).returncode
        == 1
    )
    wrote = run_in(project_with_toy, "from analysis.__main__ import main; raise SystemExit(main(['docs']))")
    written = "wrote docs/methods/index.md\nwrote docs/reference/cli.md"
    assert wrote.returncode == 0 and wrote.stdout.strip() == written, wrote.stdout + wrote.stderr
    after = _snapshot(project_with_toy, tracked)
    changed = [name for name in tracked if after[name] != before[name]]
    assert changed == ["docs/methods/index.md", "docs/reference/cli.md"]
    assert "## `sweeps/toy.py`" in after["docs/reference/cli.md"].decode()  # the new script's flags, generated
    page = "docs/methods/index.md"
    old, new = before[page].decode().splitlines(), after[page].decode().splitlines()
    assert [line for line in new if line not in old] == [
        "| `toy` | Toy Regression | a toy regression: y = w x + b by gradient descent | test R2 at the best dev epoch "
        "| *A Toy Regression* (2026) |"
    ]
    assert len(new) == len(old) + 1

    def collected(*marks):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *marks,
             "tests/test_sweep_scripts.py"],
            cwd=project_with_toy, env={**os.environ, "PYTHONPATH": str(project_with_toy)}, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode in (0, 5), done.stdout[-3000:] + done.stderr[-3000:]
        return {line for line in done.stdout.splitlines() if "::" in line}

    smoke = "tests/test_sweep_scripts.py::test_smoke_test_runs_end_to_end[toy]"
    assert smoke not in collected() and smoke in collected("-m", "sweep")
