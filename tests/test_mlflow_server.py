"""Sweeps against a real MLflow tracking server (`python -m sweeps.mlflow_server` on a free local
port), read back through its REST API; and tracking-server outages: writes are spooled, sent when
the server is back, and what is left is uploaded by `python -m sweeps.mlflow_sync`, exactly once."""

import io
import shlex
import shutil
import sys
import time

import pytest
from server_helpers import MlflowServer, free_port, metrics, params, tags
from sweep_helpers import sweep_args

from sweeps import mlflow_server, mlflow_sync
from sweeps.electra_layers import main
from sweeps.engine import tracking
from trainables.core import schema

ALL_METRICS = set(schema.EPOCH_METRICS) | set(schema.FINAL_METRICS)


def with_uri(flags: list[str], uri: str) -> list[str]:
    flags = list(flags)
    flags[flags.index("--mlflow-uri") + 1] = uri
    return flags


@pytest.fixture
def server(tmp_path):
    """A started server; killed (its whole process group, by id) whatever the test does."""
    server = MlflowServer(tmp_path / "server")
    try:
        yield server
    finally:
        server.kill()


def test_server_command_binds_to_localhost_on_the_storage_paths_store(tmp_path, capsys):
    assert mlflow_server.main(["--storage-path", str(tmp_path / "runs"), "--print-command"]) == 0
    command = shlex.split(capsys.readouterr().out)
    assert command[:4] == [sys.executable, "-m", "mlflow", "server"]
    option = lambda name: command[command.index(name) + 1]
    assert option("--host") == "127.0.0.1" and option("--port") == "5000"
    assert option("--backend-store-uri") == f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    assert option("--artifacts-destination") == str(tmp_path / "runs" / "mlartifacts")
    assert (
        mlflow_server.main(
            ["--host", "0.0.0.0", "--allowed-hosts", "mlflow.example.org", "--print-command", "--", "--dev"]
        )
        == 0
    )
    command = shlex.split(capsys.readouterr().out)
    assert command[command.index("--allowed-hosts") + 1] == "mlflow.example.org" and command[-1] == "--dev"


@pytest.mark.sweep
def test_smoke_sweep_against_a_real_tracking_server(sweep_env, tiny_models, server, capsys):
    server.start()
    sweep = "--layers 0,2 --seeds 0 --epochs 1 --name served"
    code = main(sweep_args(tiny_models["bert"], sweep, *with_uri(sweep_env["flags"], server.uri)))
    assert code == 0
    parents, children = server.runs()
    assert len(parents) == 1 and len(children) == 2
    parent = parents[0]
    assert parent["info"]["status"] == "FINISHED" and tags(parent)[schema.TAG_SWEEP] == "served"
    assert {params(c)["layer"] for c in children} == {"0", "2"}
    for child in children:
        assert child["info"]["status"] == "FINISHED"
        assert tags(child)[schema.TAG_PARENT] == parent["info"]["run_id"]
        assert set(schema.PARAMS) <= set(params(child))
        assert ALL_METRICS <= set(metrics(child))
        assert [m["step"] for m in server.metric_history(child["info"]["run_id"], "dev_spearman")] in ([1], ["1"])
    view = f"{server.uri}/#/experiments/{parent['info']['experiment_id']}/runs?workflowType=machine_learning"
    assert f"MLflow:  open {view}\n" in capsys.readouterr().out  # MLflow 3's model-training view of the runs
    assert not (sweep_env["storage"] / "served" / tracking.SPOOL_FILE).exists()


def test_an_unreachable_server_stops_the_sweep_before_it_starts(sweep_env, tiny_models, capsys):
    dead = f"http://127.0.0.1:{free_port()}"
    sweep = "--layers 0 --seeds 0 --epochs 1 --name nobody"
    code = main(sweep_args(tiny_models["bert"], sweep, *with_uri(sweep_env["flags"], dead)))
    assert code == 2
    err = capsys.readouterr().err
    assert f"--mlflow-uri {dead}: the MLflow store is unreachable" in err and "python -m sweeps.mlflow_server" in err


