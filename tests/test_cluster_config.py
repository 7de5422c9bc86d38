"""cluster.yaml passes Ray's own config validation offline once its placeholders are filled in; what a launch
would refuse is rejected, one line each."""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sweeps.cluster_config import check_cluster_config, launch_problems, main, validate_cluster_config

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_YAML = ROOT / "cluster.yaml"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
FILLED = {
    "ami-CHANGE_ME": "ami-0123456789abcdef0",
    "fs-CHANGE_ME": "fs-0123abcd",
    "EMBSWEEP_REPO=CHANGE_ME": "EMBSWEEP_REPO=https://git.example.org/embsweep.git",
    "EMBSWEEP_REF=CHANGE_ME": f"EMBSWEEP_REF={COMMIT}",
}


def filled_text() -> str:
    """cluster.yaml with its placeholders filled in, as a user would before `ray up`."""
    text = CLUSTER_YAML.read_text()
    for placeholder, value in FILLED.items():
        assert placeholder in text, placeholder
        text = text.replace(placeholder, value)
    return text


@pytest.fixture(scope="module")
def raw_config() -> dict:
    return yaml.safe_load(filled_text())


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


def test_project_cluster_yaml_is_valid_offline(no_network, tmp_path, raw_config):
    config, notes = check_cluster_config(write_copy(tmp_path, raw_config))
    assert config["provider"]["type"] == "aws"
    node_types = config["available_node_types"]
    head = node_types[config["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0
    gpu_types = [t for t in node_types.values() if t["resources"].get("GPU", 0) > 0]
    assert gpu_types, "no GPU worker node type"
    assert all(0 <= t["min_workers"] <= t["max_workers"] <= config["max_workers"] for t in gpu_types)
    setup = " ".join(config["setup_commands"])
    assert "/mnt/shared" in setup and "-e . 'ray[default,tune]==" in setup and "git clone" in setup
    # the vCPU quotas at full size: the head (m5.2xlarge, 8), two on-demand and two spot g5.12xlarge (48 each)
    assert sorted(notes) == [
        "quota: 8 vCPUs of 'Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances' (L-1216C47A) "
        "in us-west-2 at full size",
        "quota: 96 vCPUs of 'All G and VT Spot Instance Requests' (L-3819A6DF) in us-west-2 at full size",
        "quota: 96 vCPUs of 'Running On-Demand G and VT instances' (L-DB2E81BA) in us-west-2 at full size",
    ]


def test_the_shipped_file_is_refused_until_its_placeholders_are_filled(no_network):
    with pytest.raises(ValueError) as refused:
        check_cluster_config(CLUSTER_YAML)
    lines = str(refused.value).splitlines()
    assert len(lines) == 6, lines
    assert all(line.startswith(f"{CLUSTER_YAML}: ") and "placeholder" in line for line in lines)
    for where in ("head_cpu.node_config.ImageId", "gpu_worker.node_config.ImageId", "gpu_worker_spot.node_config"):
        assert any(where in line for line in lines), where
    for name in ("EFS_ID=fs-CHANGE_ME", "EMBSWEEP_REPO=CHANGE_ME", "EMBSWEEP_REF=CHANGE_ME"):
        assert sum(name in line for line in lines) == 1, name


def refusal(tmp_path, config) -> str:
    """The checker's one line for a config with one defect."""
    with pytest.raises(ValueError) as refused:
        check_cluster_config(write_copy(tmp_path, config))
    lines = str(refused.value).splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def gpu_worker(config) -> dict:
    return config["available_node_types"]["gpu_worker"]


def test_a_node_type_without_image_is_refused(tmp_path, raw_config):
    broken = copy.deepcopy(raw_config)
    del gpu_worker(broken)["node_config"]["ImageId"]
    assert "gpu_worker.node_config: no ImageId" in refusal(tmp_path, broken)


def test_node_config_keys_boto3_refuses_are_refused(tmp_path, raw_config):
    broken = copy.deepcopy(raw_config)
    node_config = gpu_worker(broken)["node_config"]
    node_config["InstanceTyp"] = node_config.pop("InstanceType")
    line = refusal(tmp_path, broken)
    assert "gpu_worker.node_config: unknown key 'InstanceTyp' (did you mean InstanceType?)" in line
    broken = copy.deepcopy(raw_config)
    gpu_worker(broken)["node_config"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSiz"] = 100
    line = refusal(tmp_path, broken)
    assert "BlockDeviceMappings[0].Ebs: unknown key 'VolumeSiz' (did you mean VolumeSize?)" in line
    broken = copy.deepcopy(raw_config)
    gpu_worker(broken)["node_config"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] = "big"
    assert "VolumeSize" in refusal(tmp_path, broken)


def test_an_unknown_instance_type_is_refused(tmp_path, raw_config):
    broken = copy.deepcopy(raw_config)
    gpu_worker(broken)["node_config"]["InstanceType"] = "g5.12xlarg"
    assert "'g5.12xlarg' is not an EC2 instance type (did you mean g5.12xlarge?)" in refusal(tmp_path, broken)


def test_availability_zones_misuse_is_refused(tmp_path, raw_config):
    broken = copy.deepcopy(raw_config)
    broken["provider"]["availability_zones"] = broken["provider"].pop("availability_zone")
    line = refusal(tmp_path, broken)
    assert "provider.availability_zones: not a key Ray reads (ignored); did you mean availability_zone?" in line
    broken = copy.deepcopy(raw_config)
    broken["provider"]["availability_zone"] = "us-west-2a,us-east-1b"
    assert "'us-east-1b' is not a zone of region 'us-west-2'" in refusal(tmp_path, broken)


def test_gpu_resources_beyond_the_instance_types_gpus_are_refused(tmp_path, raw_config):
    broken = copy.deepcopy(raw_config)
    gpu_worker(broken)["node_config"]["InstanceType"] = "g5.xlarge"
    assert "gpu_worker.resources.GPU: 4, but g5.xlarge has 1 GPU(s)" in refusal(tmp_path, broken)


def test_an_unpinned_project_ref_or_another_ray_version_is_refused(tmp_path, raw_config):
    broken = copy.deepcopy(raw_config)
    broken["setup_commands"][3] = broken["setup_commands"][3].replace(COMMIT, "main")
    assert "EMBSWEEP_REF=main is not a pinned commit" in refusal(tmp_path, broken)
    broken = copy.deepcopy(raw_config)
    step = broken["setup_commands"][3]
    broken["setup_commands"][3] = step.replace("ray[default,tune]==2.60.0", "ray[default,tune]==2.59.0")
    assert "nodes install Ray 2.59.0, this machine runs Ray 2.60.0" in refusal(tmp_path, broken)


def test_a_worker_instance_profile_prints_the_pass_role_the_head_needs(tmp_path, raw_config):
    config = copy.deepcopy(raw_config)
    arn = "arn:aws:iam::123456789012:instance-profile/ray-autoscaler-v1"
    gpu_worker(config)["node_config"]["IamInstanceProfile"] = {"Arn": arn}
    _, notes = check_cluster_config(write_copy(tmp_path, config))
    assert f"iam: the head's role ray-autoscaler-v1 needs iam:PassRole on the role of {arn}" in notes[-1]
    policy = json.loads((ROOT / "cluster" / "iam-passrole.json").read_text())
    (statement,) = policy["Statement"]
    assert statement["Action"] == "iam:PassRole" and statement["Effect"] == "Allow"
    assert statement["Condition"]["StringEquals"]["iam:PassedToService"] == "ec2.amazonaws.com"


def test_aws_rules_do_not_apply_to_other_providers(tmp_path):
    config = {
        "cluster_name": "local-test",
        "provider": {"type": "local", "head_ip": "127.0.0.1", "worker_ips": ["127.0.0.2"]},
        "auth": {"ssh_user": "ubuntu"},
    }
    assert check_cluster_config(write_copy(tmp_path, config))[1] == []
    # node types without ImageId, with GPUs the checker cannot look up: nothing of AWS's rules applies
    config["available_node_types"] = {
        "node": {"resources": {"CPU": 2, "GPU": 4}, "node_config": {"InstanceTyp": "x"}, "max_workers": 1}
    }
    config["head_node_type"] = "node"
    assert launch_problems(config) == []
    config["setup_commands"] = ["EMBSWEEP_REF=CHANGE_ME; echo"]
    assert launch_problems(config) == ["setup_commands[0]: placeholder EMBSWEEP_REF=CHANGE_ME left to fill in"]


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
    assert main([str(write_copy(tmp_path, raw_config))]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "valid"
    assert main([str(CLUSTER_YAML)]) == 1
    assert "placeholder" in capsys.readouterr().err
    broken = copy.deepcopy(raw_config)
    broken["max_workers"] = "many"
    assert main([str(write_copy(tmp_path, broken))]) == 1
    assert "max_workers" in capsys.readouterr().err


def node_check(command: str) -> subprocess.CompletedProcess:
    """A check of cluster.yaml's node setup, run here with this venv's python for the node's."""
    command = command.replace("~/embsweep-venv/bin/python", shlex.quote(sys.executable))
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)


@pytest.mark.sweep
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_node_checks_of_torch_fail_setup_with_one_line_on_a_cpu_only_build():
    version = importlib.metadata.version("torch")
    if "+cpu" not in version:
        pytest.skip(f"this machine's torch {version} may be a CUDA build")
    raw = yaml.safe_load(CLUSTER_YAML.read_text())
    (gpu_check,) = raw["worker_setup_commands"]
    done = node_check(gpu_check)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        f"cluster.yaml: torch {version} cannot use this node's GPU (NVIDIA driver missing or older than "
        "CUDA 13 needs): choose another ImageId"
    ]
    cuda_build = raw["setup_commands"][3].rsplit("&& ", 1)[1]
    assert cuda_build.startswith("~/embsweep-venv/bin/python -c")
    done = node_check(cuda_build)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        f"cluster.yaml: torch {version} is a CPU-only build: install the CUDA build (setup step 4)"
    ]


def test_the_python_check_of_node_setup_names_the_version_needed():
    raw = yaml.safe_load(CLUSTER_YAML.read_text())
    check = raw["setup_commands"][2].split(" &&", 1)[0]
    assert node_check(check).returncode == 0  # this machine's Python is new enough
    older = check.replace("(3, 11)", "(9, 0)")  # the same check, as a Python older than needed sees it
    done = node_check(older)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        f"cluster.yaml: embsweep needs Python >= 3.11, this image has {sys.version.split()[0]}: choose another ImageId"
    ]


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


