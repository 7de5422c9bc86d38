"""A two-node Ray on this machine (a head and one worker, each `ray start --block` in its own
process group, token authentication on): a smoke sweep with --address runs trials on both
nodes (each run records its node id), then both nodes are stopped by their process groups."""

import pytest
from mlflow_helpers import runs_by_role
from ray_nodes import TwoNodeRay
from sweep_helpers import run_script, sweep_args

from trainables.core.paths import PROJECT_ROOT

pytestmark = pytest.mark.slow


@pytest.fixture
def two_nodes(tmp_path):
    cluster = TwoNodeRay(tmp_path)
    try:
        cluster.start()
        yield cluster.address, cluster.env
    finally:
        cluster.stop()


def test_sweep_runs_on_both_nodes(two_nodes, sweep_env, tiny_models):
    address, env = two_nodes
    flags = list(sweep_env["flags"])
    flags[flags.index("--cpus-per-trial") + 1] = "1"
    # With actor reuse, Tune hands a trial whose actor is still starting on the worker node to the
    # head's finished actor; on a loaded machine every tiny trial can then run on the head.
    flags.append("--no-reuse-actors")
    sweep = f"--layers 0,1 --seeds 0,1 --epochs 2 --max-train-samples 400 --name two-nodes --address {address}"
    run_script(["sweeps/electra_layers.py", *sweep_args(tiny_models["bert"], sweep, *flags)], PROJECT_ROOT, env)
    _, children = runs_by_role(sweep_env["uri"])
    assert len(children) == 4 and all(c.info.status == "FINISHED" for c in children)
    nodes = {c.data.tags["node_id"] for c in children}
    assert len(nodes) == 2, nodes