@pytest.mark.sweep
def test_spooled_writes_are_replayed_once_however_often_sync_runs(tmp_path):
    """The writer against a dead server spools everything in order (one warning naming the upload
    command); `mlflow_sync` replays it into a store, and replaying it again changes nothing."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = tracking.start_parent_run(store, "test", "spooled", {"trials": 1})
    spool = tmp_path / "sweep" / tracking.SPOOL_FILE
    said = io.StringIO()
    writer = tracking.MlflowWriter(f"http://127.0.0.1:{free_port()}", spool, retry_interval=3600, stream=said)
    key = {"op": None, "parent": parent, "key": "abc123"}
    now = int(time.time() * 1000)
    writer.submit({**key, "op": "run", "name": "tmft:m-1-0", "params": {"layer": 1, "seed": 0}})
    writer.submit({**key, "op": "status", "status": "RUNNING"})
    for step in (1, 2):
        writer.submit(
            {
                **key,
                "op": "log",
                "metrics": [["dev_spearman", 10.0 * step, now, step], ["train_loss", 1.0 / step, now, step]],
                "params": {"params_truncated": "123"} if step == 1 else {},
                "tags": {"device": "cpu"},
            }
        )
    writer.submit({**key, "op": "status", "status": "FINISHED", "time": now})
    writer.submit({"op": "parent_status", "parent": parent, "status": "FINISHED", "time": now})
    assert writer.pending() == 6
    assert said.getvalue().count("WARNING") == 1 and f"python -m sweeps.mlflow_sync {spool}" in said.getvalue()

    backup = tmp_path / "backup.jsonl"
    shutil.copy(spool, backup)
    assert mlflow_sync.main([str(spool.parent), "--mlflow-uri", store]) == 0
    assert not spool.exists()
    assert mlflow_sync.main([str(backup), "--mlflow-uri", store]) == 0

    from mlflow import MlflowClient
    from mlflow_helpers import metric_steps, runs_by_role

    parents, children = runs_by_role(store)
    assert [p.info.status for p in parents] == ["FINISHED"] and len(children) == 1
    (child,) = children
    assert child.info.status == "FINISHED" and child.data.tags[schema.TAG_PARENT] == parent
    assert child.data.params["layer"] == "1" and child.data.params["params_truncated"] == "123"
    assert metric_steps(store, child.info.run_id, "dev_spearman") == [1, 2]
    assert [m.value for m in MlflowClient(store).get_metric_history(child.info.run_id, "train_loss")] == [1.0, 0.5]
    assert mlflow_sync.main([str(spool)]) == 2  # uploaded already: nothing there


def test_a_refused_write_is_kept_with_all_later_ones_and_sync_names_the_error(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.start_parent_run(store, "test", "refused", {})
    spool = tmp_path / tracking.SPOOL_FILE
    said = io.StringIO()
    writer = tracking.MlflowWriter(store, spool, stream=said)
    missing = {"parent": "0" * 32, "key": "abc"}  # a parent run the store does not have
    writer.submit({**missing, "op": "run", "name": "x", "params": {}})
    writer.submit({**missing, "op": "status", "status": "FINISHED", "time": 1})
    assert writer.pending() == 2 and writer.refused
    assert "refused a write" in said.getvalue() and f"python -m sweeps.mlflow_sync {spool}" in said.getvalue()
    assert mlflow_sync.main([str(spool)]) == 2
    assert tracking.read_spool(spool)[0]["op"] == "run"  # nothing dropped


@pytest.mark.sweep
def test_server_outage_mid_sweep_loses_no_metric(sweep_env, tiny_models, server, monkeypatch, capsys):
    """2 trials x 3 epochs. The server is killed after the first result (the next writes are
    spooled), restarted after the third (the spool is sent on the next event), killed again after
    the fifth and left down until the sweep has ended (what is left stays spooled; the sweep still
    exits 0 and names the upload command). After `mlflow_sync` the server holds every epoch's
    metrics of every trial exactly once, with the values the trials reported."""
    monkeypatch.setenv("EMBSWEEP_MLFLOW_RETRY_S", "0.5")
    reported = []
    original = tracking.MlflowSweepCallback.on_trial_result

    def outage_script(self, iteration, trials, trial, result, **info):
        original(self, iteration, trials, trial, result, **info)
        self.writer.flush()  # the writes so far sent or spooled (they are applied off Tune's loop)
        reported.append(
            (schema.config_hash(trial.config), int(result["epoch"]), result["dev_spearman"], result["train_loss"])
        )
        if len(reported) in (1, 5):
            server.kill()
        elif len(reported) == 3:
            server.start()

    monkeypatch.setattr(tracking.MlflowSweepCallback, "on_trial_result", outage_script)
    server.start()
    sweep = "--layers 0,1 --seeds 0 --epochs 3 --name outage"
    code = main(sweep_args(tiny_models["bert"], sweep, *with_uri(sweep_env["flags"], server.uri)))
    out, err = capsys.readouterr()
    assert code == 0
    assert len(reported) == 6
    spool = sweep_env["storage"] / "outage" / tracking.SPOOL_FILE
    assert spool.is_file(), "writes after the second kill must stay spooled"
    assert err.count("is unreachable") == 2 and "answers again" in err
    assert f"python -m sweeps.mlflow_sync {spool}" in out

    server.start()
    backup = spool.with_name("backup.jsonl")
    shutil.copy(spool, backup)
    assert mlflow_sync.main([str(spool)]) == 0 and not spool.exists()
    assert mlflow_sync.main([str(backup)]) == 0  # a second upload adds nothing

    parents, children = server.runs()
    assert len(parents) == 1 and parents[0]["info"]["status"] == "FINISHED"
    assert len(children) == 2 and all(c["info"]["status"] == "FINISHED" for c in children)
    for child in children:
        assert tags(child)[schema.TAG_PARENT] == parents[0]["info"]["run_id"]
        assert set(schema.PARAMS) <= set(params(child))
        for key in ALL_METRICS:
            steps = sorted(int(m["step"]) for m in server.metric_history(child["info"]["run_id"], key))
            assert steps == ([3] if key in schema.REPORT_METRICS else [1, 2, 3]), (key, steps)
        config_hash = tags(child)[schema.TAG_CONFIG_HASH]
        for key, column in (("dev_spearman", 2), ("train_loss", 3)):
            logged = {int(m["step"]): m["value"] for m in server.metric_history(child["info"]["run_id"], key)}
            assert logged == pytest.approx({e: r[column] for r in reported if r[0] == config_hash for e in [r[1]]})
