"""cluster/kuberay.yaml and cluster/kuberay-job.yaml: their shape (always), and, where KubeRay's published CRDs are
given, the CRD schemas (ray.io/v1): types and required fields (jsonschema), and no field the schema does not
declare, which the API server would drop without a word (pruning). KubeRay's CRDs are not kept in this repository:
point `KUBERAY_CRDS` at a folder holding `ray.io_rayclusters.yaml` and `ray.io_rayjobs.yaml` from KubeRay's
`ray-operator/config/crd/bases` (release v1.7.0 or later). Not run: a Kubernetes API server, the operator, pods."""

from __future__ import annotations

import copy
import os
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
