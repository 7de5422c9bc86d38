"""The MLflow history's home on the storage path (sweeps/engine/mlflow_home.py): a node-local SQLite store copied to
`<storage-path>/mlflow.db` and restored from there, on a folder and on S3; one server per home. Then the EC2 head's
tracking server as docs/cluster.md section 3 starts it, through a simulated `ray down`: the server killed with no
signal (the instance terminated) or stopped by SIGTERM (the node's shutdown), the head's disk deleted, and a new
head started on the same shared folder finds every run."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from server_helpers import free_port, session_members

from sweeps import mlflow_server
from sweeps.engine import mlflow_home
from trainables.core import object_storage
from trainables.core.errors import SweepInputError

ROOT = Path(__file__).resolve().parents[1]


def a_store(path: Path, runs: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("create table if not exists runs (id text)")
        db.executemany("insert into runs values (?)", [(r,) for r in runs])
    return path


def runs_in(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return [r for (r,) in db.execute("select id from runs order by id")]


@pytest.mark.sweep  # about 2 s: out of the fast run, which stays under 3 minutes
@pytest.mark.parametrize("where", ["folder", "s3"])
def test_a_store_copied_home_is_restored_on_a_new_node(tmp_path, where, request):
    storage = str(tmp_path / "shared") if where == "folder" else request.getfixturevalue("s3").uri("embsweep")
    if where == "folder":
        Path(storage).mkdir()
    home = mlflow_home.home_of(storage)
    first = mlflow_home.Keeper(a_store(tmp_path / "head1" / "mlflow.db", ["r1", "r2"]), home, 60, say=lambda _: None)
    first.start()
    first.tick()  # written before the keeper saw it: copied once writes pause
    a_store(first.store, ["r3"])
    first.finish("SIGTERM received")  # the last write goes home at the end
    assert object_storage.read_bytes(object_storage.join(storage, "mlflow.db.owner")) is None  # the home is free
    shutil.rmtree(tmp_path / "head1")  # `ray down`: the head's disk is gone

    said = []
    second = mlflow_home.Keeper(tmp_path / "head2" / "mlflow.db", home, 60, say=said.append)
    second.start()
    assert runs_in(second.store) == ["r1", "r2", "r3"]
    assert said == [f"restored the MLflow store {second.store} from {object_storage.join(storage, 'mlflow.db')}"]
    second.finish("done")


def test_copies_follow_the_writes_pause_and_the_interval(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(mlflow_home.time, "monotonic", lambda: clock[0])
    (tmp_path / "shared").mkdir()
    home = mlflow_home.home_of(str(tmp_path / "shared"))
    said = []
    keeper = mlflow_home.Keeper(tmp_path / "head" / "mlflow.db", home, interval=10, say=said.append)
    keeper.start()
    assert said == [f"no MLflow history in {home} yet: a new store, copied there as it is written"]
    said.clear()
    keeper.tick()
    assert said == [] and not Path(home).exists()  # nothing written yet
    for second in range(1, 12):  # a write every second: no pause, so the interval decides
        a_store(keeper.store, [f"r{second:02d}"])
        os.utime(keeper.store, ns=(second * 10**9, second * 10**9))
        clock[0] += 1
        keeper.tick()
    assert said == [f"copied the MLflow store to {home} (0.0 MB, every 10 s)"]
    assert runs_in(Path(home)) == [f"r{i:02d}" for i in range(1, 11)]
    clock[0] += mlflow_home.QUIET_S
    keeper.tick()
    assert said[-1].endswith("writes paused)") and len(runs_in(Path(home))) == 11
    keeper.tick()
    assert len(said) == 2  # nothing new, nothing copied
    keeper.finish("SIGTERM received")
    assert len(said) == 2


@pytest.mark.parametrize("where", ["folder", "s3"])
def test_a_second_server_on_the_same_home_is_refused_until_the_first_is_gone(tmp_path, where, request, monkeypatch):
    storage = str(tmp_path) if where == "folder" else request.getfixturevalue("s3").uri("embsweep")
    home = mlflow_home.home_of(storage)
    first = mlflow_home.Lease(home)
    first.acquire()
    with pytest.raises(SweepInputError) as refused:
        mlflow_home.Lease(home).acquire()
    line = str(refused.value)
    assert "\n" not in line and "is the MLflow history of the server on" in line and "--storage-path" in line
    assert first.renew()
    later = time.time() + mlflow_home.LEASE_S + 1  # the first server's node went away: not renewed since
    monkeypatch.setattr(mlflow_home.time, "time", lambda: later)
    second = mlflow_home.Lease(home)
    second.acquire()
    assert not first.renew()  # the first one, if it comes back, knows it no longer owns the home
    second.release()
    mlflow_home.Lease(home).acquire()


def test_a_damaged_home_is_refused_not_served(tmp_path):
    (tmp_path / "mlflow.db").write_bytes(b"not a database" * 100)
    with pytest.raises(Exception, match="not a database|not a sound SQLite database"):
        mlflow_home.restore(str(tmp_path / "mlflow.db"), tmp_path / "head" / "mlflow.db")
    assert not (tmp_path / "head" / "mlflow.db").exists()


def test_the_servers_bad_input_is_one_line_before_it_starts(tmp_path, capsys):
    missing = tmp_path / "not-mounted"
    code = mlflow_server.main(["--storage-path", str(missing), "--local-store", str(tmp_path / "h" / "m.db")])
    assert code == 2 and not missing.exists()
    (line,) = capsys.readouterr().err.splitlines()
    assert f"--storage-path {missing} does not exist, and it is the MLflow history's home: mount" in line
    # a SQLite store in a folder that is not there (a RayJob's volume not mounted): not created on the pod's disk
    store = f"sqlite:///{missing}/mlflow-store/x.db"
    assert mlflow_server.main(["--backend-store-uri", store, "--storage-path", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"the folder of the SQLite store {store} does not exist: create it, or" in line and "--local-store" in line
    with pytest.raises(SystemExit):
        mlflow_server.main(["--local-store", "a.db", "--backend-store-uri", "sqlite:///b.db"])
    assert "not both" in capsys.readouterr().err


# --- the EC2 head's tracking server (docs/cluster.md, section 3) through `ray down` ---


def docs_server_command(home: Path, shared: Path, port: int) -> list[str]:
    """Section 3's command as the head's shell runs it, with the head's home and /mnt/shared in a folder here."""
    text = (ROOT / "docs" / "cluster.md").read_text().replace("\\\n", " ")
    (command,) = {
        re.sub(r"\s+", " ", line).strip()
        for line in text.splitlines()
        if line.startswith("ray exec cluster.yaml --tmux 'cd ~/embsweep && python -m sweeps.mlflow_server")
        and "--storage-path /mnt/shared " in line
    }
    inner = shlex.split(command)[-1].split("&&", 1)[1]
    inner = inner.replace("~/", f"{home}/").replace("/mnt/shared", str(shared)).replace("--port 5000", f"--port {port}")
    argv = shlex.split(inner)
    assert argv[:3] == ["python", "-m", "sweeps.mlflow_server"], argv
    return [sys.executable, *argv[1:]]


