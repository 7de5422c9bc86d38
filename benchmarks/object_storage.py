"""The main job with its storage on S3 against the same job on a local folder, in one run: wall
time of each, their ratio, and what the S3 run cost in requests and bytes, as a moto S3 server
(tests/s3_server.py, the S3 API over HTTP on this machine) counted them; then the resume of a
finished sweep from the storage URI alone, and its cost.

    python benchmarks/object_storage.py                          # the README's main job, both ways
    python benchmarks/object_storage.py --smoke                  # the tiny --smoke-test sweep instead
    python benchmarks/object_storage.py --flags "--layers 0,6"   # other flags for both runs

Needs the test extra (moto's server) and the main job's model (`embsweep-assets install
sentence-transformers/all-MiniLM-L6-v2`). Each run is a separate process, as a user runs it; both
use a local SQLite MLflow store, so the difference is the sweep's storage alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import results_file  # noqa: E402

MAIN_JOB = "--models sentence-transformers/all-MiniLM-L6-v2 --seeds 0 --epochs 1 --max-train-samples 1000"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _sweep(argv: list[str], cwd: Path, env: dict) -> float:
    command = [sys.executable, str(ROOT / "sweeps" / "electra_layers.py"), *argv]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{shlex.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds


def _stats(endpoint: str, reset: bool = False) -> dict:
    path = "/_embsweep/reset" if reset else "/_embsweep/stats"
    request = urllib.request.Request(endpoint + path, method="POST" if reset else "GET")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return {} if reset else json.loads(answer.read())


def _cost(stats: dict) -> str:
    requests = stats["requests"]
    by_method = ", ".join(f"{method} {count}" for method, count in sorted(requests.items()))
    return (
        f"{sum(requests.values())} requests ({by_method}); {stats['bytes_in'] / 1e6:.1f} MB sent to the store, "
        f"{stats['bytes_out'] / 1e6:.1f} MB read from it"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the --smoke-test sweep instead of the main job")
    parser.add_argument("--flags", default="", help="more flags for both runs")
    results_file.add_flag(parser, "object_storage")
    args = parser.parse_args()
    flags = ["--smoke-test"] if args.smoke else MAIN_JOB.split()
    flags += shlex.split(args.flags)

    work = Path(tempfile.mkdtemp(prefix="embsweep-s3-bench-"))
    env = {**os.environ, **CREDENTIALS, "EMBSWEEP_CACHE_DIR": str(work / "node-cache")}
    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        env.pop(key, None)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "s3_server.py"), "--port", str(port)],
        stdout=open(work / "s3.log", "w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _stats(endpoint)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    sys.exit(f"the S3 server did not start: {(work / 's3.log').read_text()[-2000:]}")
                time.sleep(0.2)
        import boto3

        boto3.client("s3", endpoint_url=endpoint, **_boto_credentials()).create_bucket(Bucket="runs")
        uri = f"s3://runs/embsweep?endpoint_override=127.0.0.1:{port}&scheme=http"

        local = _sweep([*flags, "--storage-path", str(work / "local"), "--name", "local"], work, env)
        _stats(endpoint, reset=True)
        remote = _sweep(
            [*flags, "--storage-path", uri, "--mlflow-uri", f"sqlite:///{work / 's3-mlflow.db'}", "--name", "s3"],
            work,
            env,
        )
        sweep_cost = _stats(endpoint)
        keys = _keys(endpoint)
        best = sorted(k for k in keys if k.endswith("/best/config.json"))
        _stats(endpoint, reset=True)
        resumed = _sweep(["--resume", uri], work, env)
        resume_cost = _stats(endpoint)
        stored = _bucket_size(endpoint)
        print(f"job: electra_layers.py {' '.join(flags)}")
        print(f"local storage: {local:.1f} s")
        print(f"S3 storage:    {remote:.1f} s ({remote / local:.2f}x the local run's wall time)")
        print(f"  the S3 run: {_cost(sweep_cost)}")
        print(f"  in the bucket after it: {stored[0]} objects, {stored[1] / 1e6:.1f} MB")
        print(
            f"  embsweep/s3/sweep.json in the bucket: {'embsweep/s3/sweep.json' in keys}; "
            f"trials' best-dev folders there: {len(best)}"
        )
        print(f"resume of the finished sweep from the storage URI alone: {resumed:.1f} s; {_cost(resume_cost)}")
        leftovers = sorted(p.name for p in work.iterdir() if p.name not in {"local", "node-cache", "s3.log"})
        print(f"local files beside the runs: {leftovers}")
        results_file.write(
            args.results_json,
            "object_storage",
            ["", "local folder", "S3"],
            [
                ["wall time", f"{local:.1f} s", f"{remote:.1f} s ({remote / local:.2f}x)"],
                ["requests and bytes", "", _cost(sweep_cost)],
                ["kept after the sweep", "", f"{stored[0]} objects, {stored[1] / 1e6:.1f} MB"],
                ["resume of the finished sweep from the URI alone", "", f"{resumed:.1f} s; {_cost(resume_cost)}"],
            ],
            summary=f"The job `electra_layers.py {' '.join(flags)}`, both ways in one run: storage on a local folder, "
            "then on S3 (moto's server on the same machine).",
        )
    finally:
        server.kill()
    return 0


def _boto_credentials() -> dict:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
    }


def _keys(endpoint: str) -> list[str]:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, **_boto_credentials())
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="runs")
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def _bucket_size(endpoint: str) -> tuple[int, int]:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, **_boto_credentials())
    count, size = 0, 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket="runs"):
        for item in page.get("Contents", []):
            count, size = count + 1, size + item["Size"]
    return count, size


if __name__ == "__main__":
    sys.exit(main())
