"""Every sweep script in sweeps/ runs end to end with `--smoke-test` (a tiny random model, tiny
settings), on the session's local Ray and a fresh MLflow store: exit 0, one parent run, one
finished child run per planned trial carrying the method's metric contract and its primary metric."""

import importlib

import pytest
from mlflow_helpers import runs_by_role
from sweep_helpers import check_smoke_runs

from sweeps.engine.scripts import sweep_scripts
from trainables.core import schema
from trainables.core.paths import PROJECT_ROOT


def test_every_script_is_found():
    assert {"electra_layers", "improvements", "evaluate"} <= set(sweep_scripts())


# A script whose smoke sweep another test runs and checks further (these checks included) is not run again here.
SMOKE_ELSEWHERE = {"tsdae": "tests/test_tsdae.py::test_every_objective_runs_through_the_sweep_script"}


@pytest.mark.sweep
@pytest.mark.parametrize("script", sorted(set(sweep_scripts()) - set(SMOKE_ELSEWHERE)))
def test_smoke_test_runs_end_to_end(script, sweep_env):
    flags = ["--smoke-test", "--name", f"smoke-{script}", *sweep_env["base"]]
    code = importlib.import_module(f"sweeps.{script}").main(flags)
    assert code == 0
    check_smoke_runs(sweep_env["uri"], script)


def test_every_script_elsewhere_is_run_there_with_these_checks():
    for script, test in SMOKE_ELSEWHERE.items():
        path, name = test.split("::")
        source = (PROJECT_ROOT / path).read_text()
        body = source[source.index(f"def {name}(") :].split("\ndef ", 1)[0]
        assert '"--smoke-test"' in body and f'check_smoke_runs(sweep_env["uri"], "{script}")' in body, test


# One smoke sweep on S3 per path through the engine (every script runs locally above): trials alone, and
# upstream stages computed first into the store (prepare_stages), then trials that read them. The stage
# trials of `improvements` run on S3 in tests/test_s3_cluster.py.
S3_SCRIPTS = {"electra_layers": False, "sed": True}  # script: whether its smoke sweep computes a stage first


@pytest.mark.slow
@pytest.mark.objectstore  # its own CI step beside the two-node S3 sweeps
@pytest.mark.parametrize("script", sorted(S3_SCRIPTS))
def test_smoke_test_runs_with_its_storage_on_s3(script, sweep_env, s3, monkeypatch):
    """A script of each engine path with --storage-path on an S3 server: its sweep.json, Tune state and
    trials' best folders land in the bucket (its stage too, for sed) and nothing locally."""
    monkeypatch.chdir(sweep_env["tmp"])
    base = list(sweep_env["base"])
    base[base.index("--storage-path") + 1] = s3.uri("runs")
    flags = ["--smoke-test", "--name", f"s3-{script}", *base]
    assert importlib.import_module(f"sweeps.{script}").main(flags) == 0
    _, children = runs_by_role(sweep_env["uri"])
    assert children and all(c.info.status == "FINISHED" for c in children)
    keys = s3.keys("runs/")
    assert f"runs/s3-{script}/sweep.json" in keys and f"runs/s3-{script}/tuner.pkl" in keys
    for child in children:
        checkpoint = child.data.tags[schema.TAG_CHECKPOINT]
        assert checkpoint.startswith(f"s3://{s3.bucket}/runs/s3-{script}/") and "endpoint_override=" in checkpoint
    stages = [key for key in keys if key.startswith("runs/stages/")]
    assert bool(stages) == S3_SCRIPTS[script], stages[:5]
    assert not (sweep_env["tmp"] / "runs").exists()
