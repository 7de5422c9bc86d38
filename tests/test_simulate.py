"""`--simulate`: simulated trials through the real engine (sweeps/engine/simulate.py): synthetic
scores, refusals, the tag on every run, no torch in a trial process, the report's mark."""

from __future__ import annotations

import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow import MlflowClient

from sweeps.engine import simulate
from sweeps.engine.runner import main
from trainables.core.errors import SweepInputError
from trainables.core.method import TrialCost
from trainables.core.schema import TAG_SIMULATED

ROOT = Path(__file__).resolve().parents[1]


def test_synthetic_scores_are_deterministic_rise_with_epochs_and_differ_by_config_and_seed():
    config = {"model": "m", "layer": 3, "seed": 0, "precision": "auto"}
    score = simulate.synthetic_score
    assert score(config, "dev_spearman", 2) == score(dict(config), "dev_spearman", 2)
    assert score(config, "dev_spearman", 1) < score(config, "dev_spearman", 2) < score(config, "dev_spearman", 3)
    assert score(config, "dev_spearman", 2) != score({**config, "layer": 4}, "dev_spearman", 2)
    assert score(config, "dev_spearman", 2) != score({**config, "seed": 1}, "dev_spearman", 2)
    assert abs(score(config, "x", 2) - score({**config, "seed": 1}, "x", 2)) <= 4  # seeds differ by at most 2 x 2
    assert score(config, "x", 2) == score({**config, "precision": "fp32", "keep_checkpoints": "all"}, "x", 2)
    assert 27 < score(config, "x", 0) and score(config, "x", 9) < 83


def test_a_method_without_a_cost_model_is_refused_by_name():
    method = SimpleNamespace(name="nocost", cost_axes=("model",))
    configs = [{"model": "a"}, {"model": "b"}]
    priced = {("a",): TrialCost(1.0, 10.0), ("b",): TrialCost(1.0, 5.0)}
    simulate.check(method, configs, priced)
    for costs in ({}, {("a",): TrialCost(1.0, 10.0)}, {**priced, ("b",): TrialCost(0.0, 0.0, gpu=False)}):
        with pytest.raises(SweepInputError, match="method nocost has no cost model"):
            simulate.check(method, configs, costs)


def test_a_simulated_sweep_resumes_only_simulated_and_a_real_one_only_real():
    simulate.check_resume("d", {"args": {"simulate": True}}, Namespace(simulate=True))
    simulate.check_resume("d", {"args": {}}, Namespace(simulate=False))
    with pytest.raises(SweepInputError, match="resume this sweep with --simulate"):
        simulate.check_resume("d", {"args": {"simulate": True}}, Namespace(simulate=False))
    with pytest.raises(SweepInputError, match="resume this sweep without --simulate"):
        simulate.check_resume("d", {"args": {"simulate": False}}, Namespace(simulate=True))


def test_waits_are_the_cost_models_seconds_over_the_speedup_or_the_fixed_seconds():
    contract = SimpleNamespace(report="test_s", companion="", columns=("c",), epoch="dev_s", primary="best", mode="max")
    plan = SimpleNamespace(
        args={"simulate_speedup": 4.0, "simulate_seconds": None},
        contract=contract,
        costs={("a",): TrialCost(1.0, 100.0)},
    )
    resources = SimpleNamespace(axes=("model",))
    sim = simulate.simulation(plan, resources)
    assert sim.wait({"model": "a", "seed": 3}) == 25.0 and sim.finals == ("test_s", "c")
    plan.args["simulate_seconds"] = 1.5
    assert simulate.simulation(plan, resources).wait({"model": "a"}) == 1.5


