"""cluster/kuberay.yaml and cluster/kuberay-job.yaml: their shape (always), and, where KubeRay's published CRDs are
given, the CRD schemas (ray.io/v1): types and required fields (jsonschema), and no field the schema does not
declare, which the API server would drop without a word (pruning). KubeRay's CRDs are not kept in this repository:
point `KUBERAY_CRDS` at a folder holding `ray.io_rayclusters.yaml` and `ray.io_rayjobs.yaml` from KubeRay's
`ray-operator/config/crd/bases` (release v1.7.0 or later). Not run: a Kubernetes API server, the operator, pods.

Then what the pods run, here: the head's MLflow server as each manifest starts it (its home on the shared volume,
refused in one line without it, its history kept through the pod's deletion), the GPU workers' check of torch,
and cluster/Dockerfile (built where a Docker engine runs, else its shape)."""

from __future__ import annotations

import contextlib
import copy
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CRD_FILES = {"raycluster": "ray.io_rayclusters.yaml", "rayjob": "ray.io_rayjobs.yaml"}


def schema(kind: str) -> dict:
    folder = os.environ.get("KUBERAY_CRDS")
    if not folder:
        pytest.skip(
            "KubeRay's CRDs not given: set KUBERAY_CRDS to a folder with ray.io_rayclusters.yaml, ray.io_rayjobs.yaml"
        )
    crd = yaml.safe_load((Path(folder) / CRD_FILES[kind]).read_text())
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return v1["schema"]["openAPIV3Schema"]


def undeclared(instance, node: dict, where: str = "") -> list[str]:
    """Fields of `instance` that the structural schema `node` does not declare (Kubernetes prunes them)."""
    found = []
    if isinstance(instance, dict) and not node.get("x-kubernetes-preserve-unknown-fields"):
        properties = node.get("properties")
        extra = node.get("additionalProperties")
        for key, value in instance.items():
            if properties is not None and key in properties:
                found += undeclared(value, properties[key], f"{where}.{key}")
            elif isinstance(extra, dict):
                found += undeclared(value, extra, f"{where}.{key}")
            elif properties is not None:
                found.append(f"{where}.{key}")
    elif isinstance(instance, list) and isinstance(node.get("items"), dict):
        for i, item in enumerate(instance):
            found += undeclared(item, node["items"], f"{where}[{i}]")
    return found


def problems(document: dict, kind: str) -> list[str]:
    found = [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft7Validator(schema(kind)).iter_errors(document)
    ]
    return found + [f"{path}: not in the schema" for path in undeclared(document, schema(kind))]


def documents(name: str) -> dict:
    return {d["kind"]: d for d in yaml.safe_load_all((ROOT / "cluster" / name).read_text()) if d}


def test_the_raycluster_has_a_gpu_group_and_a_shared_volume():
    found = documents("kuberay.yaml")
    assert set(found) == {"PersistentVolumeClaim", "RayCluster"}
    cluster = found["RayCluster"]
    assert cluster["apiVersion"] == "ray.io/v1"
    (gpu,) = cluster["spec"]["workerGroupSpecs"]
    (container,) = gpu["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    claim = found["PersistentVolumeClaim"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for group in [cluster["spec"]["headGroupSpec"], gpu]:
        volumes = group["template"]["spec"]["volumes"]
        assert {"name": "shared", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}} in volumes


def test_the_raycluster_has_no_field_kuberays_crd_refuses_or_drops():
    assert problems(documents("kuberay.yaml")["RayCluster"], "raycluster") == []


def test_the_rayjob_has_no_field_kuberays_crd_refuses_or_drops():
    assert problems(documents("kuberay-job.yaml")["RayJob"], "rayjob") == []


def test_the_rayjob_ends_its_cluster():
    job = documents("kuberay-job.yaml")["RayJob"]
    assert job["apiVersion"] == "ray.io/v1"
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert job["spec"]["entrypoint"].startswith("python ") and "--address auto" in job["spec"]["entrypoint"]