def test_shared_storage_in_another_region_than_the_nodes_is_refused(tmp_path, raw_config):
    broken = copy.deepcopy(raw_config)
    broken["provider"]["region"] = "eu-central-1"
    broken["provider"]["availability_zone"] = "eu-central-1a,eu-central-1b"
    assert refusal(tmp_path, broken).endswith(
        "setup_commands: EFS_REGION=us-west-2 but provider.region is eu-central-1: nodes mount EFS only in their own "
        "region: use a file system in eu-central-1 (EFS_ID, EFS_REGION=eu-central-1), or set provider.region to "
        "us-west-2"
    )
    broken = copy.deepcopy(raw_config)
    step = broken["setup_commands"][1].replace("STORAGE=nfs;", "STORAGE=s3;")
    broken["setup_commands"][1] = step.replace("DATA_URI=;", "DATA_URI=s3://lab-data/embsweep/data?region=eu-west-1;")
    assert "setup_commands: DATA_URI's bucket is in eu-west-1 (its region=) but provider.region is us-west-2" in (
        refusal(tmp_path, broken)
    )
    config = copy.deepcopy(raw_config)  # the bucket's region named, and the nodes' own: nothing to say
    config["setup_commands"][1] = step.replace("DATA_URI=;", "DATA_URI=s3://lab-data/embsweep/data?region=us-west-2;")
    check_cluster_config(write_copy(tmp_path, config))


