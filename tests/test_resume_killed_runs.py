"""A sweep whose driver is killed (SIGKILL) while two trials run leaves those two runs RUNNING in MLflow; `--resume`
ends with one FINISHED run per trial and no run RUNNING: a seeds-by-need sweep killed in its first round (its
store a SQLite file), and a grid sweep logging to `python -m sweeps.mlflow_server` (issue 56)."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient
from mlflow_helpers import runs_by_role
from server_helpers import MlflowServer, tags
from sweep_helpers import kill_driver_when, sweep_args

from sweeps.electra_layers import main
from trainables.core import schema


def two_at_once(flags: list[str]) -> list[str]:
    """The flags with one CPU per trial: two trials at once on the tests' 2-CPU Ray (the driver is killed while two
    run)."""
    flags = list(flags)
    flags[flags.index("--cpus-per-trial") + 1] = "1"
    return flags


def _running(children) -> int:
    return sum(1 for c in children if c.info.status == "RUNNING")


@pytest.mark.sweep
def test_a_seeds_by_need_sweep_killed_in_its_first_round_resumes_to_one_finished_run_per_trial(
    sweep_env, tiny_models, ray_session
):
    address = ray_session.get_runtime_context().gcs_address
    uri = sweep_env["uri"]
    MlflowClient(uri).search_experiments()  # the store exists before the driver starts: the test polls it
    settings = "--layers 1,2 --seeds 0-3 --seeds-by-need --initial-seeds 2 --epochs 3 --max-concurrent 2"
    sweep = sweep_args(tiny_models["bert"], settings, *two_at_once(sweep_env["flags"]))

    def two_running():
        _, children = runs_by_role(uri)
        return _running(children) >= 2 and not any(c.info.status == "FINISHED" for c in children)

    kill_driver_when(
        "sweeps/electra_layers.py",
        [*sweep, "--name", "by-need", "--address", address],
        sweep_env["tmp"] / "driver.log",
        two_running,
        what="two trials of the first round running, none finished",
    )
    _, before = runs_by_role(uri)
    assert _running(before) == 2, [c.info.status for c in before]

    assert main(["--resume", str(sweep_env["storage"] / "by-need")]) == 0

    client = MlflowClient(uri)
    parents, children = runs_by_role(uri)
    assert [p.info.status for p in parents] == ["FINISHED"]
    keys = [c.data.tags[schema.TAG_CONFIG_HASH] for c in children]
    assert len(keys) == len(set(keys)) >= 4, "one run per trial"  # the first round: 2 layers x 2 seeds at least
    assert {c.info.status for c in children} == {"FINISHED"}
    for child in children:
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "dev_spearman")]
        assert sorted(steps) == [1, 2, 3], child.info.run_name
    experiment = client.get_experiment_by_name("test").experiment_id
    assert not client.search_runs([experiment], "attributes.status = 'RUNNING'")


@pytest.mark.sweep
def test_a_sweep_logging_to_the_tracking_server_killed_resumes_to_one_finished_run_per_trial(
    sweep_env, tiny_models, ray_session, tmp_path
):
    address = ray_session.get_runtime_context().gcs_address
    server = MlflowServer(tmp_path / "server").start()
    try:
        flags = two_at_once(sweep_env["flags"])
        flags[flags.index("--mlflow-uri") + 1] = server.uri
        sweep = sweep_args(tiny_models["bert"], "--layers 1,2 --seeds 0,1 --epochs 3 --max-concurrent 2", *flags)

        def two_running():
            try:
                _, children = server.runs()
            except Exception:  # the experiment is not there yet
                return False
            statuses = [c["info"]["status"] for c in children]
            return statuses.count("RUNNING") >= 2 and "FINISHED" not in statuses

        kill_driver_when(
            "sweeps/electra_layers.py",
            [*sweep, "--name", "served", "--address", address],
            sweep_env["tmp"] / "driver.log",
            two_running,
            what="two trials running, none finished, on the tracking server",
        )
        _, before = server.runs()
        assert [c["info"]["status"] for c in before].count("RUNNING") == 2

        assert main(["--resume", str(sweep_env["storage"] / "served")]) == 0

        parents, children = server.runs()
        assert [p["info"]["status"] for p in parents] == ["FINISHED"]
        keys = [tags(c)[schema.TAG_CONFIG_HASH] for c in children]
        assert len(keys) == len(set(keys)) == 4, "one run per trial"
        assert {c["info"]["status"] for c in children} == {"FINISHED"}
        for child in children:
            steps = [m["step"] for m in server.metric_history(child["info"]["run_id"], "dev_spearman")]
            assert sorted(int(s) for s in steps) == [1, 2, 3], child["info"]["run_name"]
    finally:
        server.kill()
