"""Whether a SQLite MLflow store keeps pace with a sweep's writes: a one-line warning, with the fix, where not.

The driver's writer thread (sweeps/engine/tracking.py) writes every trial's MLflow records one after
another: the child run, RUNNING, one write per epoch, the checkpoint tag, FINISHED (at most `EXTRA_WRITES`
+ epochs a trial; consecutive writes of one run are merged, so this counts high). On a SQLite store a write
took `SQLITE_WRITE_S` (measured: 224 writes of 32 three-epoch trials, 65 ms each, on the 2-core shared
development machine; docs/cluster.md, "Faults at scale"), so the store takes about 15 writes a second. A
sweep whose trials at once need more than that finishes its trials faster than it can log them: its
runs in MLflow fall behind its trials, and the writes still queued when it ends hold its end up.
PostgreSQL (or a tracking server in front of it) is the fix."""

from __future__ import annotations

from statistics import median

SQLITE_WRITE_S = 0.065
EXTRA_WRITES = 4  # the run, RUNNING, the checkpoint tag, FINISHED
AT_SCALE = 16  # trials at once on a cluster (--address) from which the engine checks; fewer never outpace it


def sqlite_warning(mlflow_uri: str, at_once: int, epochs: int, trial_seconds: list[float]) -> str | None:
    """The warning for a SQLite store that cannot take the writes of `at_once` trials of about
    median(`trial_seconds`) s each, or None (another store, or one that keeps pace)."""
    if not str(mlflow_uri).startswith("sqlite:") or not trial_seconds or at_once < 1:
        return None
    seconds = max(median(trial_seconds), 1e-3)
    needed = at_once * (max(1, epochs) + EXTRA_WRITES) / seconds
    takes = 1 / SQLITE_WRITE_S
    if needed <= takes:
        return None
    fits = max(1, int(takes * seconds / (max(1, epochs) + EXTRA_WRITES)))
    return (
        f"warning: --mlflow-uri {mlflow_uri}: {at_once} trials at once of about {seconds:.3g} s need about "
        f"{needed:.0f} MLflow writes a second and a SQLite store takes about {takes:.0f}, so its runs in MLflow "
        "will fall behind its trials: use PostgreSQL (pip install -e '.[postgres]'; "
        "--mlflow-uri postgresql://user@host:5432/db) "
        f"or --max-concurrent {fits}"
    )


def warn_if_outpaced(plan, resources) -> None:
    """Print `sqlite_warning`'s line for a sweep on a cluster (`--address`) with `AT_SCALE` or more trials
    at once, from each trial's predicted (or, with `--simulate`, simulated) seconds."""
    import sys

    from sweeps.engine import simulate

    args = plan.args
    at_once = min(len(plan.configs), args.get("max_concurrent") or len(plan.configs))
    if not args.get("address") or at_once < AT_SCALE:
        return
    if args.get("simulate"):
        sim = simulate.simulation(plan, resources)
        seconds = [sim.wait(c) for c in plan.configs]
    else:
        seconds = [resources.seconds(c) for c in plan.configs if resources.seconds(c) > 0]
    warning = sqlite_warning(plan.mlflow_uri, at_once, int(args.get("epochs") or 1), seconds)
    if warning:
        print(warning, file=sys.stderr, flush=True)