class Head:
    """The head node's server, in a session of its own: `ray_down()` ends every process of it with no signal to
    handle, as a terminated instance does."""

    def __init__(self, tmp_path: Path, name: str, shared: Path):
        self.home = tmp_path / name
        self.home.mkdir()
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / f"{name}.log"
        command = docs_server_command(self.home, shared, self.port)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(self.home)}
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, start_new_session=True, stdout=open(self.log, "w"), stderr=subprocess.STDOUT
        )
        self.wait_for(lambda: self.answers(), 120)

    def answers(self) -> bool:
        import urllib.request

        assert self.process.poll() is None, self.log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(self.uri + "/health", timeout=2):
                return True
        except OSError:
            return False

    def wait_for(self, condition, timeout: float) -> None:
        deadline = time.time() + timeout
        while not condition():
            assert time.time() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.5)

    def session(self) -> list[int]:
        return session_members(self.process.pid)

    def ray_down(self) -> None:
        for pid in self.session():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        shutil.rmtree(self.home)  # the head's disk goes with the instance

    def stop(self, number=signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(number)
            try:
                self.process.wait(timeout=60)
            finally:
                for pid in self.session():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


def log_runs(uri: str, experiment: str, count: int) -> list[str]:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    ids = []
    for i in range(count):
        run = client.create_run(experiment_id)
        client.log_metric(run.info.run_id, "spearman", 0.5 + i / 100)
        client.set_terminated(run.info.run_id)
        ids.append(run.info.run_id)
    return ids


def stored_runs(database: Path) -> list[str]:
    """The run ids of a SQLite MLflow store (none while it does not exist or has no runs table yet)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
            return sorted(r for (r,) in db.execute("select run_uuid from runs"))
    except sqlite3.OperationalError:
        return []


def runs_served(uri: str, experiment: str) -> list[str]:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    return sorted(r.info.run_id for r in client.search_runs([found.experiment_id])) if found else []


@pytest.mark.sweep
def test_the_heads_history_is_on_the_shared_folder_after_ray_down(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    head = Head(tmp_path, "head1", shared)
    try:
        first = log_runs(head.uri, "electra-layers", 3)
        # the server copies once the writes pause; then the instance is terminated, with no signal to handle
        head.wait_for(lambda: stored_runs(shared / "mlflow.db") == sorted(first), 60)
        head.ray_down()
    finally:
        head.stop(signal.SIGKILL)
    assert not (tmp_path / "head1").exists() and (shared / "mlflow.db").is_file()

    again = Head(tmp_path, "head2", shared)  # `ray up` again, on the same shared storage
    try:
        assert runs_served(again.uri, "electra-layers") == sorted(first)
        assert f"restored the MLflow store {tmp_path / 'head2' / 'mlflow.db'} from {shared / 'mlflow.db'}" in (
            again.log.read_text()
        )
        second = log_runs(again.uri, "electra-layers", 1)
        again.stop(signal.SIGTERM)  # the node's shutdown: the last writes are copied before the server goes
        assert "copied the MLflow store" in again.log.read_text().rsplit("restored", 1)[-1]
        assert not (shared / "mlflow.db.owner").exists()
    finally:
        again.stop(signal.SIGKILL)
    shutil.rmtree(tmp_path / "head2")
    assert stored_runs(shared / "mlflow.db") == sorted(first + second)


@pytest.mark.sweep
def test_a_second_head_on_the_same_shared_folder_is_refused_in_one_line(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    head = Head(tmp_path, "head1", shared)
    try:
        other = tmp_path / "other"
        other.mkdir()
        done = subprocess.run(
            docs_server_command(other, shared, free_port()),
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = done.stderr.splitlines()
        assert "is the MLflow history of the server on" in line
        owner = json.loads((shared / "mlflow.db.owner").read_text())
        assert owner["pid"] == head.process.pid
    finally:
        head.stop()


@pytest.mark.sweep
def test_a_server_whose_home_is_a_bucket_restores_and_copies_there(tmp_path, s3):
    """The cluster without a shared file system: `--storage-path s3://...` with `--local-store`; the history and the
    artifacts in the bucket, through a head's end (SIGTERM, its disk deleted) and a new head."""
    storage = s3.uri("embsweep")
    ids = []
    for name in ("head1", "head2"):
        port = free_port()
        log = tmp_path / f"{name}.log"
        command = [sys.executable, "-m", "sweeps.mlflow_server", "--storage-path", storage,
                   "--local-store", str(tmp_path / name / "mlflow.db"), "--port", str(port)]  # fmt: skip
        server = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                  start_new_session=True, stdout=open(log, "w"), stderr=subprocess.STDOUT)  # fmt: skip
        try:
            uri = f"http://127.0.0.1:{port}"
            deadline = time.time() + 120
            while not _answers(uri):
                assert time.time() < deadline and server.poll() is None, log.read_text()[-3000:]
                time.sleep(0.5)
            assert runs_served(uri, "electra-layers") == sorted(ids)
            ids += log_runs(uri, "electra-layers", 1)
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=60) == 0, log.read_text()[-3000:]
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
        shutil.rmtree(tmp_path / name)
    assert "embsweep/mlflow.db" in s3.keys("embsweep/") and "embsweep/mlflow.db.owner" not in s3.keys("embsweep/")
    (tmp_path / "copy.db").write_bytes(s3.read("embsweep/mlflow.db"))
    assert stored_runs(tmp_path / "copy.db") == sorted(ids)


