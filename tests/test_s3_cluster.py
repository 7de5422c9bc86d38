"""Sweeps on a two-node Ray on this machine with their storage on S3 only (a real S3 server over HTTP,
tests/s3_server.py, or EMBSWEEP_TEST_S3_ENDPOINT): an improvements sweep computes its stage once in
the bucket and a second sweep reuses it; the worker node stopped mid-trial; the driver SIGKILLed and
the sweep resumed from the storage URI; the S3 server down for 20 s mid-sweep. No folder of the
sweep exists outside the bucket but Ray's session folder and the node caches."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow_helpers import metric_steps, one_finished_and_one_started, runs_by_role
from ray_nodes import TwoNodeRay
from s3_helpers import EXTERNAL_ENV, TEST_CREDENTIALS, S3Store
from sweep_helpers import kill_driver_when, run_script, sweep_args, wait_for

from trainables.core import object_storage
from trainables.core.paths import PROJECT_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.objectstore]  # their own CI step (.ci/run)

SMALL = ["--max-eval-samples", "60", "--batch-size", "16", "--cpus-per-trial", "1", "--gpus-per-trial", "0"]


@pytest.fixture(scope="module")
def cluster(s3_server, tmp_path_factory):
    """A bucket, a two-node Ray whose nodes (and this test's drivers) get the bucket's credentials the
    way a cloud machine does (environment), and a node cache of their own."""
    root = tmp_path_factory.mktemp("s3-cluster")
    endpoint = os.environ.get(EXTERNAL_ENV) or s3_server.endpoint
    saved = dict(os.environ)
    secret = None
    if not os.environ.get(EXTERNAL_ENV):  # moto takes any secret: one no file can hold by chance
        secret = f"embsweep-secret-{uuid.uuid4().hex}"
        os.environ.update({**TEST_CREDENTIALS, "AWS_SECRET_ACCESS_KEY": secret})
    os.environ["EMBSWEEP_CACHE_DIR"] = str(root / "node-cache")
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths must stay short
    store = S3Store(endpoint, s3_server)
    nodes = TwoNodeRay(root, env={**os.environ, "RAY_TMPDIR": str(ray_tmp)})
    try:
        nodes.start()
        yield {"store": store, "nodes": nodes, "root": root, "env": dict(nodes.env), "secret": secret, "ray": ray_tmp}
    finally:
        nodes.stop()
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture
def place(cluster, tmp_path, data_dir):
    """This test's storage URI, MLflow store (outside the working folder) and an empty working folder."""
    work = tmp_path / "work"
    work.mkdir()
    prefix = f"t-{tmp_path.name}"
    return {
        "uri": cluster["store"].uri(prefix),
        "prefix": prefix,
        "mlflow": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "work": work,
        "flags": ["--data-dir", str(data_dir), "--experiment", "test", "--address", cluster["nodes"].address, *SMALL],
    }


def _storage_flags(place) -> list[str]:
    return ["--storage-path", place["uri"], "--mlflow-uri", place["mlflow"], *place["flags"]]


def _nothing_local(place) -> None:
    assert not list(place["work"].iterdir()), f"the sweep wrote locally: {list(place['work'].iterdir())}"


def _once_each(uri: str, epochs: int, experiment: str = "test") -> list:
    """Every trial's run FINISHED, one run per configuration, each epoch logged once."""
    _, children = runs_by_role(uri, experiment)
    assert len({c.data.tags["embsweep.config_hash"] for c in children}) == len(children)
    for child in children:
        assert child.info.status == "FINISHED", child.info.run_name
        assert sorted(metric_steps(uri, child.info.run_id, "dev_spearman")) == list(range(1, epochs + 1))
    return children


def test_an_improvements_stage_is_computed_once_in_the_bucket_and_reused(cluster, place, tiny_models):
    from trainables.stages.upstream import read_executions

    store = cluster["store"]
    sweep = sweep_args(
        tiny_models["bert"],
        "--layers 1 --epochs 1 --improvement ws --ws-epochs 2 --ws-max-train-samples 64 --max-train-samples 48",
        *_storage_flags(place),
    )
    first = run_script(
        [str(PROJECT_ROOT / "sweeps/improvements.py"), *sweep, "--seeds", "0,1", "--name", "first"],
        place["work"],
        cluster["env"],
    )
    assert "1 to compute" in first.stdout, first.stdout
    stages = object_storage.join(place["uri"], "stages")
    assert len(read_executions(stages)) == 1
    manifests = [k for k in store.keys(f"{place['prefix']}/stages/") if k.endswith("/stage.json")]
    assert len(manifests) == 1, store.keys(f"{place['prefix']}/stages/")

    second = run_script(
        [str(PROJECT_ROOT / "sweeps/improvements.py"), *sweep, "--seeds", "2", "--name", "second"],
        place["work"],
        cluster["env"],
    )
    assert "1 reused, 0 to compute" in second.stdout, second.stdout
    assert len(read_executions(stages)) == 1, "the second sweep computed the stage again"
    _, children = runs_by_role(place["mlflow"])
    assert len(children) == 3 and all(c.info.status == "FINISHED" for c in children)
    assert len({c.data.params["upstream_run_id"] for c in children}) == 1
    for name in ("first", "second"):
        assert f"{place['prefix']}/{name}/sweep.json" in store.keys(f"{place['prefix']}/{name}/")
    for child in children:  # every trial's best folder is in the bucket, listed for the readers
        checkpoint = child.data.tags["embsweep.checkpoint"]
        assert checkpoint.startswith("s3://") and "endpoint_override=" in checkpoint
        _, key = object_storage.bucket_key(object_storage.join(checkpoint, "best", "config.json"))
        assert key in store.keys(key)
    _nothing_local(place)
    _no_secret_written(cluster, place)


def _no_secret_written(cluster, place) -> None:
    """The secret key reached no object of the bucket, no file of the MLflow store, the node caches or
    Ray's session folders (logs, runtime environments): only the environment of each process."""
    secret = cluster["secret"]
    if secret is None:
        return
    store = cluster["store"]
    leaks = [key for key in store.keys() if secret.encode() in store.read(key)]
    for root in (place["work"].parent, cluster["root"], cluster["ray"]):
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink() and not path.name.endswith(".sock"):
                try:
                    data = path.read_bytes()
                    if secret.encode() in data:
                        at = data.index(secret.encode())
                        leaks.append(f"{path}: ...{data[max(0, at - 300) : at + 40]!r}")
                except OSError:
                    pass
    assert list(cluster["ray"].rglob("raylet.out")), "the cluster wrote its logs elsewhere"
    assert not leaks, f"the secret key is in {leaks[:10]}"


def test_a_killed_driver_resumes_from_the_storage_uri_with_every_trial_once(cluster, place, tiny_models):
    uri = place["mlflow"]
    MlflowClient(uri).search_experiments()  # the store exists before the driver starts: this test polls it
    settings = "--layers 1,2 --seeds 0,1 --epochs 3 --max-concurrent 1 --max-train-samples 320"
    sweep = sweep_args(tiny_models["bert"], settings, *_storage_flags(place))

    kill_driver_when(
        "sweeps/electra_layers.py",
        [*sweep, "--name", "killed"],
        place["work"].parent / "driver.log",
        lambda: one_finished_and_one_started(uri),
        what="the first trial to finish and the second to log an epoch",
        env=cluster["env"],
        cwd=place["work"],
    )
    started = time.monotonic()
    # the storage URI alone: the newest sweep there is the one resumed
    resumed = run_script(
        [
            str(PROJECT_ROOT / "sweeps/electra_layers.py"),
            "--resume",
            place["uri"],
            "--address",
            cluster["nodes"].address,
        ],
        place["work"],
        cluster["env"],
    )
    print(f"resume took {time.monotonic() - started:.1f} s")
    assert "killed" in resumed.stdout
    children = _once_each(uri, 3)
    assert len(children) == 4

    run_script(
        [str(PROJECT_ROOT / "sweeps/electra_layers.py"), *sweep, "--name", "clean", "--experiment", "clean"],
        place["work"],
        cluster["env"],
    )
    clean = {(c.data.params["layer"], c.data.params["seed"]): c for c in runs_by_role(uri, "clean")[1]}
    for child in children:
        twin = clean[(child.data.params["layer"], child.data.params["seed"])]
        for metric in ("best_dev_spearman", "test_spearman_at_best_dev", "train_loss"):
            assert child.data.metrics[metric] == pytest.approx(twin.data.metrics[metric], abs=1e-4), metric
    _nothing_local(place)


def _held_driver(cluster, place, tiny_models, settings: str, name: str, hold: float) -> subprocess.Popen:
    sweep = sweep_args(tiny_models["bert"], settings, *_storage_flags(place), "--name", name, "--no-reuse-actors")
    log = open(place["work"].parent / f"{name}.log", "w")
    script = str(PROJECT_ROOT / "sweeps" / "electra_layers.py")
    return subprocess.Popen(
        [sys.executable, str(PROJECT_ROOT / "tests" / "held_sweep.py"), str(hold), script, *sweep],
        cwd=place["work"],
        env=cluster["env"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_the_s3_server_down_for_20_s_mid_sweep_loses_nothing(cluster, place, tiny_models):
    server = cluster["store"].server
    if server is None:
        pytest.skip("an external S3 endpoint cannot be stopped by the test")
    uri = place["mlflow"]
    MlflowClient(uri).search_experiments()
    driver = _held_driver(
        cluster, place, tiny_models, "--layers 1 --seeds 0,1 --epochs 4 --max-train-samples 96", "outage", 3
    )
    log = place["work"].parent / "outage.log"
    wait_for(
        lambda: any(metric_steps(uri, c.info.run_id, "dev_spearman") for c in runs_by_role(uri)[1]),
        driver,
        log,
        what="a trial's first epoch",
    )
    server.outage()
    down_at = time.monotonic()
    time.sleep(20)
    server.restore()
    print(f"S3 down for {time.monotonic() - down_at:.1f} s")
    code = driver.wait(timeout=600)
    if code != 0:  # the sweep may stop, with a message; --resume completes it
        text = log.read_text()
        assert "Traceback" not in text.split("Results:")[-1], text[-3000:]
        run_script(
            [
                str(PROJECT_ROOT / "sweeps/electra_layers.py"),
                "--resume",
                object_storage.join(place["uri"], "outage"),
                "--address",
                cluster["nodes"].address,
            ],
            place["work"],
            cluster["env"],
        )
    print(f"driver exit {code}; trials once each: {len(_once_each(uri, 4))}")
    _nothing_local(place)


def test_the_worker_node_stopped_mid_trial_the_trial_continues_from_its_s3_checkpoint(cluster, place, tiny_models):
    """Last in this module: it takes a node away (and starts it again for whoever comes next)."""
    uri = place["mlflow"]
    MlflowClient(uri).search_experiments()
    driver = _held_driver(
        cluster, place, tiny_models, "--layers 1 --seeds 0,1 --epochs 4 --max-train-samples 96", "node", 3
    )
    log = place["work"].parent / "node.log"

    def both_running_past_epoch_one():
        children = runs_by_role(uri)[1]
        return len(children) == 2 and all(
            c.info.status == "RUNNING" and metric_steps(uri, c.info.run_id, "dev_spearman") for c in children
        )

    wait_for(both_running_past_epoch_one, driver, log, what="both trials' first epoch, one on each node")
    nodes_before = {c.data.tags.get("node_id") for c in runs_by_role(uri)[1]}
    cluster["nodes"].stop_worker()
    try:
        assert driver.wait(timeout=600) == 0, log.read_text()[-3000:]
    finally:
        cluster["nodes"].start_worker()
    children = _once_each(uri, 4)
    assert len(children) == 2 and len(nodes_before) == 2, nodes_before
    # the trial of the stopped node went on from a checkpoint in the bucket, on the other node
    restored = []
    for child in children:
        trial = child.data.tags["embsweep.checkpoint"].split("?")[0].split("/")[-2]
        lines = [
            json.loads(line)
            for line in cluster["store"].read(f"{place['prefix']}/node/{trial}/result.json").splitlines()
        ]
        if any(line["training_iteration"] > line["iterations_since_restore"] for line in lines):
            restored.append({line["node_id"] for line in lines})
    assert len(restored) == 1 and len(restored[0]) == 2, restored
    _nothing_local(place)
