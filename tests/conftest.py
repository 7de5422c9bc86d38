"""Shared fixtures: tiny random encoders built from configs, the real STS-B data, one local Ray
(2 CPUs, 4 logical GPUs) for the whole session, and a fresh storage path + MLflow store per test."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Threads that wait for work sleep rather than spin: the tests run beside each other (xdist workers, CI's lanes),
# and one process's OpenMP threads spinning on both cores made a neighbouring sweep ten times slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
TORCH_LOADED_BEFORE_WAIT_POLICY = "torch" in sys.modules  # OpenMP reads the policy once, when torch loads
os.environ.setdefault("EMBSWEEP_RESUME_KEY", "embsweep-tests")  # seals of Tune state: not the user's key file
if "EMBSWEEP_CACHE_DIR" not in os.environ:  # the tokenised-data cache of this test session, not the user's
    import tempfile

    os.environ["EMBSWEEP_CACHE_DIR"] = tempfile.mkdtemp(prefix="embsweep-test-cache-")

from trainables.core.paths import default_data_dir  # noqa: E402


@pytest.fixture(scope="session")
def data_dir():
    path = default_data_dir()
    if not (path / "stsbenchmark" / "sts-train.csv").is_file():
        pytest.fail(f"The real STS-B data is expected at {path} (set EMBSWEEP_DATA_DIR)")
    return path


@pytest.fixture(scope="session")
def stsb_sentences(data_dir):
    from trainables.data.stsb import load_stsb

    return [e.sentence1 for e in load_stsb(data_dir, splits=("train",))["train"][:2000]]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, stsb_sentences):
    """{kind: model folder} for bert, electra-discriminator, electra-generator, mpnet (4 layers)."""
    from trainables.encoders.tiny import KINDS, build_tiny_model

    root = tmp_path_factory.mktemp("tiny-models")
    return {kind: str(build_tiny_model(kind, root / kind, sentences=stsb_sentences)) for kind in KINDS}


@pytest.fixture(scope="session")
def tiny_task(tiny_models, data_dir):
    """STS-B tokenised for the tiny BERT: 320 training pairs, 300 dev and test pairs."""
    from trainables.training.tokenized import load_task, subset, tokenize_task

    examples, checksums = load_task("stsb", data_dir)
    examples = {s: rows if s == "train" else subset(rows, 300) for s, rows in examples.items()}
    return tokenize_task("stsb", tiny_models["bert"], examples, checksums, 320)


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from sweeps.engine.runner import QUIET_ENV

    os.environ.update(QUIET_ENV)
    # the workers upload checkpoints to the tests' S3 server with the credentials of their environment,
    # as a cloud node does with its own (never through Ray's runtime environment)
    from s3_helpers import EXTERNAL_ENV, TEST_CREDENTIALS

    if not os.environ.get(EXTERNAL_ENV):
        for key, value in TEST_CREDENTIALS.items():
            os.environ.setdefault(key, value)
    ray.init(address="local", num_cpus=2, num_gpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def sweep_env(tmp_path, ray_session, data_dir):
    """Common flags for a fast sweep into a fresh storage path and MLflow store: `flags`, and `base`, the
    same without the sample and batch-size limits (for scripts and methods that set their own)."""
    return sweep_environment(tmp_path, data_dir)


def sweep_environment(tmp_path, data_dir) -> dict:
    """What `sweep_env` gives, in a folder of the caller's (a module-scoped fixture's, say)."""
    storage = tmp_path / "runs"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    base = ["--storage-path", str(storage), "--mlflow-uri", uri, "--experiment", "test", "--data-dir", str(data_dir)]
    # Both CPUs per trial: one trial at a time on the tests' 2-CPU Ray, so that a sweep starts one trial process (a
    # reused actor) rather than two, each paying about 5 s of CPU to import torch and the method (a sample of the
    # long tests used 12% less CPU). Tests of fractional packing and overlap set their own share.
    base += ["--cpus-per-trial", "2", "--gpus-per-trial", "0"]
    limits = ["--max-train-samples", "48", "--max-eval-samples", "60", "--batch-size", "16"]
    return {"storage": storage, "uri": uri, "flags": [*base, *limits], "base": base, "tmp": tmp_path}


@pytest.fixture
def edit_trials(monkeypatch):
    """`edit_trials(fn)`: the next sweeps call `fn(plan)` on their plan before they start (to
    inject faults, or hold trials so that they overlap)."""
    import sweeps.engine.runner as runner

    original = runner.plan_sweep

    def install(edit):
        def planned(args, **kwargs):
            plan = original(args, **kwargs)
            edit(plan)
            return plan

        monkeypatch.setattr(runner, "plan_sweep", planned)

    return install


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """The tests' S3 server (tests/s3_server.py, moto), or None when EMBSWEEP_TEST_S3_ENDPOINT names an external one."""
    from s3_helpers import EXTERNAL_ENV, S3Server

    if os.environ.get(EXTERNAL_ENV):
        yield None
        return
    server = S3Server(tmp_path_factory.mktemp("s3") / "server.log").start()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """A fresh bucket on the tests' S3 server; this process gets its credentials (never an endpoint
    variable: the endpoint travels in each URI's query)."""
    from s3_helpers import EXTERNAL_ENV, TEST_CREDENTIALS, S3Store

    endpoint = os.environ.get(EXTERNAL_ENV) or s3_server.endpoint
    if not os.environ.get(EXTERNAL_ENV):
        for key, value in TEST_CREDENTIALS.items():
            monkeypatch.setenv(key, value)
    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    return S3Store(endpoint, s3_server)