def _answers(uri: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(uri + "/health", timeout=2):
            return True
    except OSError:
        return False


def test_a_store_left_behind_while_another_server_wrote_the_home_is_refused(tmp_path):
    (tmp_path / "shared").mkdir()
    home = mlflow_home.home_of(str(tmp_path / "shared"))
    quiet = {"say": lambda _: None}
    a = mlflow_home.Keeper(a_store(tmp_path / "nodeA" / "mlflow.db", ["r1"]), home, 60, **quiet)
    a.start()
    a.finish("SIGTERM received")
    b = mlflow_home.Keeper(tmp_path / "nodeB" / "mlflow.db", home, 60, **quiet)  # a new node: restores, writes
    b.start()
    a_store(b.store, ["r2"])
    b.finish("SIGTERM received")
    again = mlflow_home.Keeper(a.store, home, 60, **quiet)  # node A comes back with its old store
    with pytest.raises(SweepInputError) as refused:
        again.start()
    assert str(refused.value) == (
        f"the MLflow store {a.store} is not the last copy of its home {home} (another server has written the home "
        f"since): move {a.store} away, and this server restores the home's history"
    )
    assert runs_in(Path(home)) == ["r1", "r2"]  # nothing copied over the newer history
    mlflow_home.Keeper(b.store, home, 60, **quiet).start()  # the store that wrote the home last goes on
