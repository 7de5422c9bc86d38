"""The stage store on an S3-compatible object store (the tests' moto server): one compute per key among
concurrent callers, a dead claimer's stage taken over, failures leave nothing committed, readers get a
verified local copy, and the executions log and progress records live in the bucket."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from trainables.core import object_storage, verified_copies
from trainables.core.errors import SweepInputError
from trainables.core.object_storage import StorageUnavailable
from trainables.stages.manifest import MANIFEST
from trainables.stages.object_store import CLAIM_TTL_ENV, ObjectStageStore
from trainables.stages.progress import StageProgress, clear_progress, read_progress
from trainables.stages.store import local_stage, open_store, stage_key, stage_root
from trainables.stages.upstream import append_execution, read_executions

KEY = stage_key("tiny-bert", {"stage": "dapt", "epochs": 1}, "abc123")


class Counting:
    """A compute_fn that counts its calls and writes a small stage (an encoder folder and a params file)."""

    def __init__(self, delay: float = 0.0, fail: bool = False):
        self.delay, self.fail, self.calls = delay, fail, 0
        self.lock = threading.Lock()

    def __call__(self, out_dir: Path) -> dict:
        with self.lock:
            self.calls += 1
        (out_dir / "encoder").mkdir()
        (out_dir / "encoder" / "model.bin").write_bytes(b"\x01\x02" * 512)
        (out_dir / "params.json").write_text(json.dumps({"1": 100}))
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("out of memory")
        return {"computed": True}


def _claim(s3, number: int, heartbeat: float) -> None:
    record = {"host": "elsewhere", "pid": 1, "attempt": "deadbeef", "claimed": heartbeat, "heartbeat": heartbeat}
    s3.client.put_object(Bucket=s3.bucket, Key=f"stages/{KEY}.claim.{number}", Body=json.dumps(record).encode())


def _attempts(s3) -> set[str]:
    return {k.split("/")[2] for k in s3.keys(f"stages/{KEY}/") if k.count("/") >= 3 and k.split("/")[2]}


def test_concurrent_calls_compute_once_and_a_second_store_reuses(s3):
    root, compute = s3.uri("stages"), Counting(delay=0.5)
    barrier, results = threading.Barrier(3), []

    def race():
        barrier.wait(timeout=30)
        try:
            results.append(ObjectStageStore(root).get_or_compute(KEY, compute, {"stage": "race"}, timeout=30))
        except BaseException as error:  # surfaced by the assertion below
            results.append(error)

    threads = [threading.Thread(target=race) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == [object_storage.join(root, KEY)] * 3
    assert compute.calls == 1, "the stage must be computed exactly once"

    manifest = json.loads(s3.read(f"stages/{KEY}/{MANIFEST}"))
    assert manifest["complete"] is True and manifest["metadata"] == {"stage": "race"}
    assert manifest["result"] == {"computed": True}
    assert set(manifest["files"]) == {"encoder/model.bin", "params.json"}
    assert _attempts(s3) == {manifest["attempt"]}
    assert s3.read(f"stages/{KEY}/{manifest['attempt']}/params.json") == b'{"1": 100}'
    assert json.loads(s3.read(f"stages/{KEY}.claim.1"))["released"] is True
    assert f"stages/{KEY}.claim.2" not in s3.keys("stages/")

    again = Counting(fail=True)
    second = open_store(root)
    assert isinstance(second, ObjectStageStore) and second.lookup(KEY) == object_storage.join(root, KEY)
    assert second.get_or_compute(KEY, again) == object_storage.join(root, KEY) and again.calls == 0
    assert second.read_manifest(KEY)["attempt"] == manifest["attempt"]


def test_a_live_claim_makes_callers_wait_and_a_dead_one_is_taken_over(s3, monkeypatch):
    monkeypatch.setenv(CLAIM_TTL_ENV, "1")
    store, compute = ObjectStageStore(s3.uri("stages")), Counting()
    _claim(s3, 1, time.time())  # a claimer that is computing, then dies
    s3.client.put_object(Bucket=s3.bucket, Key=f"stages/{KEY}/deadbeef/partial.bin", Body=b"half written")
    with pytest.raises(TimeoutError, match="still being computed"):
        store.get_or_compute(KEY, compute, timeout=0.3)
    assert compute.calls == 0 and store.lookup(KEY) is None

    started = time.monotonic()
    assert store.get_or_compute(KEY, compute, timeout=20) == object_storage.join(s3.uri("stages"), KEY)
    assert time.monotonic() - started < 10 and compute.calls == 1
    taker = json.loads(s3.read(f"stages/{KEY}.claim.2"))
    assert taker["released"] is True and taker["attempt"] == store.read_manifest(KEY)["attempt"]
    assert _attempts(s3) == {taker["attempt"]}, "the dead attempt's upload is discarded"


def test_a_claim_with_an_old_heartbeat_is_taken_over_at_once(s3, monkeypatch):
    monkeypatch.setenv(CLAIM_TTL_ENV, "30")
    _claim(s3, 1, time.time() - 120)
    _claim(s3, 2, time.time() - 60)  # a taker that died too: the highest number is the current claim
    compute = Counting()
    ObjectStageStore(s3.uri("stages")).get_or_compute(KEY, compute, timeout=5)
    assert compute.calls == 1 and json.loads(s3.read(f"stages/{KEY}.claim.3"))["released"] is True


def test_a_failed_compute_commits_nothing_and_the_next_call_recomputes_at_once(s3):
    store = ObjectStageStore(s3.uri("stages"))
    with pytest.raises(RuntimeError, match="out of memory"):
        store.get_or_compute(KEY, Counting(fail=True))
    assert store.lookup(KEY) is None and s3.keys(f"stages/{KEY}/") == []
    compute = Counting()
    store.get_or_compute(KEY, compute, timeout=5)  # the released claim needs no TTL to pass
    assert compute.calls == 1 and store.lookup(KEY) is not None


def test_callers_keep_polling_while_the_store_does_not_answer(s3, monkeypatch):
    store, compute = ObjectStageStore(s3.uri("stages")), Counting()
    real, failures = object_storage.read_json, iter(range(4))

    def flaky(location):
        if next(failures, None) is not None:
            raise StorageUnavailable("the object store did not answer")
        return real(location)

    monkeypatch.setattr(object_storage, "read_json", flaky)
    with pytest.raises(TimeoutError):
        store.get_or_compute(KEY, compute, timeout=0.05)
    assert store.get_or_compute(KEY, compute, timeout=20) == object_storage.join(s3.uri("stages"), KEY)
    assert compute.calls == 1


def test_local_stage_is_a_verified_copy_and_refuses_a_changed_stage(s3, tmp_path, monkeypatch):
    root = s3.uri("stages")
    location = ObjectStageStore(root).get_or_compute(KEY, Counting())
    assert local_stage(tmp_path) == tmp_path  # a local stage is read where it is
    with pytest.raises(SweepInputError, match="no finished stage"):
        local_stage(object_storage.join(root, "0" * 64))

    monkeypatch.setenv(verified_copies.CACHE_ENV, str(tmp_path / "cache"))
    copy = local_stage(location)
    assert copy.is_relative_to(tmp_path / "cache") and local_stage(location) == copy
    assert (copy / "encoder" / "model.bin").read_bytes() == b"\x01\x02" * 512
    manifest = json.loads((copy / MANIFEST).read_text())
    assert manifest["complete"] is True and manifest["key"] == KEY
    assert sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()) == [
        "encoder/model.bin",
        "params.json",
        MANIFEST,
    ]

    s3.client.put_object(Bucket=s3.bucket, Key=f"stages/{KEY}/{manifest['attempt']}/params.json", Body=b'{"1": 999}')
    monkeypatch.setenv(verified_copies.CACHE_ENV, str(tmp_path / "another-node"))
    with pytest.raises(SweepInputError, match="does not match"):
        local_stage(location)


def test_stage_root_takes_an_s3_storage_path_and_keeps_its_query(s3):
    assert stage_root(None, s3.uri("runs")) == s3.uri("runs/stages")
    assert stage_root(s3.uri("shared-stages"), "/elsewhere") == s3.uri("shared-stages")
    with pytest.raises(SweepInputError, match="credentials"):
        stage_root(None, s3.uri("runs") + "&secret_key=x")


def test_executions_and_progress_are_objects_in_the_bucket(s3):
    root = s3.uri("stages")
    append_execution(root, {"key": KEY, "kind": "dapt", "finished": 2.0})
    append_execution(root, {"key": KEY, "kind": "ws", "finished": 1.0})
    assert [e["kind"] for e in read_executions(root)] == ["ws", "dapt"]
    assert len(s3.keys("stages/executions/")) == 2 and not [k for k in s3.keys() if k.endswith(".jsonl")]

    spec = {"root": root, "key": KEY}
    progress = StageProgress(spec, total=10)
    progress.step(3)
    assert read_progress(spec)["done"] == 3 and f"stages/{KEY}.progress.json" in s3.keys()
    clear_progress(spec)
    assert read_progress(spec) is None


def test_a_committed_manifest_whose_attempt_is_no_id_is_refused(s3):
    """The attempt id becomes part of a path: a stage.json edited to point elsewhere is refused."""
    store = ObjectStageStore(s3.uri("stages"))
    store.get_or_compute(KEY, lambda out: (out / "w.txt").write_text("x"))
    key = f"stages/{KEY}/{MANIFEST}"
    manifest = json.loads(s3.read(key))
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=json.dumps({**manifest, "attempt": "../../elsewhere"}))
    with pytest.raises(SweepInputError, match="is not one this store writes"):
        local_stage(store.path(KEY))
