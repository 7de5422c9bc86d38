"""Check a `ray up` cluster YAML offline, with Ray's own validation and no cloud credentials.

    python -m sweeps.cluster_config cluster.yaml      # prints "valid", or the error (exit 1)

There is no `ray up --dry-run`. `ray up` first runs `prepare_config` (fill in the provider's
defaults.yaml shipped with Ray, merge the setup commands, set per-node-type worker bounds) and
`validate_config` (Ray's JSON schema, plus the head-node-type and worker-bound checks); only
after that does it call the cloud provider (`bootstrap_config`: key pairs, security groups, IAM,
images). This module runs exactly those first two steps, which read local files only: no cloud
SDK, no credentials, no network.

Both functions are private to Ray's autoscaler: sweeps/engine/ray_internals.py names them, the one
place to touch when a Ray upgrade moves them.

Then what the launch itself would refuse, or run into, which Ray's schema lets through
(`launch_problems`), each as one line: `CHANGE_ME` placeholders left anywhere, a project ref that is
not a pinned commit, a Ray version in the setup that is not this machine's, a `ray start` whose dashboard
(and its job API, which runs any command) listens beyond the loopback address; and for provider type
aws only: a node type without ImageId, node_config keys and values that boto3's own EC2
`RunInstances` model (botocore's service model, read offline) refuses, an unknown instance type,
a provider key Ray does not read (`availability_zones`) or zones outside the region, GPU resources
other than the instance type's GPUs (sweeps/engine/instances.py), shared storage in another region than
`provider.region` (the setup's EFS_REGION, or a DATA_URI bucket's `region=`: `storage_region_problems`).
On success it prints "valid" and the vCPU quota the cluster needs at full size, per quota
(`quota_lines`), and the IAM PassRole a worker instance profile needs.

A key written twice in one mapping is refused when the file is read (YAML would keep the last one
silently), naming the key and both lines.

Ray's fake multi-node provider (`fake_multinode`, cluster_local.yaml) ships no defaults file, so
`prepare_config` cannot fill one in, and its autoscaler reads the config as written: for it the file
itself must hold every launcher key of Ray's own base config (`monitor.BASE_READONLY_CONFIG`) and
name its head type as the provider does (`ray.head.default`), turn off the node updaters (its
nodes have no SSH), then pass `validate_config`.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

import yaml

from sweeps.engine import instances

PLACEHOLDER = "CHANGE_ME"


def validate_cluster_config(path) -> dict:
    """Validate the cluster YAML at `path` as `ray up` would before it contacts the cloud.

    Returns the config with Ray's defaults filled in. Raises ValueError naming the problem
    (unknown key, wrong type, a head_node_type missing from available_node_types, ...).
    """
    import jsonschema

    from sweeps.engine.ray_internals import prepare_config, validate_config

    path = Path(path)
    try:
        config = load_unique_keys(path.read_text())
    except OSError as e:
        raise ValueError(f"{path}: cannot read the cluster config: {e}") from None
    except DuplicateKey as e:
        raise ValueError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: a cluster config is a mapping of keys, got {type(config).__name__}")
    if not isinstance(config.get("provider"), dict) or "type" not in config["provider"]:
        raise ValueError(f"{path}: 'provider' with a 'type' (aws, gcp, azure, local, ...) is required")
    try:
        prepared = (
            _prepare_fake_multinode(path, config) if config["provider"]["type"] == FAKE else prepare_config(config)
        )
        validate_config(prepared)
    except jsonschema.ValidationError as e:
        where = ".".join(str(part) for part in e.absolute_path) or "top level"
        raise ValueError(f"{path}: invalid cluster config at {where}: {e.message}") from None
    except (ValueError, KeyError, TypeError, AssertionError, RuntimeError, NotImplementedError) as e:
        raise ValueError(f"{path}: invalid cluster config: {type(e).__name__}: {e}") from None
    return prepared


class DuplicateKey(yaml.YAMLError):
    """A key written twice in one mapping of a YAML file."""


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key written twice in one mapping is an error: YAML keeps the last
    one silently (`max_workers: 0` twice under a node type leaves whichever came second). A merge (`<<`)
    may still override what it merges."""

    def construct_mapping(self, node, deep=False):
        first_line = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                if key in first_line:
                    raise DuplicateKey(
                        f"line {line}: key {key!r} written twice in one mapping (first on line {first_line[key]}); "
                        "YAML keeps only the last: delete one of them"
                    )
                first_line[key] = line
            except TypeError:  # an unhashable key: the base loader names it
                pass
        return super().construct_mapping(node, deep=deep)


