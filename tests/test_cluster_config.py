"""cluster.yaml passes Ray's own config validation offline; broken copies of it are rejected."""

from __future__ import annotations

import copy
import re
import socket
from pathlib import Path

import pytest
import yaml

from sweeps.cluster_config import main, validate_cluster_config

CLUSTER_YAML = Path(__file__).resolve().parents[1] / "cluster.yaml"


@pytest.fixture(scope="module")
def raw_config() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def write_copy(tmp_path, config: dict) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("cluster config validation tried to use the network")

    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_project_cluster_yaml_is_valid_offline(no_network):
    config = validate_cluster_config(CLUSTER_YAML)
    assert config["provider"]["type"] == "aws"
    node_types = config["available_node_types"]
    head = node_types[config["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0
    gpu_types = [t for t in node_types.values() if t["resources"].get("GPU", 0) > 0]
    assert gpu_types, "no GPU worker node type"
    assert all(0 <= t["min_workers"] <= t["max_workers"] <= config["max_workers"] for t in gpu_types)
    setup = " ".join(config["setup_commands"])
    assert "/mnt/shared" in setup and "pip install -q -e ." in setup and "git clone" in setup


def test_cluster_yaml_holds_no_credentials():
    text = CLUSTER_YAML.read_text()
    uncommented = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    for pattern in (
        r"AKIA[0-9A-Z]{16}",
        r"aws_(secret_)?access_key",
        r"BEGIN [A-Z ]*PRIVATE KEY",
        r"ssh_private_key",
        r"(password|token)\s*[:=]",
    ):
        assert not re.search(pattern, uncommented, re.IGNORECASE), pattern


def test_unknown_top_level_key_is_rejected(tmp_path, raw_config):
    broken = copy.deepcopy(raw_config)
    broken["max_wrokers"] = 4
    with pytest.raises(ValueError, match="max_wrokers"):
        validate_cluster_config(write_copy(tmp_path, broken))


def test_wrong_type_is_rejected(tmp_path, raw_config):
    broken = copy.deepcopy(raw_config)
    broken["max_workers"] = "many"
    with pytest.raises(ValueError, match=r"max_workers.*'many' is not of type 'integer'"):
        validate_cluster_config(write_copy(tmp_path, broken))


def test_fractional_node_resources_are_rejected(tmp_path, raw_config):
    broken = copy.deepcopy(raw_config)
    broken["available_node_types"]["gpu_worker"]["resources"]["GPU"] = 0.5
    with pytest.raises(ValueError, match="available_node_types.gpu_worker.resources.GPU"):
        validate_cluster_config(write_copy(tmp_path, broken))


def test_head_node_type_must_be_a_declared_node_type(tmp_path, raw_config):
    broken = copy.deepcopy(raw_config)
    broken["head_node_type"] = "no_such_type"
    with pytest.raises(ValueError, match="head_node_type"):
        validate_cluster_config(write_copy(tmp_path, broken))


def test_unreadable_or_non_mapping_files_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        validate_cluster_config(tmp_path / "missing.yaml")
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(ValueError, match="mapping"):
        validate_cluster_config(listing)


def test_command_line(tmp_path, raw_config, capsys):
    assert main([str(CLUSTER_YAML)]) == 0
    assert capsys.readouterr().out.strip() == "valid"
    broken = copy.deepcopy(raw_config)
    broken["max_workers"] = "many"
    assert main([str(write_copy(tmp_path, broken))]) == 1
    assert "max_workers" in capsys.readouterr().err


LOCAL_YAML = CLUSTER_YAML.with_name("cluster_local.yaml")


def test_local_cluster_yaml_is_valid_offline_with_cluster_yamls_node_types(no_network, raw_config):
    config = validate_cluster_config(LOCAL_YAML)
    assert config["provider"]["type"] == "fake_multinode"
    head = config["available_node_types"][config["head_node_type"]]
    assert head["resources"]["GPU"] == 0 and head["max_workers"] == 0
    (gpu,) = [t for t in config["available_node_types"].values() if t["resources"].get("GPU", 0) > 0]
    assert (gpu["resources"]["GPU"], gpu["min_workers"], gpu["max_workers"], config["max_workers"]) == (8, 0, 4, 4)
    assert head["resources"]["CPU"] == raw_config["available_node_types"]["head_cpu"]["resources"]["CPU"]


@pytest.mark.parametrize("key", ["file_mounts", "worker_start_ray_commands", "cluster_synced_files"])
def test_local_cluster_yaml_without_a_launcher_key_is_rejected(tmp_path, key):
    broken = yaml.safe_load(LOCAL_YAML.read_text())
    del broken[key]
    with pytest.raises(ValueError, match=f"autoscaler crashes without these keys: {key}"):
        validate_cluster_config(write_copy(tmp_path, broken))


def test_local_cluster_yaml_rules_of_the_fake_provider(tmp_path):
    broken = yaml.safe_load(LOCAL_YAML.read_text())
    broken["available_node_types"]["head"] = broken["available_node_types"].pop("ray.head.default")
    broken["head_node_type"] = "head"
    with pytest.raises(ValueError, match="ray.head.default"):
        validate_cluster_config(write_copy(tmp_path, broken))
    broken = yaml.safe_load(LOCAL_YAML.read_text())
    del broken["provider"]["disable_node_updaters"]
    with pytest.raises(ValueError, match="disable_node_updaters"):
        validate_cluster_config(write_copy(tmp_path, broken))
    broken = yaml.safe_load(LOCAL_YAML.read_text())
    broken["max_workers"] = "many"
    with pytest.raises(ValueError, match="'many' is not of type 'integer'"):
        validate_cluster_config(write_copy(tmp_path, broken))


def test_the_fake_provider_rules_do_not_apply_to_other_providers(tmp_path, raw_config):
    config = copy.deepcopy(raw_config)
    del config["worker_start_ray_commands"]  # aws has Ray's defaults for it
    validate_cluster_config(write_copy(tmp_path, config))
