"""The content-addressed stage store: one compute per key across processes, failures leave
nothing behind, a dead computer's lock passes to a waiter, and a second store instance reuses."""

from __future__ import annotations

import fcntl
import functools
import json
import multiprocessing as mp
import os
import threading
import time
from pathlib import Path

import pytest

from trainables.core.errors import SweepInputError
from trainables.stages.store import MANIFEST, StageStore, stage_key


# Module-level helpers so spawned processes can unpickle them.
def _count_and_write(counter: str, delay: float, out_dir: Path):
    with open(counter, "a") as handle:
        handle.write(f"{os.getpid()}\n")
    time.sleep(delay)
    (out_dir / "weights.txt").write_text("trained")
    return {"computed_by": os.getpid()}


def _racer(root: str, key: str, counter: str, barrier, results, timeout) -> None:
    barrier.wait(timeout=60)
    store = StageStore(root)
    try:
        path = store.get_or_compute(
            key, functools.partial(_count_and_write, counter, 0.5), {"stage": "race"}, timeout=timeout
        )
        results.put(str(path))
    except BaseException as exc:
        results.put(f"error: {exc!r}")


def _hang(counter: str, ready: str, out_dir: Path):
    with open(counter, "a") as handle:
        handle.write(f"{os.getpid()}\n")
    (out_dir / "partial.bin").write_text("half written")
    Path(ready).touch()
    time.sleep(120)


def _hanging_computer(root: str, key: str, counter: str, ready: str) -> None:
    StageStore(root).get_or_compute(key, functools.partial(_hang, counter, ready))


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _tmp_dirs(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.name.startswith(".tmp-")]


KEY = stage_key("tiny-bert", {"stage": "dapt", "epochs": 1}, "abc123")


def test_stage_key_is_order_independent_and_sensitive():
    a = stage_key("m", {"lr": 2e-5, "epochs": 10, "nested": {"b": 1, "a": 2}}, "sum1")
    b = stage_key("m", {"nested": {"a": 2, "b": 1}, "epochs": 10, "lr": 2e-5}, "sum1")
    assert a == b and len(a) == 64
    assert stage_key("m", {"lr": 2e-5, "epochs": 11, "nested": {"b": 1, "a": 2}}, "sum1") != a
    assert stage_key("m2", {"lr": 2e-5, "epochs": 10, "nested": {"b": 1, "a": 2}}, "sum1") != a
    assert stage_key("m", {"lr": 2e-5, "epochs": 10, "nested": {"b": 1, "a": 2}}, "sum2") != a
    with pytest.raises(SweepInputError):
        stage_key("m", {"fn": object()}, "sum1")


def test_concurrent_processes_compute_once(tmp_path):
    ctx = mp.get_context("spawn")
    root, counter = tmp_path / "stages", tmp_path / "count.txt"
    n = 3
    barrier, results = ctx.Barrier(n), ctx.Queue()
    # Waiting both ways: a blocking flock (timeout None) and the polling one (timeout given).
    timeouts = [None, 60, None]
    procs = [ctx.Process(target=_racer, args=(str(root), KEY, str(counter), barrier, results, t)) for t in timeouts]
    for p in procs:
        p.start()
    paths = [results.get(timeout=90) for _ in range(n)]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert not [p for p in paths if p.startswith("error")], paths
    assert len(_lines(counter)) == 1, "the stage must be computed exactly once"
    assert len(set(paths)) == 1 and Path(paths[0]) == root / KEY
    manifest = json.loads((root / KEY / MANIFEST).read_text())
    assert manifest["complete"] is True and manifest["metadata"] == {"stage": "race"}
    assert manifest["result"]["computed_by"] == int(_lines(counter)[0])
    assert (root / KEY / "weights.txt").read_text() == "trained"
    assert _tmp_dirs(root) == []


def test_failed_compute_leaves_nothing_and_next_call_recomputes(tmp_path):
    store, counter = StageStore(tmp_path / "stages"), tmp_path / "count.txt"

    def boom(out_dir: Path):
        _count_and_write(str(counter), 0, out_dir)
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        store.get_or_compute(KEY, boom)
    assert store.lookup(KEY) is None
    assert not (store.root / KEY).exists() and _tmp_dirs(store.root) == []

    path = store.get_or_compute(KEY, functools.partial(_count_and_write, str(counter), 0))
    assert path == store.lookup(KEY) == store.root / KEY
    assert len(_lines(counter)) == 2


def test_second_store_instance_reuses(tmp_path):
    counter = tmp_path / "count.txt"
    first = StageStore(tmp_path / "stages")
    path = first.get_or_compute(KEY, functools.partial(_count_and_write, str(counter), 0), {"model": "tiny-bert"})
    second = StageStore(tmp_path / "stages")
    assert second.lookup(KEY) == path
    again = second.get_or_compute(KEY, functools.partial(_count_and_write, str(counter), 0))
    assert again == path and len(_lines(counter)) == 1
    assert second.read_manifest(KEY)["metadata"] == {"model": "tiny-bert"}
    assert second.lookup(stage_key("tiny-bert", {"stage": "dapt", "epochs": 2}, "abc123")) is None


def test_incomplete_directory_is_not_a_hit_and_is_replaced(tmp_path):
    store, counter = StageStore(tmp_path / "stages"), tmp_path / "count.txt"
    (store.root / KEY).mkdir()
    (store.root / KEY / MANIFEST).write_text(json.dumps({"complete": False}))
    assert store.lookup(KEY) is None
    store.get_or_compute(KEY, functools.partial(_count_and_write, str(counter), 0))
    assert store.lookup(KEY) is not None and len(_lines(counter)) == 1


def test_waiter_times_out_while_lock_is_held(tmp_path):
    store = StageStore(tmp_path / "stages")
    with open(store.root / f"{KEY}.lock", "w") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(TimeoutError, match="still being computed"):
            store.get_or_compute(KEY, lambda out: None, timeout=0.2)
    assert store.lookup(KEY) is None


def test_waiter_takes_over_when_computer_dies(tmp_path):
    ctx = mp.get_context("spawn")
    root, counter, ready = tmp_path / "stages", tmp_path / "count.txt", tmp_path / "ready"
    computer = ctx.Process(target=_hanging_computer, args=(str(root), KEY, str(counter), str(ready)))
    computer.start()
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline and computer.is_alive(), "the computing process never started"
            time.sleep(0.05)
        store = StageStore(root)
        outcome = {}

        def wait_and_reuse():
            try:
                outcome["path"] = store.get_or_compute(
                    KEY, functools.partial(_count_and_write, str(counter), 0), timeout=60
                )
            except BaseException as exc:  # surfaced by the assertions below
                outcome["error"] = exc

        waiter = threading.Thread(target=wait_and_reuse)
        waiter.start()
        time.sleep(0.3)
        assert waiter.is_alive(), "the waiter must block while the stage is being computed"
        assert len(_tmp_dirs(root)) == 1
    finally:
        computer.kill()
        computer.join(timeout=30)
    waiter.join(timeout=60)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["path"] == root / KEY
    assert len(_lines(counter)) == 2  # the dead attempt and the takeover
    assert (root / KEY / "weights.txt").exists() and not (root / KEY / "partial.bin").exists()
    assert _tmp_dirs(root) == []
