"""`ray up cluster.yaml` against a simulated AWS: Ray's own AWS bootstrap (IAM role and instance profile, key
pair, subnets, security group) and node creation through Ray's AWS node provider, run against moto's EC2
and IAM for cluster.yaml with its placeholders filled in; the head node's setup and `ray start` commands
as Ray's updater sends them (over a recording stand-in for ssh), and again with `--no-restart`.

Slow (moto's IAM with AWS's managed policies loads in about 10 s)."""

from __future__ import annotations

import json
import re
import subprocess
import types

import pytest
import yaml

from sweeps.cluster_config import check_cluster_config

pytestmark = pytest.mark.slow

REGION = "us-west-2"


class RecordingRunner:
    """Stands in for the `subprocess` module Ray's command runners use: records every ssh/rsync command line
    and answers as a node that has run it."""

    DEVNULL = subprocess.DEVNULL
    CalledProcessError = subprocess.CalledProcessError

    def __init__(self):
        self.commands: list[str] = []

    def check_call(self, cmd, **kwargs):
        self.commands.append(" ".join(cmd) if isinstance(cmd, list) else cmd)
        return 0

    def check_output(self, cmd, **kwargs):
        self.check_call(cmd)
        return b""

    def remote(self) -> list[str]:
        """What ran on the node: the shell command lines of the ssh calls."""
        return [c for c in self.commands if c.startswith("ssh ")]


def resources_given(command: str) -> dict:
    """The resources Ray's updater exports to `ray start` (RAY_OVERRIDE_RESOURCES) in an ssh command line."""
    found = re.search(r"export RAY_OVERRIDE_RESOURCES='\"'\"'(\{.*?\})'\"'\"';", command)
    assert found, command
    return json.loads(found.group(1))