@pytest.mark.sweep  # about 2 s: out of the fast run, which stays under 3 minutes
def test_a_simulated_trial_process_imports_neither_torch_nor_transformers(tmp_path):
    """What Tune ships to a trial process (the class wrapped with its parameters and its resources
    callable) unpickles there without torch: a runner.TrialResources in it imported every method.
    Both ends run in fresh processes: with a Ray up in this one, `with_parameters` would put the
    parameters in its object store, out of the second process's reach."""
    pickled = tmp_path / "trial.pkl"
    ship = (
        "import sys, ray.cloudpickle as c; from ray import tune; from sweeps.engine import simulate; "
        "from sweeps.engine.simulated_trial import SimulatedTrainable; "
        "sim = simulate.Simulation({('a',): 1.0}, ('model',), None, 'dev', 'best', ('test',)); "
        "shares = simulate.Shares(1.0, {('a',): 0.25}, ('model',), None); "
        "wrapped = tune.with_resources(tune.with_parameters(SimulatedTrainable, simulation=sim), shares); "
        f"open({str(pickled)!r}, 'wb').write(c.dumps((wrapped, sim)))"
    )
    subprocess.run([sys.executable, "-c", ship], cwd=ROOT, capture_output=True, text=True, check=True)
    run = (
        "import sys, ray.cloudpickle as c; "
        f"trial, sim = c.loads(open({str(pickled)!r}, 'rb').read()); "
        "assert trial.default_resource_request({'model': 'a'}).required_resources['GPU'] == 0.25; "
        "print(sorted(m for m in ('torch', 'transformers', 'trainables.methods') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", run], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr[-3000:]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--simulate", "--simulate-speedup", "0"], "--simulate-speedup"),
        (["--simulate", "--simulate-seconds", "-1"], "--simulate-seconds"),
        (["--simulate", "--address", "127.0.0.1:1"], "nothing answers at 127.0.0.1:1"),
    ],
)
def test_bad_simulate_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, flags, message):
    storage = tmp_path / "runs"
    code = main(["--smoke-test", "--storage-path", str(storage), *flags], method="tmft", prog="electra_layers")
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1
    assert not storage.exists()


def test_a_method_without_a_cost_model_is_refused_before_anything_is_written(tmp_path, capsys):
    storage = tmp_path / "runs"
    code = main(["--smoke-test", "--simulate", "--storage-path", str(storage)], method="evaluate", prog="evaluate")
    err = capsys.readouterr().err.strip()
    assert code == 2 and "method evaluate has no cost model" in err and len(err.splitlines()) == 1
    assert not storage.exists() or not any(p.name != "_smoke_models" for p in storage.iterdir())


@pytest.mark.sweep
def test_simulated_sweep_end_to_end_tags_its_runs_resumes_only_simulated_and_is_marked_in_the_report(tmp_path, capsys):
    storage = tmp_path / "runs"
    common = ["--smoke-test", "--storage-path", str(storage), "--name", "sim"]
    assert main([*common, "--simulate", "--simulate-seconds", "0.5"], method="tmft", prog="electra_layers") == 0
    client = MlflowClient(tracking_uri=f"sqlite:///{storage}/mlflow.db")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    trials = [r for r in runs if r.data.tags.get("embsweep.role") == "trial"]
    assert trials and all(r.data.tags.get(TAG_SIMULATED) == "true" for r in runs)
    assert all(r.info.status == "FINISHED" and r.data.tags.get("device") == "simulated" for r in trials)
    assert all(r.data.tags.get("node_id") for r in trials)
    for run in trials:
        epochs = int(run.data.params["epochs"])
        history = client.get_metric_history(run.info.run_id, "dev_spearman")
        assert sorted(m.step for m in history) == list(range(1, epochs + 1)) or epochs == 0
    capsys.readouterr()
    assert main(["--resume", str(storage / "sim")], method="tmft", prog="electra_layers") == 2
    assert "resume this sweep with --simulate" in capsys.readouterr().err

    from analysis.report import build_report

    build_report(f"sqlite:///{storage}/mlflow.db", tmp_path / "report")
    assert "SIMULATED" in (tmp_path / "report" / "README.md").read_text().splitlines()[0]