MOUNT_ERRORS = {
    "region": ("eu-central-1a", "mount.nfs4: Failed to resolve server fs-0123abcd.efs.us-west-2.amazonaws.com: "
               "Name or service not known"),
    "mount target": ("us-west-2d", "mount.nfs4: Failed to resolve server fs-0123abcd.efs.us-west-2.amazonaws.com: "
                     "Name or service not known"),
    "security group": ("us-west-2a", "mount.nfs4: Connection timed out"),
    "policy": ("us-west-2a", "mount.nfs4: access denied by server while mounting 127.0.0.1:/"),
}  # fmt: skip


@pytest.mark.parametrize("cause", list(MOUNT_ERRORS))
def test_a_failed_mount_says_whether_it_is_the_region_the_mount_target_or_the_security_group(
    tmp_path, cause, raw_config
):
    """Setup step 2 as a node runs it, with stand-ins for sudo, mount (failing as mount.nfs4 does), mountpoint and
    cloud-init (the node's zone, from the instance's metadata); /etc/fstab and /mnt/shared in a folder here."""
    zone, error = MOUNT_ERRORS[cause]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_ins = {
        "sudo": '#!/bin/bash\nexec "$@"\n',
        "mount": f"#!/bin/bash\necho {shlex.quote(error)} >&2\nexit 32\n",
        "mountpoint": "#!/bin/bash\nexit 1\n",
        "cloud-init": f'#!/bin/bash\n[ "$*" = "query availability_zone" ] && echo {zone}\n',
    }
    for name, text in stand_ins.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "fstab").write_text("")
    step = raw_config["setup_commands"][1]
    step = step.replace("/etc/fstab", str(tmp_path / "fstab")).replace("/mnt/shared", str(tmp_path / "shared"))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    done = subprocess.run(["bash", "-c", step], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"cluster.yaml: cannot mount fs-0123abcd at {tmp_path / 'shared'}: "), line
    expected = {
        "region": "EFS_REGION=us-west-2 is not this node's region eu-central-1: use a file system in provider.region",
        "mount target": "its name does not resolve in zone us-west-2d: give the file system a mount target there",
        "security group": "no answer from its mount target in zone us-west-2a: its security group must accept TCP 2049",
        "policy": "the file system's policy refuses this node",
    }[cause]
    assert expected in line, line


