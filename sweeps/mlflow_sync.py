"""Upload MLflow writes that a sweep spooled while its tracking store was unreachable.

    python -m sweeps.mlflow_sync runs/<sweep>/mlflow-spool.jsonl
    python -m sweeps.mlflow_sync runs/<sweep>/mlflow-spool.jsonl --mlflow-uri http://127.0.0.1:5001

The spool holds the writes in order (run creation, per-epoch metrics, params, tags, status
changes), each naming its run by parent run id and config hash. Replaying finds or creates each
child run under its parent and skips metric steps the run already has, so it is safe to run more
than once and after a partial upload. The file is removed once everything is sent; if the store
fails again midway, what was not sent stays in it. Exit status: 0 all sent, 1 some left, 2 bad input.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from sweeps.engine.mlflow_writes import SPOOL_FILE, MlflowWriter, read_spool, recover_queued


class RefusedWrite(RuntimeError):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sweeps.mlflow_sync", description=__doc__.split("\n\n")[0])
    parser.add_argument("spool", help=f"the spool file ({SPOOL_FILE}) or the sweep directory that holds it")
    parser.add_argument(
        "--mlflow-uri", default=None, help="send to this store instead of the one the writes were meant for"
    )
    return parser


def sync(spool: Path, mlflow_uri: str | None = None, stream=None) -> int:
    """Replay `spool`; returns the number of operations still spooled."""
    ops = read_spool(spool)
    if not ops:
        print(f"{spool}: nothing to upload.", file=stream or sys.stdout)
        return 0
    uris = {op.get("uri") for op in ops} - {None}
    uri = mlflow_uri or (uris.pop() if len(uris) == 1 else None)
    if uri is None:
        raise ValueError(f"{spool}: the writes name {len(uris)} stores; pick one with --mlflow-uri")
    writer = MlflowWriter(uri, spool, stream=io.StringIO())  # its sweep-time warnings don't apply here
    if writer.drain():
        print(f"Uploaded {len(ops)} spooled MLflow write(s) to {uri}; removed {spool}.", file=stream or sys.stdout)
        return 0
    left = writer.pending()
    if writer.refused:
        raise RefusedWrite(f"{uri} refused a spooled write ({writer.refused}); {left} write(s) left in {spool}")
    print(
        f"{uri} is still unreachable: {left} of {len(ops)} write(s) left in {spool}; run this command again later.",
        file=stream or sys.stdout,
    )
    return left


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    spool = Path(args.spool)
    if spool.is_dir():
        spool = spool / SPOOL_FILE
    recover_queued(spool)  # writes a killed driver had queued but not sent
    if not spool.is_file():
        print(f"error: {spool} does not exist (nothing was spooled, or it was uploaded already)", file=sys.stderr)
        return 2
    try:
        left = sync(spool, args.mlflow_uri)
    except (ValueError, RefusedWrite) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
