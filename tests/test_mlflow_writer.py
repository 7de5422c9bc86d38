"""The sweep's MLflow writes off Ray Tune's loop (`tracking.BackgroundWriter`): applied in the order they
were submitted, without the caller waiting, all of them sent or spooled by `close()` (and before the parent
run is marked finished), and an outage's spool replayed exactly once."""

import io
import threading
import time

import pytest
from mlflow import MlflowClient

from sweeps.engine import tracking
from trainables.core import schema


class Recording(tracking.MlflowWriter):
    """A writer whose store is a list; `down` makes it refuse like a stopped tracking server."""

    def __init__(self, spool=None, delay=0.0, retry_interval=0.0):
        super().__init__("http://127.0.0.1:9", spool, retry_interval=retry_interval, stream=io.StringIO())
        self.applied, self.delay, self.down = [], delay, False
        self.threads = set()

    def apply(self, op):
        self.threads.add(threading.current_thread().name)
        if self.down:
            raise ConnectionError("Connection refused")
        time.sleep(self.delay)
        self.applied.append(op)

    def reachable(self, timeout=2.0):
        return not self.down


def status(n):
    return {"op": "status", "parent": "p", "key": f"k{n}", "status": "RUNNING"}


def test_writes_are_applied_in_submission_order_off_the_callers_thread():
    recording = Recording(delay=0.002)
    writer = tracking.BackgroundWriter(recording, batch=7)
    ops = [status(n) for n in range(200)]
    for op in ops:
        writer.submit(op)
    writer.close()
    assert [op["key"] for op in recording.applied] == [op["key"] for op in ops]
    assert recording.threads == {"mlflow-writer"}


def test_submit_does_not_wait_for_the_store():
    recording = Recording(delay=0.05)
    writer = tracking.BackgroundWriter(recording)
    started = time.monotonic()
    for n in range(20):
        writer.submit(status(n))
    submitted = time.monotonic() - started
    writer.close()
    assert submitted < 0.2 and time.monotonic() - started >= 20 * 0.05 * 0.9
    assert len(recording.applied) == 20


def test_close_returns_once_every_write_is_applied_and_refuses_later_ones():
    recording = Recording(delay=0.01)
    writer = tracking.BackgroundWriter(recording)
    for n in range(30):
        writer.submit(status(n))
    writer.close()
    assert len(recording.applied) == 30
    with pytest.raises(RuntimeError, match="closed"):
        writer.submit(status(31))


def test_an_error_in_the_writer_thread_is_raised_by_close():
    class Broken(Recording):
        def apply(self, op):
            raise ValueError("bad op")

    writer = tracking.BackgroundWriter(Broken())  # no spool: the error is not kept as a spooled write
    writer.submit(status(0))
    with pytest.raises(ValueError, match="bad op"):
        writer.close()


def test_logs_to_one_run_are_merged_but_never_across_its_other_ops():
    def log(key, step, **extra):
        return {"op": "log", "parent": "p", "key": key, "metrics": [["m", step, 0, step]], **extra}

    ops = [
        {"op": "run", "parent": "p", "key": "a", "params": {}},
        log("a", 1, params={"x": "1"}, tags={"t": "old"}),
        log("b", 1),
        log("a", 2, tags={"t": "new", "u": "1"}),
        {"op": "status", "parent": "p", "key": "a", "status": "FINISHED"},
        log("a", 3),
        {"op": "parent_status", "parent": "p", "status": "FINISHED"},
        log("b", 2),
    ]
    merged = tracking.merge_logs(ops)
    assert [(op["op"], op.get("key")) for op in merged] == [
        ("run", "a"),
        ("log", "a"),
        ("log", "b"),
        ("status", "a"),
        ("log", "a"),
        ("parent_status", None),
        ("log", "b"),
    ]
    assert merged[1]["metrics"] == [["m", 1, 0, 1], ["m", 2, 0, 2]]
    assert merged[1]["params"] == {"x": "1"} and merged[1]["tags"] == {"t": "new", "u": "1"}
    assert ops[1]["metrics"] == [["m", 1, 0, 1]], "the submitted ops are not changed"


def test_an_outage_is_spooled_in_order_and_replayed_once_when_the_store_answers(tmp_path):
    spool = tmp_path / tracking.SPOOL_FILE
    recording = Recording(spool=spool, retry_interval=0.05)
    writer = tracking.BackgroundWriter(recording)
    recording.down = True
    for n in range(5):
        writer.submit(status(n))
    writer.flush()
    assert recording.applied == [] and recording.pending() == 5
    assert recording.stream.getvalue().count("is unreachable") == 1
    recording.down = False
    deadline = time.monotonic() + 10
    while recording.pending() and time.monotonic() < deadline:  # retried with no new write coming
        time.sleep(0.02)
    writer.submit(status(5))
    writer.close()
    assert [op["key"] for op in recording.applied] == [f"k{n}" for n in range(6)]
    assert not spool.exists() and "answers again: 5 spooled" in recording.stream.getvalue()