def test_the_analysis_refuses_simulated_runs_beside_real_ones():
    import pandas as pd

    from analysis.loader import AnalysisError, _simulated

    assert _simulated(pd.DataFrame({"simulated": ["true", "true"], "sweep": ["a", "a"]}), "uri") is True
    assert _simulated(pd.DataFrame({"sweep": ["a"]}), "uri") is False
    with pytest.raises(AnalysisError, match="simulated sweeps \\(s\\b.*beside real runs"):
        _simulated(pd.DataFrame({"simulated": ["true", None], "sweep": ["s", "r"]}), "uri")


def test_a_sqlite_store_that_cannot_keep_pace_is_warned_with_the_fix():
    from sweeps.engine import store_load

    # 104 trials of 4 s, 32 at once, 2 epochs: 48 writes a second against about 15
    warning = store_load.sqlite_warning("sqlite:///m.db", 32, 2, [4.0] * 104)
    assert warning.startswith("warning: --mlflow-uri sqlite:///m.db: 32 trials at once of about 4 s need about 48")
    assert "postgresql://" in warning and "--max-concurrent 10" in warning and "\n" not in warning
    assert store_load.sqlite_warning("sqlite:///m.db", 32, 3, [60.0] * 32) is None  # 3.7 a second: it holds
    assert store_load.sqlite_warning("postgresql://u@h/db", 32, 2, [4.0] * 104) is None
    assert store_load.sqlite_warning("http://127.0.0.1:5000", 32, 2, [4.0] * 104) is None


def _simulated_trial(monkeypatch, epochs: int = 3):
    """A SimulatedTrainable outside Ray (its node and GPU ids fixed), 0.01 s an epoch."""
    from sweeps.engine import simulated_trial

    monkeypatch.setattr(simulated_trial, "_runtime_info", lambda: {"node_id": "n", "gpu_ids": "0"})
    sim = simulate.Simulation({}, ("model",), 0.01 * epochs, "dev", "best", ("test",))

    class Trial(simulated_trial.SimulatedTrainable):
        def setup(self, config):
            super().setup(config, simulation=sim)

    return lambda: Trial({"model": "a", "seed": 0, "epochs": epochs})


def test_a_simulated_trial_whose_recorded_checkpoint_was_deleted_resumes_from_its_newest(tmp_path, monkeypatch, capsys):
    """The killed-driver case of the faults test (2 of 104 trials errored): Tune's saved state names a
    checkpoint it deleted when the trial's next one was registered; the trial continues from its newest."""
    new = _simulated_trial(monkeypatch)
    trial = new()
    for n in range(2):
        trial.step()
        (tmp_path / f"checkpoint_00000{n}").mkdir()
        trial.save_checkpoint(str(tmp_path / f"checkpoint_00000{n}"))
    shutil.rmtree(tmp_path / "checkpoint_000000")  # what Tune's num_to_keep=1 deletes
    (tmp_path / "checkpoint_000002").mkdir()  # being written when the driver died: no state yet

    restored = new()
    restored.restore(str(tmp_path / "checkpoint_000000"))
    assert "continues from" in capsys.readouterr().err
    assert restored.epoch == 2 and restored.training_iteration == 2
    assert [restored.step()["epoch"]] == [3]

    fresh = new()
    fresh.restore(str(tmp_path / "elsewhere" / "checkpoint_000000"))
    assert "its first epoch" in capsys.readouterr().err
    assert fresh.step()["epoch"] == 1


def test_a_finished_simulated_trial_restored_reports_its_last_result_again_not_another_epoch(tmp_path, monkeypatch):
    new = _simulated_trial(monkeypatch, epochs=2)
    trial = new()
    last = [trial.step(), trial.step()][-1]
    assert last["done"] and last["epoch"] == 2
    trial.save_checkpoint(str(tmp_path))

    restored = new()
    restored.restore(str(tmp_path))
    again = restored.step()
    assert again["done"] and again["epoch"] == 2 and again["epoch_span"] == last["epoch_span"]
    assert again["test"] == last["test"]
