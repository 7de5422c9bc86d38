"""Faults at scale on the local cluster (cluster_local.yaml's fake multi-node provider, 2 workers x 4
GPUs, autoscaling from 0, idle workers reaped after 15 s): ONE simulated sweep (`--simulate`) of 104
trials at 0.25 GPU (32 at once, 16 to a worker), its storage on S3 (the tests' moto server), its runs
on an MLflow tracking server, goes through every fault of issue 42 in turn:

1. a worker's raylet SIGKILLed while 16 trials run on it; the tracking server killed and started
   again while the autoscaler reaps the dead node (as idle, since its last report) and launches a
   replacement for the trials still waiting; the test waits until the replacement runs trials and a run
   names it (an epoch there logged);
2. again: the raylet of a worker holding 16 trials (the other first node, or the replacement),
   and again a replacement up with trials on it, named by a run;
3. the driver SIGKILLed (once the server answered again and 16 trials finished), then `--resume`.

Before the driver kill, no trial has ended ERROR: each node death counted once against `--max-failures`
(`sweeps/engine/actor_deaths.py`). Then: one MLflow run per trial, FINISHED, each epoch logged once, no
GPU id ever held more than four trials at once (from each epoch's recorded node, CUDA_VISIBLE_DEVICES
and time span in Tune's result.json), each killed node reaped by the autoscaler, every replacement node
named by the runs of the trials that ran there (each run's placement history), and the restarted
server's spooled writes logged. One sweep rather than one per fault: each sweep pays Ray's start of 32
trial processes (about a minute and a half on two cores), and the step must stay under 10 minutes
(docs/cluster.md, "Faults at scale"). Its own CI step (.ci/run): `pytest -m "slow and faults"`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from s3_helpers import EXTERNAL_ENV, TEST_CREDENTIALS, S3Store
from server_helpers import MlflowServer, tags
from sweep_helpers import wait_for

from sweeps import local_cluster
from trainables.core import schema
from trainables.core.paths import PROJECT_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.faults]  # their own CI step (.ci/run)

WORKERS, GPUS, SHARE = 2, 4, 0.25
SLOTS_PER_NODE = int(GPUS / SHARE)  # 16 trials at once on a worker node
IDLE_MINUTES = 0.25  # Ray's autoscaler reaps a worker idle 60 x this many seconds (a fraction is honoured)


@pytest.fixture(scope="module")
def cluster(s3_server, tmp_path_factory):
    """The local cluster (2 workers x 4 GPUs, none up at the start), its processes holding the bucket's
    credentials the way a cloud machine does, and an MLflow tracking server, started side by side. An
    idle worker (a dead one counts as idle since its last report) is reaped after 15 s rather than the
    file's minute, so that a killed node is replaced soon."""
    saved = dict(os.environ)
    if not os.environ.get(EXTERNAL_ENV):
        os.environ.update(TEST_CREDENTIALS)
    temp = Path(tempfile.mkdtemp(prefix="es-faults-", dir="/tmp"))  # short: Ray's socket paths
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    try:
        with ThreadPoolExecutor(1) as pool:
            starting = pool.submit(server.start)
            address = local_cluster.up(
                temp, max_workers=WORKERS, gpus=GPUS, timeout=180, idle_timeout_minutes=IDLE_MINUTES
            )
            starting.result()
        env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
        yield {"address": address, "temp": temp, "env": env, "server": server}
    finally:
        server.kill()
        local_cluster.down(temp, grace=3)
        monitor = temp / "session_latest/logs/monitor.log"  # what the autoscaler did, kept for a failed run
        if monitor.is_file():
            shutil.copy(monitor, tmp_path_factory.getbasetemp() / "monitor.log")
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def place(cluster, s3_server, tmp_path):
    """A bucket, the module's tracking server (started again if a test left it down) and an empty
    working folder."""
    store = S3Store(os.environ.get(EXTERNAL_ENV) or s3_server.endpoint, s3_server)
    server = cluster["server"]
    if not server.healthy():
        server.start()
    work = tmp_path / "work"
    work.mkdir()
    yield {"store": store, "server": server, "work": work, "uri": store.uri("runs"), "log": tmp_path / "driver.log"}