def test_the_check_finds_a_misspelt_field_and_a_wrong_type():
    cluster = documents("kuberay.yaml")["RayCluster"]
    broken = copy.deepcopy(cluster)
    broken["spec"]["workerGroupSpecs"][0]["maxReplica"] = 4
    assert problems(broken, "raycluster") == [".spec.workerGroupSpecs[0].maxReplica: not in the schema"]
    broken = copy.deepcopy(cluster)
    broken["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["volumeMount"] = []
    assert problems(broken, "raycluster") == [
        ".spec.workerGroupSpecs[0].template.spec.containers[0].volumeMount: not in the schema"
    ]
    broken = copy.deepcopy(cluster)
    broken["spec"]["workerGroupSpecs"][0]["maxReplicas"] = "four"
    assert any("maxReplicas" in p and "integer" in p for p in problems(broken, "raycluster"))


@pytest.mark.parametrize("name", ["kuberay.yaml", "kuberay-job.yaml"])
def test_the_images_are_left_to_fill_in_and_run_the_pinned_ray(name):
    text = (ROOT / "cluster" / name).read_text()
    assert "image: CHANGE_ME" in text and 'rayVersion: "2.60.0"' in text


# --- the MLflow history's home, the GPU check and the image ---


def head_pod(kind: str) -> dict:
    if kind == "RayCluster":
        return documents("kuberay.yaml")["RayCluster"]["spec"]["headGroupSpec"]["template"]["spec"]
    return documents("kuberay-job.yaml")["RayJob"]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]


def worker_pod(kind: str) -> dict:
    spec = documents("kuberay.yaml")["RayCluster"]["spec"] if kind == "RayCluster" else (
        documents("kuberay-job.yaml")["RayJob"]["spec"]["rayClusterSpec"]
    )  # fmt: skip
    (group,) = spec["workerGroupSpecs"]
    return group["template"]["spec"]


def mlflow_container(kind: str) -> dict:
    (container,) = [c for c in head_pod(kind)["containers"] if c["name"] == "mlflow"]
    return container


def server_args(container: dict):
    from sweeps import mlflow_server

    command = container["command"]
    assert command[:3] == ["python", "-m", "sweeps.mlflow_server"], command
    return mlflow_server.build_parser().parse_args(command[3:])


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob"])
def test_the_mlflow_store_has_its_home_on_the_shared_volume_and_no_sqlite_on_it(kind):
    pod = head_pod(kind)
    container = mlflow_container(kind)
    args = server_args(container)
    claims = {v["name"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts.get(args.storage_path) in claims, (args.storage_path, mounts)  # the home: the shared volume
    assert args.backend_store_uri is None and args.local_store  # the live SQLite file: the pod's own disk ...
    assert not any(args.local_store.startswith(path.rstrip("/") + "/") for path in mounts), mounts  # ... not NFS
    assert not [v for v in pod["volumes"] if "emptyDir" in v]  # nothing of the store only on a pod's volume
    assert pod["terminationGracePeriodSeconds"] >= 60  # the last copy after SIGTERM
    probe = container["readinessProbe"]["httpGet"]
    assert probe == {"path": "/health", "port": args.port}  # the head is ready, and the job starts, once it answers


def localised(command: list[str], shared: Path, pod_disk: Path, port: int) -> list[str]:
    text = [
        a.replace("/mnt/shared", str(shared)).replace("/home/ray", str(pod_disk)).replace("5000", str(port))
        for a in command
    ]
    return [sys.executable, *text[1:]]


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob"])
def test_a_missing_volume_stops_the_server_in_one_line_and_the_head_never_gets_ready(tmp_path, kind):
    command = localised(mlflow_container(kind)["command"], tmp_path / "not-mounted", tmp_path / "pod", 5000)
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"error: --storage-path {tmp_path / 'not-mounted'} does not exist, and it is the MLflow history's home: mount "
        "the shared storage there (or create the folder), or give the --storage-path the sweeps use"
    ]
    assert not (tmp_path / "not-mounted").exists() and not (tmp_path / "pod").exists()


@pytest.mark.sweep
@pytest.mark.parametrize("kind", ["RayCluster", "RayJob"])
def test_the_history_outlives_the_pods_deletion(tmp_path, kind):
    """The head pod's server as the manifest starts it; `kubectl delete` (or the RayJob's TTL) sends SIGTERM and
    takes the pod's disk; the next head pod finds every run on the volume."""
    from mlflow import MlflowClient
    from server_helpers import free_port

    shared = tmp_path / "shared"
    shared.mkdir()
    ids = []
    for pod in ("pod1", "pod2"):
        port = free_port()
        command = localised(mlflow_container(kind)["command"], shared, tmp_path / pod, port)
        log = tmp_path / f"{pod}.log"
        server = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                  start_new_session=True, stdout=open(log, "w"), stderr=subprocess.STDOUT)  # fmt: skip
        try:
            client = MlflowClient(f"http://127.0.0.1:{port}")
            deadline = time.time() + 120
            while True:
                try:
                    client.search_experiments()
                    break
                except Exception:
                    assert time.time() < deadline and server.poll() is None, log.read_text()[-3000:]
                    time.sleep(1)
            experiment = client.get_experiment_by_name("electra-layers")
            experiment_id = experiment.experiment_id if experiment else client.create_experiment("electra-layers")
            assert sorted(r.info.run_id for r in client.search_runs([experiment_id])) == sorted(ids)
            run = client.create_run(experiment_id)
            client.set_terminated(run.info.run_id)
            ids.append(run.info.run_id)
            server.send_signal(signal.SIGTERM)  # the pod's deletion, at once after the last write
            assert server.wait(timeout=110) == 0, log.read_text()[-3000:]
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
        shutil.rmtree(tmp_path / pod)  # the pod's disk goes with it
        assert "SIGTERM received" in log.read_text()
    with contextlib.closing(sqlite3.connect(shared / "mlflow.db")) as db:
        assert sorted(r for (r,) in db.execute("select run_uuid from runs")) == sorted(ids)


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob"])
def test_gpu_pods_check_their_gpu_before_ray_starts_with_the_gpu_they_run_with(kind):
    pod = worker_pod(kind)
    (check,) = pod["initContainers"]
    (worker,) = pod["containers"]
    assert check["image"] == worker["image"]
    assert check["resources"]["limits"]["nvidia.com/gpu"] == worker["resources"]["limits"]["nvidia.com/gpu"]