def test_the_queued_file_holds_exactly_the_writes_not_yet_sent(tmp_path):
    spool = tmp_path / tracking.SPOOL_FILE
    gate = threading.Event()

    class Gated(Recording):
        def apply(self, op):
            gate.wait(10)
            super().apply(op)

    writer = tracking.BackgroundWriter(Gated(spool=spool))
    for n in range(3):
        writer.submit(status(n))
    assert [op["key"] for op in tracking.read_spool(tracking.queued_path(spool))] == ["k0", "k1", "k2"]
    gate.set()
    writer.flush()
    assert tracking.queued_path(spool).read_text() == ""
    writer.close()
    assert not tracking.queued_path(spool).exists() and not spool.exists()


def test_writes_queued_by_a_killed_driver_are_sent_first_by_the_next_writer(tmp_path):
    spool = tmp_path / tracking.SPOOL_FILE
    gate, stuck = threading.Event(), threading.Event()

    class Stuck(Recording):  # a driver killed before its thread sent anything
        def apply(self, op):
            stuck.set()
            gate.wait(10)

    killed = tracking.BackgroundWriter(Stuck(spool=spool))
    for n in range(4):
        killed.submit(status(n))
    # A killed driver's thread does nothing more; this one must be held inside its first write before the
    # next writer starts, or it could still see that writer's spool and add its own write to it.
    assert stuck.wait(10)
    resumed = Recording(spool=spool)
    writer = tracking.BackgroundWriter(resumed)
    writer.submit(status(4))
    writer.close()
    assert [op["key"] for op in resumed.applied] == ["k0", "k1", "k2", "k3", "k4"]
    assert not spool.exists() and not tracking.queued_path(spool).exists()
    gate.set()
    killed.close()


def _spool_text(*lines: str, end: str = "\n") -> str:
    return "\n".join(lines) + end


def _line(op: dict) -> str:
    import json

    return json.dumps({"uri": "http://127.0.0.1:9", **op}, sort_keys=True)


def test_a_torn_line_inside_the_spool_is_reported_and_skipped_not_fatal(tmp_path):
    """A driver killed mid-write leaves a torn line, and the next writer appends behind it: the spool is still
    replayed, every whole write sent, the torn line named by file and line."""
    spool = tmp_path / tracking.SPOOL_FILE
    spool.write_text(_spool_text(_line(status(0)), _line(status(1))[:25], _line(status(2))))
    writer = Recording(spool=spool)
    assert writer.drain()
    assert [op["key"] for op in writer.applied] == ["k0", "k2"] and not spool.exists()
    said = writer.stream.getvalue()
    assert f"{spool}, line 2: a torn MLflow write" in said and "skipped" in said, said