def sweep_argv(cluster, place, name: str, seeds: int, epochs: int, seconds: float) -> list[str]:
    """A simulated sweep of 2 layers x `seeds` seeds at 0.25 GPU, each trial `seconds` long."""
    return [
        str(PROJECT_ROOT / "sweeps/electra_layers.py"), "--smoke-test", "--simulate",
        "--simulate-seconds", str(seconds), "--epochs", str(epochs), "--layers", "0,1", "--seeds", f"0-{seeds - 1}",
        "--gpus-per-trial", str(SHARE), "--cpus-per-trial", "0.5", "--max-concurrent", str(WORKERS * SLOTS_PER_NODE),
        "--max-failures", "3",  # a trial can be on both killed nodes in turn; one retry more in hand
        "--address", cluster["address"], "--storage-path", place["uri"], "--mlflow-uri", place["server"].uri,
        "--experiment", name, "--name", name,
    ]  # fmt: skip


def start_driver(argv: list[str], cluster, place) -> subprocess.Popen:
    with open(place["log"], "a") as log:
        return subprocess.Popen(
            [sys.executable, *argv],
            cwd=place["work"],
            env=cluster["env"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def finish(driver: subprocess.Popen, place, timeout: float = 900) -> None:
    try:
        code = driver.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        pytest.fail("the sweep did not end in time; its output ends:\n" + place["log"].read_text()[-4000:])
    assert code == 0, place["log"].read_text()[-4000:]


def worker_raylets(cluster) -> dict[str, psutil.Process]:
    """The live worker nodes' raylets by node id (the fake provider gives each its id in its environment,
    the head too)."""
    from sweeps.engine.ray_internals import fake_multinode_names

    head_node_id = fake_multinode_names().head_node_id

    found = {}
    for process in local_cluster._cluster_processes(cluster["temp"]):
        try:
            if Path(process.cmdline()[0]).name != "raylet":
                continue
            node = process.environ().get("RAY_OVERRIDE_NODE_ID_FOR_TESTING")
        except (psutil.Error, IndexError):
            continue
        if node and node != head_node_id:
            found[node] = process
    return found


def gpus_per_node(cluster) -> dict[str, float]:
    """GPUs held now on each node, from `ray status -v`'s per-node usage."""
    state = local_cluster.read_state(cluster["temp"])
    shown = subprocess.run(
        [local_cluster._ray_cli(), "status", "-v", f"--address={state['address']}"],
        env=local_cluster.cluster_env(cluster["temp"]),
        capture_output=True,
        text=True,
    ).stdout
    used, node = {}, None
    for line in shown.split("Total Usage:")[-1].splitlines():
        words = line.split()
        if line.startswith("Node: "):
            node = words[1]
        elif node and len(words) >= 2 and words[1] == "GPU" and "/" in words[0]:
            used[node] = float(words[0].split("/")[0])
    return used


def trials_on(raylet: psutil.Process) -> int:
    """Trial actors up on a node: its raylet's workers whose title names the simulated trainable."""
    count = 0
    for worker in raylet.children():
        try:
            count += "Trainable" in " ".join(worker.cmdline()[:1])
        except psutil.Error:
            continue
    return count


def monitor_log(cluster) -> str:
    """The autoscaler's log (what it launched and terminated, and why)."""
    return (cluster["temp"] / "session_latest/logs/monitor.log").read_text(errors="replace")


def note(place, text: str) -> None:
    """A line of the test's own in the drivers' log: the faults' times beside the sweep's progress."""
    with open(place["log"], "a") as log:
        log.write(f"[test {time.strftime('%H:%M:%S')}] {text}\n")


def results(place, name: str) -> dict[str, list[dict]]:
    """Every trial's result.json rows (Tune's own log of every result, synced to the bucket)."""
    store = place["store"]
    found = {}
    for key in store.keys(f"runs/{name}/"):
        if key.endswith("/result.json"):
            text = store.read(key).decode()
            found[key] = [json.loads(line) for line in text.splitlines() if line.strip()]
    return found


def finished_runs(place, name: str) -> int:
    _, children = place["server"].runs(name)  # each sweep logs to an experiment of its own name
    return sum(c["info"]["status"] == "FINISHED" for c in children)


def failed_runs(place, name: str) -> list[str]:
    _, children = place["server"].runs(name)
    return [c["info"]["run_name"] for c in children if c["info"]["status"] == "FAILED"]


def check_sweep(place, name: str, trials: int, epochs: int) -> dict:
    """One MLflow run per trial, FINISHED, each epoch logged once; no GPU id ever held more than four
    trials at once. Returns the trials per (node, GPU id) over the whole sweep."""
    server = place["server"]
    parents, children = server.runs(name)
    if len(children) != trials:
        pytest.fail(missing_runs(place, name, children, trials))
    assert len({tags(c)[schema.TAG_CONFIG_HASH] for c in children}) == trials
    for child in children:
        assert child["info"]["status"] == "FINISHED", child["info"]["run_name"]
        history = server.metric_history(child["info"]["run_id"], "dev_spearman")
        assert sorted(int(m["step"]) for m in history) == list(range(1, epochs + 1)), child["info"]["run_name"]
    spans = defaultdict(set)  # (node, GPU id) -> {(start, end, trial)}: a result reported again counts once
    for key, rows in results(place, name).items():
        for row in rows:
            assert row["cuda_visible_devices"] and row["gpu_ids"], row
            start, end = map(float, row["epoch_span"].split("-"))
            for gpu in row["cuda_visible_devices"].split(","):
                spans[(row["node_id"], gpu)].add((start, end, key))
    assert len(results(place, name)) >= trials
    per_gpu = {}
    for slot, intervals in spans.items():
        intervals = list(intervals)
        assert most_at_once(intervals) <= 4, (slot, most_at_once(intervals))
        per_gpu[slot] = len({key for _, _, key in intervals})
    return per_gpu


def missing_runs(place, name: str, children: list[dict], trials: int) -> str:
    """Why runs are missing: which trials Tune logged results for without a run, and the drivers' last
    progress lines (how many trials each driver knew of)."""
    logged = {tags(c).get("trial_id") for c in children}
    tune_trials = {key: rows for key, rows in results(place, name).items() if rows}
    without_run = sorted(key for key, rows in tune_trials.items() if rows[-1].get("trial_id") not in logged)
    progress = [line for line in place["log"].read_text().splitlines() if " done, " in line][-3:]
    return (
        f"{len(children)} runs for {trials} trials; Tune logged results of {len(tune_trials)} trials, these without "
        f"a run: {without_run[:10]}; the drivers' last progress lines: {progress}"
    )


def unnamed_nodes(place, name: str, nodes: list[str]) -> list[str]:
    """The nodes that no run's placement history names."""
    _, children = place["server"].runs(name)
    named = {placement["node_id"] for child in children for _, placement in schema.placement_history(tags(child))}
    return [node for node in nodes if node not in named]


def check_placements(place, name: str, replacements: list[str]) -> None:
    """Every run names where it ran last (`node_id`) as the last of its placements, and each replacement node is
    named by the runs of the trials that ran on it (issue 56: the tags kept the first epoch's node)."""
    _, children = place["server"].runs(name)
    for child in children:
        history = schema.placement_history(tags(child))
        assert history, child["info"]["run_name"]
        assert history[-1][1]["node_id"] == tags(child)["node_id"], (child["info"]["run_name"], history)
    missing = unnamed_nodes(place, name, replacements)
    assert not missing, f"no run names the replacement node(s) {missing}"


def most_at_once(intervals: list[tuple[float, float, str]]) -> int:
    """The largest number of intervals that overlap at one instant (ends before starts at a tie)."""
    events = sorted([(start, 1) for start, _, _ in intervals] + [(end, -1) for _, end, _ in intervals])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_most_at_once_counts_overlaps_and_not_back_to_back_intervals():
    assert most_at_once([(0, 1, "a"), (1, 2, "b"), (2, 3, "c")]) == 1
    assert most_at_once([(0, 3, "a"), (1, 2, "b"), (1.5, 4, "c"), (3, 5, "d")]) == 3


def kill_a_full_worker(cluster, driver, place) -> tuple[str, set[str]]:
    """SIGKILL the raylet of a worker node with 16 trials on it (all its GPUs held, as `ray status` shows) once
    both workers are up; returns the node and the workers up then."""

    def full():
        up = worker_raylets(cluster)
        nodes = (
            [node for node, raylet in up.items() if trials_on(raylet) >= SLOTS_PER_NODE] if len(up) == WORKERS else []
        )
        held = gpus_per_node(cluster) if nodes else {}
        return next(((node, up) for node in nodes if held.get(node) == GPUS), None)

    what = f"{WORKERS} workers up, one running {SLOTS_PER_NODE} trials"
    node, up = wait_for(full, driver, place["log"], timeout=600, what=what, every=1)
    up[node].kill()
    note(place, f"killed the raylet of {node} ({SLOTS_PER_NODE} trials on it)")
    return node, set(up)


def wait_for_replacement(cluster, driver, place, name: str, before: set[str]) -> str:
    """A worker node that was not up at the kill, with trials placed on it (trial processes up, GPUs held), once a
    run of sweep `name` names it."""

    def placed():
        new = [node for node, raylet in worker_raylets(cluster).items() if node not in before and trials_on(raylet)]
        held = gpus_per_node(cluster) if new else {}
        return next((node for node in new if held.get(node, 0) > 0), None)

    node = wait_for(placed, driver, place["log"], timeout=400, what="a replacement worker running trials", every=1)
    note(place, f"replacement {node} runs trials")
    # A run names its node with each epoch's result. The next kill (this node's, it may be) waits for one: a node
    # killed or reaped before any epoch on it ended would be named by no run.
    named = lambda: not unnamed_nodes(place, name, [node])  # noqa: E731
    wait_for(named, driver, place["log"], timeout=400, what=f"an epoch logged on {node}", every=2)
    note(place, f"a run names {node}")
    return node


def test_104_trials_through_two_raylet_kills_a_tracking_server_restart_and_a_driver_kill(cluster, place):
    name, server, log = "faults", place["server"], place["log"]
    driver = start_driver(sweep_argv(cluster, place, name, seeds=52, epochs=2, seconds=30), cluster, place)
    replaced = []  # (killed node, its replacement)
    try:
        killed, before = kill_a_full_worker(cluster, driver, place)
        server.kill()  # while the autoscaler reaps the dead node; the driver spools its writes meanwhile
        time.sleep(10)
        server.start()
        note(place, "tracking server started again")
        replaced.append((killed, wait_for_replacement(cluster, driver, place, name, before)))
        killed, before = kill_a_full_worker(cluster, driver, place)
        replaced.append((killed, wait_for_replacement(cluster, driver, place, name, before)))
        spooled_and_16 = lambda: "answers again" in log.read_text() and finished_runs(place, name) >= 16  # noqa: E731
        wait_for(spooled_and_16, driver, log, timeout=400, what="the spool logged and 16 trials finished", every=2)
        failed = failed_runs(place, name)  # before the resume, which would rerun them
        assert not failed, f"ended ERROR despite --max-failures 3 (one node death counted twice?): {failed}"
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    note(place, "killed the driver")
    resumed = start_driver(
        # a simulated sweep resumes only with --simulate: its other flags come from the sweep
        [str(PROJECT_ROOT / "sweeps/electra_layers.py"), "--resume", place["uri"], "--simulate"]
        + ["--address", cluster["address"]],
        cluster,
        place,
    )
    finish(resumed, place)
    note(place, "the resumed driver ended")
    check_sweep(place, name, trials=104, epochs=2)
    check_placements(place, name, [replacement for _, replacement in replaced])
    reaped = monitor_log(cluster)
    for killed, _ in replaced:
        assert f"Terminating the node with id {killed}" in reaped, f"the autoscaler never reaped {killed}"
