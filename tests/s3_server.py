"""A real S3 server over HTTP for the tests: moto's server (the S3 API as AWS answers it) in its own
process, on 127.0.0.1:<port>, with two additions a test needs and moto's own command lacks:

- an outage that keeps the buckets: SIGUSR1 closes the listening socket (connections are refused,
  as when a server is down), SIGUSR2 opens it again on the same port with the same objects;
- counts of what clients sent: GET /_embsweep/stats answers {"requests": {method: n}, "bytes_in",
  "bytes_out"}; POST /_embsweep/reset sets them to zero.

    python tests/s3_server.py --port 9321
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections import Counter

STATS = {"requests": Counter(), "bytes_in": 0, "bytes_out": 0}
LOCK = threading.Lock()


class CountingInput:
    """The request body as the server reads it (chunked uploads carry no Content-Length)."""

    def __init__(self, stream):
        self.stream = stream

    def _counted(self, data):
        with LOCK:
            STATS["bytes_in"] += len(data)
        return data

    def read(self, *args):
        return self._counted(self.stream.read(*args))

    def readline(self, *args):
        return self._counted(self.stream.readline(*args))

    def __iter__(self):
        return (self._counted(line) for line in self.stream)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def counting(app):
    def wrapped(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/_embsweep/stats":
            with LOCK:
                body = json.dumps({**STATS, "requests": dict(STATS["requests"])}).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        if path == "/_embsweep/reset":
            with LOCK:
                STATS.update(requests=Counter(), bytes_in=0, bytes_out=0)
            start_response("200 OK", [("Content-Length", "0")])
            return [b""]
        with LOCK:
            STATS["requests"][environ.get("REQUEST_METHOD", "?")] += 1
        environ["wsgi.input"] = CountingInput(environ["wsgi.input"])
        chunks = app(environ, start_response)
        out = []
        for chunk in chunks:
            out.append(chunk)
            with LOCK:
                STATS["bytes_out"] += len(chunk)
        return out

    return wrapped


def main() -> int:
    # SIGUSR1/2 are taken by sigwait in the main thread: blocked here, before any thread starts, so that every
    # thread inherits the mask. (With Python handlers instead, a signal the kernel hands to a request thread
    # waits for the main thread to run bytecode, and a main thread asleep in a wait never does.)
    outage_signals = {signal.SIGUSR1, signal.SIGUSR2}
    signal.pthread_sigmask(signal.SIG_BLOCK, outage_signals)
    from moto.moto_server.threaded_moto_server import MotoRequestHandler
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = counting(DomainDispatcherApplication(create_backend_app))

    def start():
        serving = make_server("127.0.0.1", args.port, app, threaded=True, request_handler=MotoRequestHandler)
        threading.Thread(target=serving.serve_forever, daemon=True).start()
        return serving

    server = start()
    print(f"s3 server on 127.0.0.1:{args.port}", flush=True)
    while True:
        received = signal.sigwait(outage_signals)
        if received == signal.SIGUSR1 and server is not None:
            server.shutdown()
            server.server_close()  # the listening socket closed: connections are refused
            server = None
        elif received == signal.SIGUSR2 and server is None:
            server = start()


if __name__ == "__main__":
    sys.exit(main())