@pytest.fixture
def aws(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # Ray writes its key pair to ~/.ssh
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "MOTO_IAM_LOAD_MANAGED_POLICIES": "true",  # AmazonEC2FullAccess and AmazonS3FullAccess, which Ray attaches
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    from moto import mock_aws

    from sweeps.engine.ray_internals import aws_launcher

    aws_config, aws_utils = aws_launcher().config, aws_launcher().utils

    # the two 15 s waits for IAM propagation, which moto does not need
    monkeypatch.setattr(aws_config, "time", types.SimpleNamespace(sleep=lambda seconds: None))
    caches = (aws_utils.resource_cache, aws_utils.client_cache)  # boto3 objects Ray keeps, made inside the mock
    for cache in caches:
        cache.cache_clear()
    with mock_aws():
        yield
    for cache in caches:
        cache.cache_clear()


def filled_cluster_yaml(tmp_path, image_id: str):
    from test_cluster_config import FILLED, filled_text

    text = filled_text().replace(FILLED["ami-CHANGE_ME"], image_id)
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def test_ray_up_bootstraps_and_launches_every_node_type_against_moto(aws, tmp_path):
    import boto3
    from ray.autoscaler.tags import TAG_RAY_NODE_KIND, TAG_RAY_USER_NODE_TYPE

    from sweeps.engine.ray_internals import aws_launcher

    launcher = aws_launcher()
    bootstrap_aws, AWSNodeProvider = launcher.bootstrap_aws, launcher.AWSNodeProvider
    get_or_create_head_node, NodeUpdaterThread = launcher.get_or_create_head_node, launcher.NodeUpdaterThread

    ec2 = boto3.client("ec2", region_name=REGION)
    image = next(i for i in ec2.describe_images(Owners=["amazon"])["Images"] if "ubuntu" in i["Name"].lower())
    path = filled_cluster_yaml(tmp_path, image["ImageId"])
    prepared, _ = check_cluster_config(path)  # the checker's pass comes first, as in docs/cluster.md

    config = bootstrap_aws(prepared)

    iam = boto3.client("iam")
    profile = iam.get_instance_profile(InstanceProfileName="ray-autoscaler-v1")["InstanceProfile"]
    assert [role["RoleName"] for role in profile["Roles"]] == ["ray-autoscaler-v1"]
    attached = iam.list_attached_role_policies(RoleName="ray-autoscaler-v1")["AttachedPolicies"]
    assert {p["PolicyName"] for p in attached} == {"AmazonEC2FullAccess", "AmazonS3FullAccess"}
    assert config["head_node"]["IamInstanceProfile"] == {"Arn": profile["Arn"]}
    groups = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["ray-autoscaler-embsweep"]}])
    (group,) = groups["SecurityGroups"]
    ports = {(rule.get("FromPort"), rule.get("ToPort")) for rule in group["IpPermissions"]}
    assert (22, 22) in ports  # SSH from outside; the rest within the group
    subnets = {s["SubnetId"]: s["AvailabilityZone"] for s in ec2.describe_subnets()["Subnets"]}
    for name, node_type in config["available_node_types"].items():
        node_config = node_type["node_config"]
        assert node_config["SecurityGroupIds"] == [group["GroupId"]], name
        zones = {subnets[s] for s in node_config["SubnetIds"]}
        assert zones and zones <= {"us-west-2a", "us-west-2b", "us-west-2c"}, (name, zones)
        assert node_config["KeyName"].startswith("ray-autoscaler_"), name

    # the head node, created and set up as `ray up` does, over a recording ssh
    provider = AWSNodeProvider(config["provider"], config["cluster_name"])
    runner = RecordingRunner()
    get_or_create_head_node(config, str(path), False, False, True, None, provider, runner)
    (head,) = provider.non_terminated_nodes({TAG_RAY_NODE_KIND: "head"})
    head_instance = ec2.describe_instances(InstanceIds=[head])["Reservations"][0]["Instances"][0]
    assert head_instance["InstanceType"] == "m5.2xlarge" and head_instance["ImageId"] == image["ImageId"]
    assert head_instance["IamInstanceProfile"]["Arn"] == profile["Arn"]
    shutdown = ec2.describe_instance_attribute(InstanceId=head, Attribute="instanceInitiatedShutdownBehavior")
    assert shutdown["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"  # `ray exec --stop` ends it
    remote = runner.remote()
    setup = [c for c in remote if "EMBSWEEP_REF=" in c]
    assert setup and "ray[default,tune]==2.60.0" in setup[0] and "checkout --detach" in setup[0]
    (start,) = [c for c in remote if "ray start --head" in c]
    assert resources_given(start) == {"CPU": 8, "GPU": 0}
    assert "--dashboard-host=127.0.0.1" in start and "--dashboard-port=8265" in start

    # `ray up --no-restart` after an edit: the setup runs again, Ray is neither stopped nor started
    config["setup_commands"].append("echo edited")
    config["head_setup_commands"].append("echo edited")
    again = RecordingRunner()
    get_or_create_head_node(config, str(path), True, False, True, None, provider, again)
    assert any("echo edited" in c for c in again.remote())
    assert not any("ray stop" in c or "ray start" in c for c in again.remote()), again.remote()

    # each worker type launched by the AWS node provider, and set up with its resources as the autoscaler does
    for name in ("gpu_worker", "gpu_worker_spot"):
        node_type = config["available_node_types"][name]
        provider.create_node(node_type["node_config"], {TAG_RAY_NODE_KIND: "worker", TAG_RAY_USER_NODE_TYPE: name}, 1)
        (node,) = provider.non_terminated_nodes({TAG_RAY_USER_NODE_TYPE: name})
        instance = ec2.describe_instances(InstanceIds=[node])["Reservations"][0]["Instances"][0]
        assert instance["InstanceType"] == "g5.12xlarge", name
        assert "IamInstanceProfile" not in instance, name  # Ray passes the head's profile to the head only
        assert instance["SubnetId"] in node_type["node_config"]["SubnetIds"]
        assert (instance.get("InstanceLifecycle") == "spot") == (name == "gpu_worker_spot"), instance
        worker_runner = RecordingRunner()
        updater = NodeUpdaterThread(
            node_id=node,
            provider_config=config["provider"],
            provider=provider,
            auth_config=config["auth"],
            cluster_name=config["cluster_name"],
            file_mounts=config["file_mounts"],
            initialization_commands=config["initialization_commands"],
            setup_commands=config["worker_setup_commands"],
            ray_start_commands=config["worker_start_ray_commands"],
            runtime_hash="1",
            file_mounts_contents_hash="1",
            process_runner=worker_runner,
            use_internal_ip=True,
            is_head_node=False,
            node_resources=node_type["resources"],
        )
        updater.start()
        updater.join()
        assert updater.exitcode == 0, name
        remote = worker_runner.remote()
        assert any("torch.cuda.is_available()" in c for c in remote), name  # the GPU check of worker setup
        (start,) = [c for c in remote if "ray start --address" in c]
        assert resources_given(start) == {"CPU": 48, "GPU": 4}, name


def _edit(config: dict, defect: str) -> None:
    worker = config["available_node_types"]["gpu_worker"]
    if defect == "placeholder":
        config["setup_commands"][1] = config["setup_commands"][1].replace("fs-0123abcd", "fs-CHANGE_ME")
    elif defect == "no image":
        del worker["node_config"]["ImageId"]
    elif defect == "InstanceTyp":
        worker["node_config"]["InstanceTyp"] = worker["node_config"].pop("InstanceType")
    elif defect == "availability_zones":
        config["provider"]["availability_zones"] = config["provider"].pop("availability_zone")
    elif defect == "GPU: 4 on one GPU":
        worker["node_config"]["InstanceType"] = "g5.xlarge"


DEFECTS = ["placeholder", "no image", "InstanceTyp", "availability_zones", "GPU: 4 on one GPU"]


@pytest.mark.parametrize("defect", DEFECTS)
def test_ray_up_stops_at_the_checkers_one_line_for_each_defect(aws, tmp_path, defect):
    import boto3

    ec2 = boto3.client("ec2", region_name=REGION)
    image = next(i for i in ec2.describe_images(Owners=["amazon"])["Images"] if "ubuntu" in i["Name"].lower())
    config = yaml.safe_load(filled_cluster_yaml(tmp_path, image["ImageId"]).read_text())
    _edit(config, defect)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError) as refused:
        check_cluster_config(path)
    assert len(str(refused.value).splitlines()) == 1, str(refused.value)
    assert not ec2.describe_instances()["Reservations"]  # nothing launched, nothing billed


def test_without_the_checker_boto3_refuses_the_misspelt_key_only_at_launch(aws, tmp_path):
    """What the checker saves: Ray's bootstrap accepts `InstanceTyp`; boto3 refuses it when the node is created."""
    import boto3
    from botocore.exceptions import ParamValidationError

    from sweeps.engine.ray_internals import aws_launcher, prepare_config, validate_config

    bootstrap_aws, AWSNodeProvider = aws_launcher().bootstrap_aws, aws_launcher().AWSNodeProvider

    ec2 = boto3.client("ec2", region_name=REGION)
    image = next(i for i in ec2.describe_images(Owners=["amazon"])["Images"] if "ubuntu" in i["Name"].lower())
    config = yaml.safe_load(filled_cluster_yaml(tmp_path, image["ImageId"]).read_text())
    _edit(config, "InstanceTyp")
    prepared = prepare_config(config)
    validate_config(prepared)
    bootstrapped = bootstrap_aws(prepared)
    provider = AWSNodeProvider(bootstrapped["provider"], bootstrapped["cluster_name"])
    with pytest.raises(ParamValidationError, match="InstanceTyp"):
        provider.create_node(bootstrapped["available_node_types"]["gpu_worker"]["node_config"], {}, 1)
