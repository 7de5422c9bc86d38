"""Check a `ray up` cluster YAML offline, with Ray's own validation and no cloud credentials.

    python -m sweeps.cluster_config cluster.yaml      # prints "valid", or the error (exit 1)

There is no `ray up --dry-run`. `ray up` first runs `prepare_config` (fill in the provider's
defaults.yaml shipped with Ray, merge the setup commands, set per-node-type worker bounds) and
`validate_config` (Ray's JSON schema, plus the head-node-type and worker-bound checks); only
after that does it call the cloud provider (`bootstrap_config`: key pairs, security groups, IAM,
images). This module runs exactly those first two steps, which read local files only: no cloud
SDK, no credentials, no network.

Both functions live in Ray's private `ray.autoscaler._private.util` (checked against
ray 2.60.0): this is the one place to touch when a Ray upgrade moves them.

Ray's fake multi-node provider (`fake_multinode`, cluster_local.yaml) ships no defaults file, so
`prepare_config` cannot fill one in, and its autoscaler reads the config as written: for it the file
itself must hold every launcher key of Ray's own base config (`monitor.BASE_READONLY_CONFIG`) and
name its head type as the provider does (`ray.head.default`), turn off the node updaters (its
nodes have no SSH), then pass `validate_config`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml


def validate_cluster_config(path) -> dict:
    """Validate the cluster YAML at `path` as `ray up` would before it contacts the cloud.

    Returns the config with Ray's defaults filled in. Raises ValueError naming the problem
    (unknown key, wrong type, a head_node_type missing from available_node_types, ...).
    """
    import jsonschema
    from ray.autoscaler._private.util import prepare_config, validate_config

    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ValueError(f"{path}: cannot read the cluster config: {e}") from None
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


FAKE = "fake_multinode"


def _prepare_fake_multinode(path: Path, config: dict) -> dict:
    """The fake provider's config as its autoscaler will read it: no defaults merged, so none missing."""
    from ray.autoscaler._private.fake_multi_node.node_provider import FAKE_HEAD_NODE_TYPE
    from ray.autoscaler._private.monitor import BASE_READONLY_CONFIG
    from ray.autoscaler._private.util import fill_node_type_min_max_workers

    missing = [key for key in BASE_READONLY_CONFIG if key not in config and key != "docker"]
    if missing:
        raise ValueError(
            f"{path}: the {FAKE} provider has no defaults, and its autoscaler crashes without these keys: "
            f"{', '.join(missing)}; add them (empty values are fine)"
        )
    if config.get("head_node_type") != FAKE_HEAD_NODE_TYPE:
        raise ValueError(
            f"{path}: the {FAKE} provider names its head's type {FAKE_HEAD_NODE_TYPE!r}; set head_node_type "
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


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m sweeps.cluster_config CLUSTER_YAML", file=sys.stderr)
        return 2
    try:
        validate_cluster_config(args[0])
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    print("valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
