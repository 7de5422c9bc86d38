"""Starting Ray for a sweep, quietly: the environment and loggers that keep the console for the
sweep's own lines (`QUIET_ENV`, `quiet`), a local Ray or the cluster at `--address` (`init_ray`, never
with MLflow credentials in its runtime environment), Ray's own log lines sent to a file the sweep names,
and the driver's cloud credentials kept off the trials' runtime environments.

A sweep without `--address` starts a local Ray that listens on the loopback address only (its GCS,
raylet, workers and agents: nothing on the machine's network addresses) with Ray's token authentication
on (Ray's default for a new local Ray; its token in Ray's default file, made readable by its owner
only); `RAY_AUTH_MODE=disabled` is refused for it. With the `--address` of this machine's local cluster
(`python -m sweeps.local_cluster up`) the driver uses that cluster's token (`local_cluster.token_env`).
"""

from __future__ import annotations

import contextlib
import os
import sys

from sweeps.engine import ray_internals
from trainables.core import endpoints
from trainables.core.errors import SweepInputError
from trainables.encoders.cost import CUDA_ALLOCATOR_ENV

QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_AIR_NEW_OUTPUT": "0",  # with verbose=0: no Ray tables; sweeps/engine/progress.py prints progress
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
    "RAY_DEDUP_LOGS": "0",
    "PYTHONWARNINGS": "ignore",
    "MLFLOW_LOGGING_LEVEL": "WARNING",  # read when mlflow is imported: no "Creating initial MLflow database tables"
}


# Loggers whose routine lines are not for the person running a sweep: MLflow's INFO (database
# set-up), Ray's notice that token authentication is on (it stays on), Ray Tune's chatter.
QUIET_LOGGERS = {
    "mlflow": "WARNING",
    "ray": "WARNING",
    "ray.tune": "WARNING",
    "ray.train": "WARNING",
    ray_internals.AUTH_LOGGER: "ERROR",
}


def quiet() -> None:
    """Keep the console for the sweep's own lines (plan, progress, table, where the results are)."""
    import logging

    os.environ.update(QUIET_ENV)
    for name, level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    if {"transformers", "huggingface_hub"} & set(sys.modules):  # imported before the environment above was set
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


LOOPBACK = "127.0.0.1"


def check_local_ray_auth(address: str | None) -> None:
    """A local Ray keeps Ray's token authentication: refuse `RAY_AUTH_MODE` set to anything but `token` (before
    anything starts or is written)."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if address in (None, "", "local") and mode is not None and mode.lower() != "token":
        raise SweepInputError(
            f"RAY_AUTH_MODE={mode}: the sweep's local Ray keeps Ray's token authentication on (anyone on this "
            "machine could otherwise run code through it); unset RAY_AUTH_MODE or set it to token"
        )


def own_token_file() -> None:
    """Ray's default token file (~/.ray/auth_token), which a new local Ray uses, readable by its owner only:
    made here when missing (Ray would write it readable by all), tightened when it is not. Nothing when the
    token comes from RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH."""
    import secrets
    import stat
    from pathlib import Path

    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    path = Path.home() / ".ray" / "auth_token"
    path.parent.mkdir(mode=0o700, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if path.stat().st_uid == os.getuid() and stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
        return
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_hex(32))  # as Ray's own generator: 256 random bits


def init_ray(plan) -> None:
    import logging

    import ray

    quiet()
    if ray.is_initialized():
        return
    # Never MLflow credentials in the runtime env (Ray writes it to its logs) nor in the environment of
    # the Ray processes started here: trials and stages never talk to the store, the driver does.
    runtime_env = {"env_vars": {**QUIET_ENV, **CUDA_ALLOCATOR_ENV}}
    address = plan.args.get("address")
    if address == "local":
        address = None
    if address:
        from sweeps import local_cluster

        ours = local_cluster.token_env(address)  # this machine's local cluster: its token, its loopback address
        use_token(ours)
        try:
            with endpoints.credentials_hidden(), ray_internals.loopback_only() if ours else contextlib.nullcontext():
                ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level=logging.WARNING)
        except ConnectionError as error:  # something answers there, but not a Ray head
            raise SweepInputError(
                f"--address {address}: no Ray cluster answers there ({str(error).strip()[:200]}); "
                "start the Ray head there (ray start --head, or ray up cluster.yaml) or fix the "
                "address"
            ) from None
    else:
        check_local_ray_auth(None)
        own_token_file()
        with endpoints.credentials_hidden(), ray_internals.loopback_only():
            ray.init(
                address="local",
                num_gpus=plan.args.get("local_gpus"),
                include_dashboard=False,
                runtime_env=runtime_env,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        taken = ray.util.get_node_ip_address()
        if taken != LOOPBACK:  # a Ray that no longer keeps the loopback address: stop rather than listen there
            ray.shutdown()
            raise RuntimeError(
                f"the local Ray took the address {taken}, not {LOOPBACK}: see ray_internals.loopback_only"
            )
    plan.ray_log = ray_logs_to_file()


def use_token(env: dict) -> None:
    """Connect this driver with a cluster's token (`env`: RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH and the rest
    of `local_cluster.driver_env`; nothing when empty). Ray reads its authentication mode once, when it is
    imported; like Ray's own switch to token mode (`authentication_token_setup._enable_token_auth`, Ray
    2.60.0) this sets the environment and has Ray read it again."""
    if not env:
        return
    os.environ.update(env)
    ray_internals.reload_auth_config()


RAY_LOGGERS = ("ray", "ray.tune", "ray.train", "ray.data")


def ray_logs_to_file() -> str:
    """Ray's and Ray Tune's own log lines (a trial's traceback, warnings about syncing) go to a file in
    Ray's session folder, not the terminal: the sweep prints what failed in its own words (the failed
    trials and their reasons, a storage fault's one line) and names this file. Returns its path."""
    import logging
    import tempfile

    folder = ray_internals.ray_logs_dir() or tempfile.gettempdir()  # Ray has no public name for it
    path = os.path.join(folder, f"embsweep-driver-{os.getpid()}.log")
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in RAY_LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if type(h) is logging.StreamHandler]:
            logger.removeHandler(old)
        if not any(getattr(h, "baseFilename", None) == handler.baseFilename for h in logger.handlers):
            logger.addHandler(handler)
        logger.propagate = False
    return path


CLOUD_CREDENTIAL_ENV = frozenset(
    {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN"}
)


def credentials_stay_on_their_nodes() -> None:
    """Ray Tune copies the driver's AWS credentials into every trial actor's runtime environment
    (ray_internals.py `stop_propagating`), which Ray's runtime_env_agent writes to its
    log on each node. Trials upload their checkpoints with the credentials of the node they run on (its
    instance role or environment), so the driver's are not copied."""
    ray_internals.stop_propagating(CLOUD_CREDENTIAL_ENV)