def load_unique_keys(text: str):
    """`yaml.safe_load`, refusing a key written twice in one mapping (DuplicateKey, naming the key and its lines)."""
    return yaml.load(text, Loader=UniqueKeyLoader)


FAKE = "fake_multinode"


def _prepare_fake_multinode(path: Path, config: dict) -> dict:
    """The fake provider's config as its autoscaler will read it: no defaults merged, so none missing."""
    from sweeps.engine.ray_internals import fake_multinode_names, fill_node_type_min_max_workers

    fake = fake_multinode_names()

    missing = [key for key in fake.launcher_keys if key not in config and key != "docker"]
    if missing:
        raise ValueError(
            f"{path}: the {FAKE} provider has no defaults, and its autoscaler crashes without these keys: "
            f"{', '.join(missing)}; add them (empty values are fine)"
        )
    if config.get("head_node_type") != fake.head_node_type:
        raise ValueError(
            f"{path}: the {FAKE} provider names its head's type {fake.head_node_type!r}; set head_node_type "
            "and that node type's name to it"
        )
    if config["provider"].get("disable_node_updaters") is not True:
        raise ValueError(
            f"{path}: the {FAKE} provider's nodes have no SSH: set provider.disable_node_updaters: true, or the "
            "autoscaler terminates every node it adds"
        )
    prepared = dict(config)
    fill_node_type_min_max_workers(prepared)
    return prepared