@pytest.mark.sweep
@pytest.mark.parametrize("kind", ["RayCluster", "RayJob"])
def test_the_gpu_check_fails_the_pod_in_one_line_where_torch_sees_no_gpu(kind):
    import importlib.metadata

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine's torch sees a GPU: the check passes here")
    (check,) = worker_pod(kind)["initContainers"]
    done = subprocess.run([sys.executable, *check["command"][1:]], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        f"kuberay: torch {importlib.metadata.version('torch')} cannot use the GPU of this pod (no nvidia.com/gpu "
        "limit, or the NVIDIA driver of its node is missing or older than CUDA 13 needs): schedule it on a GPU node "
        "with a current driver"
    ]


DOCKERFILE = ROOT / "cluster" / "Dockerfile"


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of cluster/Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_dockerfile_builds_the_image_the_manifests_run():
    steps = dockerfile()
    ray = next(line.split("==")[1] for line in (ROOT / "cluster" / "constraints.txt").read_text().splitlines()
               if line.startswith("ray=="))  # fmt: skip
    (base,) = [args for instruction, args in steps if instruction == "FROM"]
    found = re.fullmatch(r"rayproject/ray:(\S+)-py3(\d+)-gpu", base)
    assert found and found.group(1) == ray, base  # the Ray the constraints pin
    assert int(found.group(2)) >= 11  # a Python the project supports
    for name in ("kuberay.yaml", "kuberay-job.yaml"):
        assert f'rayVersion: "{ray}"' in (ROOT / "cluster" / name).read_text()
    (workdir,) = [args for instruction, args in steps if instruction == "WORKDIR"]
    assert workdir == mlflow_container("RayCluster")["workingDir"] == mlflow_container("RayJob")["workingDir"]
    assert documents("kuberay-job.yaml")["RayJob"]["spec"]["entrypoint"].startswith(f"python {workdir}/sweeps/")
    assert ("COPY", "--chown=ray:users . .") in steps  # the checkout the image is built from, as the context
    (install,) = [args for instruction, args in steps if instruction == "RUN"]
    assert f"pip install --no-cache-dir -c cluster/constraints.txt -e . 'ray[default,tune]=={ray}'" in install
    assert "torch.version.cuda" in install  # PyPI's CUDA build, checked when the image is built
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "runs", "mlruns", "mlflow.db", "models"} <= set(ignored)


def docker_engine() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0


@pytest.mark.slow
def test_the_dockerfile_builds_where_a_docker_engine_runs():
    if not docker_engine():
        pytest.skip("no Docker engine answers on this machine (`docker info`): cluster/Dockerfile's shape is tested")
    done = subprocess.run(
        ["docker", "build", "-f", str(DOCKERFILE), "-t", "embsweep-test:latest", "."],
        cwd=ROOT, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