def check_command(path) -> subprocess.CompletedProcess:
    """`python -m sweeps.cluster_config <file>`, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "sweeps.cluster_config", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


def test_a_key_written_twice_in_one_mapping_is_refused_naming_key_and_lines(tmp_path):
    text = filled_text()
    head = "  head_cpu:\n    min_workers: 0\n    max_workers: 0"
    assert head in text
    path = tmp_path / "cluster.yaml"
    path.write_text(text.replace(head, head + "\n    max_workers: 0", 1))
    line = text[: text.index(head)].count("\n") + 4  # the second max_workers
    done = check_command(path)
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr == (
        f"{path}: line {line}: key 'max_workers' written twice in one mapping (first on line {line - 1}); YAML keeps "
        "only the last: delete one of them\n"
    )
    path.write_text(text)
    assert check_command(path).stdout.splitlines()[0] == "valid"


def test_a_yaml_merge_may_still_override_what_it_merges():
    from sweeps.cluster_config import load_unique_keys

    text = "base: &b {CPU: 8, GPU: 0}\nnode:\n  <<: *b\n  GPU: 4\n"
    assert load_unique_keys(text)["node"] == {"CPU": 8, "GPU": 4}


@pytest.mark.parametrize("flag", ["--dashboard-host=0.0.0.0", "--dashboard-host 10.0.0.5", "--dashboard-host='::'"])
def test_a_head_whose_dashboard_listens_beyond_loopback_is_refused(tmp_path, raw_config, flag):
    config = copy.deepcopy(raw_config)
    commands = config["head_start_ray_commands"]
    (i,) = [i for i, c in enumerate(commands) if "--dashboard-host=127.0.0.1" in c]
    commands[i] = commands[i].replace("--dashboard-host=127.0.0.1", flag)
    done = check_command(write_copy(tmp_path, config))
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done
    host = flag.split("=")[-1].split()[-1].strip("'")
    assert f"head_start_ray_commands[{i}]: --dashboard-host={host} opens Ray's dashboard" in done.stderr
    assert "use --dashboard-host=127.0.0.1" in done.stderr