def test_a_write_spooled_behind_a_torn_last_line_is_kept_whole(tmp_path):
    spool = tmp_path / tracking.SPOOL_FILE
    spool.write_text(_spool_text(_line(status(0)), _line(status(1))[:30], end=""))  # killed mid-line
    writer = Recording(spool=spool)
    writer.down = True
    writer.submit(status(2))  # spooled behind the torn line, on a line of its own
    writer.down = False
    assert writer.drain()
    assert [op["key"] for op in writer.applied] == ["k0", "k2"]
    assert f"{spool}, line 2: a torn MLflow write" in writer.stream.getvalue()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One SQLite store for the tests below (creating one takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


@pytest.mark.sweep  # a real store: 3 s or more
def test_finishing_the_parent_run_first_sends_every_queued_trial_write(store, tmp_path, monkeypatch):
    parent = tracking.start_parent_run(store, "test", "queued", {"trials": 1})
    original = tracking.MlflowWriter.apply

    def slow(self, op):
        time.sleep(0.2)
        return original(self, op)

    monkeypatch.setattr(tracking.MlflowWriter, "apply", slow)
    callback = tracking.MlflowSweepCallback(store, parent, {"git_commit": "abc"}, sweep_dir=str(tmp_path / "sweep"))
    config = {"method": "tmft", "layer": 1, "seed": 0}
    callback.writer.submit(callback._op("run", config, name="trial", params={"layer": "1"}))
    callback.writer.submit(callback._op("log", config, metrics=[["dev_spearman", 0.5, 0, 1]]))
    callback.writer.submit(callback._op("status", config, status="FINISHED", time=int(time.time() * 1000)))
    assert tracking.finish_parent_run(store, parent, "FINISHED", str(tmp_path / "sweep")) is None

    client = MlflowClient(store)
    assert client.get_run(parent).info.status == "FINISHED"
    (child,) = client.search_runs(
        [client.get_run(parent).info.experiment_id], filter_string=f"tags.`{schema.TAG_PARENT}` = '{parent}'"
    )
    assert child.info.status == "FINISHED" and child.data.metrics["dev_spearman"] == 0.5
    assert child.data.params["layer"] == "1"


@pytest.mark.sweep  # a real store: 3 s or more
def test_the_callback_closes_its_writer_when_the_experiment_ends(store, tmp_path):
    parent = tracking.start_parent_run(store, "test", "ends", {})
    callback = tracking.MlflowSweepCallback(store, parent, sweep_dir=str(tmp_path / "sweep"))
    writer = callback.writer
    callback.run_for({"method": "tmft", "layer": 0})
    callback.on_experiment_end(trials=[])
    assert not writer._thread.is_alive() and callback._writer is None
    client = MlflowClient(store)
    runs = client.search_runs(
        [client.get_run(parent).info.experiment_id], filter_string=f"tags.`{schema.TAG_PARENT}` = '{parent}'"
    )
    assert len(runs) == 1  # the trial's run, created before on_experiment_end returned


SLOW_STORE_DRIVER = """
import runpy, sys, time
from sweeps.engine import tracking
apply = tracking.MlflowWriter.apply
def slow(self, op):  # a slow store: writes are still queued when Ctrl-C comes
    time.sleep(0.4)
    return apply(self, op)
tracking.MlflowWriter.apply = slow
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.sweep
def test_ctrl_c_sends_every_queued_write_before_the_driver_exits(sweep_env, ray_session, tmp_path):
    """A simulated sweep on a slow store, stopped by SIGINT once a trial has reported: every epoch Tune
    recorded for a trial is in its MLflow run, and nothing is left queued."""
    import glob
    import json
    import signal
    import subprocess
    import sys

    from sweep_helpers import wait_for

    from trainables.core.paths import PROJECT_ROOT

    storage, uri = sweep_env["storage"], sweep_env["uri"]
    flags = "--smoke-test --simulate --simulate-seconds 2 --epochs 3 --layers 0,1 --seeds 0-1 --max-concurrent 2"
    argv = [*flags.split(), "--gpus-per-trial", "0", "--cpus-per-trial", "0.5", "--storage-path", str(storage)]
    argv += ["--mlflow-uri", uri, "--experiment", "test", "--name", "stopped"]
    argv += ["--address", ray_session.get_runtime_context().gcs_address]
    log = tmp_path / "driver.log"
    driver = subprocess.Popen(
        [sys.executable, "-c", SLOW_STORE_DRIVER, str(PROJECT_ROOT / "sweeps" / "electra_layers.py"), *argv],
        cwd=PROJECT_ROOT,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    results = lambda: [f for f in glob.glob(f"{storage}/stopped/*/result.json") if open(f).read().strip()]
    try:
        wait_for(lambda: len(results()) >= 2, driver, log, timeout=300, what="two trials to report an epoch")
        driver.send_signal(signal.SIGINT)
        driver.wait(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("test").experiment_id])
    by_trial = {r.data.tags.get("trial_id"): r for r in runs if r.data.tags.get(schema.TAG_ROLE) == "trial"}
    for result in results():
        epochs = [int(json.loads(line)["epoch"]) for line in open(result) if line.strip()]
        trial = json.loads(open(result).readline())["trial_id"]
        steps = sorted(m.step for m in client.get_metric_history(by_trial[trial].info.run_id, "train_loss"))
        assert steps == epochs, (trial, log.read_text()[-3000:])
    assert not list((storage / "stopped").glob("mlflow-spool*")), "nothing queued or spooled is left"


@pytest.mark.sweep  # a real store and a subprocess: 3 s or more
def test_mlflow_sync_reports_a_torn_spool_line_and_uploads_the_rest(store, tmp_path):
    """`python -m sweeps.mlflow_sync` on a spool a killed driver tore mid-line, with writes appended behind it:
    exit 0, the torn line named on stderr, every whole write in the store."""
    import json
    import subprocess
    import sys

    from trainables.core.paths import PROJECT_ROOT

    parent = tracking.start_parent_run(store, "test", "torn", {})
    ops = [
        {"op": "run", "parent": parent, "key": "k0", "name": "trial", "params": {"layer": "1"}},
        {"op": "log", "parent": parent, "key": "k0", "metrics": [["dev_spearman", 0.5, 0, 1]]},
        {"op": "status", "parent": parent, "key": "k0", "status": "FINISHED", "time": int(time.time() * 1000)},
    ]
    lines = [json.dumps({"uri": store, **op}, sort_keys=True) for op in ops]
    spool = tmp_path / tracking.SPOOL_FILE
    spool.write_text(_spool_text(lines[0], lines[1][:40], lines[1], lines[2]))  # torn, then the write again whole
    done = subprocess.run(
        [sys.executable, "-m", "sweeps.mlflow_sync", str(spool)], capture_output=True, text=True, cwd=PROJECT_ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{spool}, line 2: a torn MLflow write" in done.stderr and "Uploaded 3 spooled" in done.stdout
    client = MlflowClient(store)
    (child,) = client.search_runs(
        [client.get_run(parent).info.experiment_id], filter_string=f"tags.`{schema.TAG_PARENT}` = '{parent}'"
    )
    assert child.data.metrics["dev_spearman"] == 0.5 and child.info.status == "FINISHED"
    assert not spool.exists()