def _strings(value, where: str):
    """Every string in a config value, with where it is (`setup_commands[1]`, `...node_config.ImageId`)."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{where}[{i}]")


def _placeholders(config: dict) -> list[str]:
    found = []
    for where, text in _strings(config, ""):
        for match in re.finditer(rf"(?:([A-Za-z_][A-Za-z0-9_]*)=)?(\S*{PLACEHOLDER}\S*)", text):
            if "*" in match.group(2):  # a shell pattern that tests for the placeholder, not one
                continue
            name = f"{match.group(1)}=" if match.group(1) else ""
            found.append(f"{where}: placeholder {name}{match.group(2).rstrip(';')} left to fill in")
    return found


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
START_COMMAND_KEYS = ("head_start_ray_commands", "worker_start_ray_commands", "setup_commands", "head_setup_commands")


def _exposed_dashboard(config: dict) -> list[str]:
    """A `ray start` whose dashboard listens beyond the loopback address: its job API runs any command for
    whoever reaches the port, with no authentication of its own."""
    problems = []
    for key in START_COMMAND_KEYS:
        for i, command in enumerate(config.get(key) or []):
            for host in re.findall(r"--dashboard-host(?:=|\s+)['\"]?([^\s'\";]+)", str(command)):
                if host not in LOOPBACK_HOSTS:
                    problems.append(
                        f"{key}[{i}]: --dashboard-host={host} opens Ray's dashboard and its job API (which runs "
                        "any command) to whoever reaches its port; use --dashboard-host=127.0.0.1 and reach it "
                        "through an SSH tunnel (ray dashboard cluster.yaml)"
                    )
    return problems


def _commands(config: dict) -> str:
    keys = ("setup_commands", "head_setup_commands", "worker_setup_commands")
    return "\n".join(str(c) for key in keys for c in config.get(key) or [])


def _setup_pins(config: dict) -> list[str]:
    """The project at a pinned commit; the nodes' Ray at this machine's version (`ray up` needs both sides equal)."""
    import ray

    commands = _commands(config)
    problems = []
    ref = re.search(r"EMBSWEEP_REF=(\S*?);", commands)
    if ref and PLACEHOLDER not in ref.group(1) and not re.fullmatch(r"[0-9a-f]{40}", ref.group(1)):
        problems.append(
            f"setup_commands: EMBSWEEP_REF={ref.group(1)} is not a pinned commit: give the full 40-character "
            "commit (git rev-parse HEAD), so that a node launched later runs the driver's code"
        )
    for version in sorted(set(re.findall(r"ray\[[a-z,]+\]==([0-9][^'\"\s]*)", commands))):
        if version != ray.__version__:
            problems.append(
                f"setup_commands: nodes install Ray {version}, this machine runs Ray {ray.__version__}: "
                "`ray up` needs the same version on both sides"
            )
    return problems


def _run_instances_model():
    import botocore.session

    model = botocore.session.get_session().get_service_model("ec2")
    return model.operation_model("RunInstances").input_shape, set(model.shape_for("InstanceType").enum)


def _boto3_refusals(where: str, node_config: dict, shape) -> list[str]:
    """What boto3 would refuse in `node_config`, passed as RunInstances' input (as Ray's node provider does,
    less the SubnetIds Ray consumes itself and plus the counts it adds)."""
    from botocore.validate import ParamValidator

    params = {key: value for key, value in node_config.items() if key != "SubnetIds"}
    params.setdefault("MinCount", 1)
    params.setdefault("MaxCount", 1)
    problems = []
    for line in ParamValidator().validate(params, shape).generate_report().splitlines():
        unknown = re.match(r'Unknown parameter in (\S*?): "([^"]+)", must be one of: (.*)', line)
        if unknown:
            inside = "" if unknown.group(1) == "input" else f".{unknown.group(1)}"
            close = difflib.get_close_matches(unknown.group(2), unknown.group(3).split(", "), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            line = f"unknown key {unknown.group(2)!r}{hint}, which boto3's RunInstances refuses"
            problems.append(f"{where}{inside}: {line}")
        elif line.strip():
            problems.append(f"{where}: {line.strip()} (boto3's RunInstances)")
    return problems


# Keys of `provider` that Ray's AWS launcher reads (ray/autoscaler/_private/aws, Ray 2.60.0).
AWS_PROVIDER_KEYS = (
    "type", "region", "availability_zone", "cache_stopped_nodes", "use_internal_ips", "use_external_head_ip",
    "security_group", "key_pair", "cloudwatch", "aws_credentials", "disable_launch_config_check",
    "foreground_node_launch", "worker_rpc_drain",
)  # fmt: skip


def _aws_problems(config: dict) -> list[str]:
    provider = config["provider"]
    problems = []
    for key in provider:
        close = difflib.get_close_matches(key, AWS_PROVIDER_KEYS, n=1, cutoff=0.75)
        if key not in AWS_PROVIDER_KEYS and close:
            problems.append(f"provider.{key}: not a key Ray reads (ignored); did you mean {close[0]}?")
    region = provider.get("region", "")
    for zone in str(provider.get("availability_zone") or "").split(","):
        if zone.strip() and not re.fullmatch(rf"{re.escape(region)}[a-z]", zone.strip()):
            problems.append(f"provider.availability_zone: {zone.strip()!r} is not a zone of region {region!r}")
    shape, known_types = _run_instances_model()
    for name, node_type in (config.get("available_node_types") or {}).items():
        where = f"available_node_types.{name}.node_config"
        node_config = node_type.get("node_config") or {}
        if "ImageId" not in node_config and "LaunchTemplate" not in node_config:
            problems.append(
                f"{where}: no ImageId: Ray would launch an old Deep Learning AMI; give an image with Python >= 3.11 "
                "and the NVIDIA driver (cluster.yaml, ImageId)"
            )
        problems += _boto3_refusals(where, node_config, shape)
        instance_type = node_config.get("InstanceType")
        if instance_type and instance_type not in known_types:
            close = difflib.get_close_matches(instance_type, sorted(known_types), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(f"{where}.InstanceType: {instance_type!r} is not an EC2 instance type{hint}")
        known = instances.TYPES.get(instance_type)
        declared = (node_type.get("resources") or {}).get("GPU")
        if known and declared is not None and declared != known.gpus:
            problems.append(
                f"available_node_types.{name}.resources.GPU: {declared:g}, but {instance_type} has {known.gpus} "
                f"GPU(s): Ray would schedule trials onto GPUs that are not there (or leave GPUs idle)"
            )
    return problems


def storage_region_problems(config: dict) -> list[str]:
    """The shared storage in another region than the nodes (aws): an EFS file system whose region (EFS_REGION of
    the setup) is not provider.region cannot be mounted (its name resolves only in its own region's VPC); a bucket
    whose region the setup names (DATA_URI's `region=`) in another region is reached across regions."""
    region = config["provider"].get("region")
    commands = _commands(config)
    problems = []
    for efs_region in sorted(set(re.findall(r"\bEFS_REGION=([^;\s$\"]+);", commands))):
        if region and efs_region != region:
            problems.append(
                f"setup_commands: EFS_REGION={efs_region} but provider.region is {region}: nodes mount EFS only in "
                f"their own region: use a file system in {region} (EFS_ID, EFS_REGION={region}), or set "
                f"provider.region to {efs_region}"
            )
    for uri in sorted(set(re.findall(r"\bDATA_URI=(s3://[^;\s]+)", commands))):
        bucket_region = dict(re.findall(r"[?&](region)=([^&]+)", uri)).get("region")
        if region and bucket_region and bucket_region != region:
            problems.append(
                f"setup_commands: DATA_URI's bucket is in {bucket_region} (its region=) but provider.region is "
                f"{region}: every node would copy across regions, billed per GB: use a bucket in {region}, or set "
                f"provider.region to {bucket_region}"
            )
    return problems


def launch_problems(config: dict) -> list[str]:
    """What a launch of `config` (as written, before Ray merges its setup commands into each node's) would refuse
    or run into, one line each; [] when none."""
    problems = _placeholders(config) + _setup_pins(config) + _exposed_dashboard(config)
    if config["provider"].get("type") == "aws":
        problems += _aws_problems(config) + storage_region_problems(config)
    return problems


def quota_lines(config: dict) -> list[str]:
    """The vCPUs of each AWS quota the cluster needs with every node type at its max_workers (the head counts once)."""
    if config["provider"].get("type") != "aws":
        return []
    needed: dict[tuple[str, str], int] = {}
    unknown = []
    for name, node_type in config["available_node_types"].items():
        node_config = node_type.get("node_config") or {}
        known = instances.TYPES.get(node_config.get("InstanceType"))
        if known is None:
            unknown.append(f"{name} ({node_config.get('InstanceType')})")
            continue
        count = 1 if name == config["head_node_type"] else min(node_type["max_workers"], config["max_workers"])
        spot = (node_config.get("InstanceMarketOptions") or {}).get("MarketType") == "spot"
        quota = known.quota(spot)
        needed[quota] = needed.get(quota, 0) + count * known.vcpus
    lines = [
        f"quota: {vcpus} vCPUs of '{quota}' ({code}) in {config['provider'].get('region')} at full size"
        for (quota, code), vcpus in needed.items()
    ]
    if unknown:
        lines.append("quota: not counted for " + ", ".join(unknown) + " (not in sweeps/engine/instances.py)")
    return lines


def pass_role_lines(config: dict) -> list[str]:
    """The iam:PassRole the head node needs to launch workers that carry an instance profile."""
    head = config["available_node_types"][config["head_node_type"]].get("node_config") or {}
    profiles = sorted(
        {
            (node_type.get("node_config") or {})["IamInstanceProfile"].get("Arn", "?")
            for name, node_type in config["available_node_types"].items()
            if name != config["head_node_type"] and "IamInstanceProfile" in (node_type.get("node_config") or {})
        }
    )
    if not profiles or config["provider"].get("type") != "aws":
        return []
    head_role = "the head's role" if "IamInstanceProfile" in head else "the head's role ray-autoscaler-v1"
    return [
        f"iam: {head_role} needs iam:PassRole on the role of {arn} to launch workers with it "
        "(cluster/iam-passrole.json; docs/cluster.md)"
        for arn in profiles
    ]


def check_cluster_config(path) -> tuple[dict, list[str]]:
    """Ray's validation, then `launch_problems` (ValueError: one line per problem, each naming the file);
    returns the prepared config and the lines to print beside "valid" (quota, PassRole)."""
    prepared = validate_cluster_config(path)
    problems = launch_problems(load_unique_keys(Path(path).read_text()))
    if problems:
        raise ValueError("\n".join(f"{path}: {line}" for line in problems))
    return prepared, quota_lines(prepared) + pass_role_lines(prepared)


USAGE = "python -m sweeps.cluster_config CLUSTER_YAML"  # one argument, no flags


def main(argv=None) -> int:
    from sweeps.engine.ray_internals import require_supported_versions

    require_supported_versions()  # Ray's own checks run below, from its private modules
    args = sys.argv[1:] if argv is None else list(argv)
    usage = f"usage: {USAGE}"
    if args in (["-h"], ["--help"]):
        print(usage + "\n\n" + __doc__.split("\n\n")[0])
        return 0
    if len(args) != 1:
        print(f"{usage} (one file)", file=sys.stderr)
        return 2
    try:
        _, notes = check_cluster_config(args[0])
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    print("valid")
    for line in notes:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
