"""Every sweep script in sweeps/ runs end to end with `--smoke-test` (a tiny random model, tiny
settings), on the session's local Ray and a fresh MLflow store: exit 0, one parent run, one
finished child run per planned trial carrying the method's metric contract and its primary metric."""

import importlib
import re
from pathlib import Path

import pytest
from mlflow_helpers import runs_by_role

from trainables.methods import get_method

SWEEPS = Path(__file__).resolve().parent.parent / "sweeps"


def sweep_scripts() -> dict[str, str]:
    """{script name: method} for every script that hands its command line to the engine."""
    found = {}
    for path in sorted(SWEEPS.glob("*.py")):
        match = re.search(r'runner\.main,.*method="([^"]+)"', path.read_text())
        if match:
            found[path.stem] = match.group(1)
    return found


def test_every_script_is_found():
    assert {"electra_layers", "improvements", "evaluate"} <= set(sweep_scripts())


@pytest.mark.parametrize("script", sorted(sweep_scripts()))
def test_smoke_test_runs_end_to_end(script, sweep_env):
    method = get_method(sweep_scripts()[script])
    flags = ["--smoke-test", "--name", f"smoke-{script}", *sweep_env["base"]]
    code = importlib.import_module(f"sweeps.{script}").main(flags)
    assert code == 0
    parents, children = runs_by_role(sweep_env["uri"])
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == int(parents[0].data.params["trials"]) > 0
    for child in children:
        assert child.info.status == "FINISHED"
        contract = child.data.params["metric_primary"]
        assert contract in child.data.metrics, (contract, sorted(child.data.metrics))
        assert child.data.params["sweep_axes"] and child.data.params["metric_mode"] in ("max", "min")
    assert method.name in {c.data.params["method"] for c in children} or method.name == "improvements"
