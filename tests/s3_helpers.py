"""An S3-compatible store for tests: the moto server of tests/s3_server.py on a free port (started once
per test session), or an external endpoint (MinIO, AWS) when EMBSWEEP_TEST_S3_ENDPOINT is set
(e.g. http://127.0.0.1:9000; credentials from the usual AWS variables). Each test gets its own
bucket. `S3Store.uri(prefix)` is the storage URI a user would pass, with the endpoint in its query."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

EXTERNAL_ENV = "EMBSWEEP_TEST_S3_ENDPOINT"
TEST_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class S3Server:
    """tests/s3_server.py in its own process: `outage()` / `restore()` keep its objects."""

    def __init__(self, log: Path, env: dict | None = None):
        self.env = {**os.environ, **(env or {})}
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.process = None

    def start(self, timeout: float = 60.0) -> "S3Server":
        script = Path(__file__).with_name("s3_server.py")
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(script), "--port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.env,
            )
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the S3 server did not start:\n{Path(self.log).read_text()[-3000:]}")
            time.sleep(0.2)
        return self

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/_embsweep/stats", timeout=2):
                return True
        except OSError:
            return False

    def outage(self) -> None:
        self._signal(signal.SIGUSR1, answering=False)

    def restore(self) -> None:
        self._signal(signal.SIGUSR2, answering=True)

    def _signal(self, sig, answering: bool) -> None:
        self.process.send_signal(sig)
        deadline = time.monotonic() + 10
        while self.answers() != answering:
            if self.process.poll() is not None or time.monotonic() > deadline:
                state = "ended" if self.process.poll() is not None else "did not change"
                raise RuntimeError(f"the S3 server {state} after {sig.name}:\n{Path(self.log).read_text()[-3000:]}")
            time.sleep(0.1)

    def stats(self) -> dict:
        with urllib.request.urlopen(self.endpoint + "/_embsweep/stats", timeout=5) as answer:
            return json.loads(answer.read())

    def reset_stats(self) -> None:
        urllib.request.urlopen(urllib.request.Request(self.endpoint + "/_embsweep/reset", method="POST"), timeout=5)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


class S3Store:
    """One bucket on the server; `env` holds what a process needs to reach it (credentials only)."""

    def __init__(self, endpoint: str, server: S3Server | None = None):
        import boto3

        self.endpoint = endpoint
        self.server = server
        self.bucket = f"embsweep-test-{uuid.uuid4().hex[:12]}"
        self.env = {**os.environ, **({} if os.environ.get(EXTERNAL_ENV) else TEST_CREDENTIALS)}
        for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            self.env.pop(key, None)
        credentials = {k: self.env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if k in self.env}
        self.client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=self.env.get("AWS_DEFAULT_REGION", "us-east-1"),
            aws_access_key_id=credentials.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=credentials.get("AWS_SECRET_ACCESS_KEY"),
        )
        self.client.create_bucket(Bucket=self.bucket)

    @property
    def host_port(self) -> str:
        return self.endpoint.split("://", 1)[1]

    def uri(self, prefix: str = "runs") -> str:
        scheme = self.endpoint.split("://", 1)[0]
        return f"s3://{self.bucket}/{prefix}?endpoint_override={self.host_port}&scheme={scheme}"

    def keys(self, prefix: str = "") -> list[str]:
        keys, token = [], None
        while True:
            kwargs = {"Bucket": self.bucket, "Prefix": prefix, **({"ContinuationToken": token} if token else {})}
            page = self.client.list_objects_v2(**kwargs)
            keys += [item["Key"] for item in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return keys
            token = page["NextContinuationToken"]

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
