"""CI's share of the long tests between its two lanes (.ci/split.py): whole files, each to the lane with less time
so far, each lane starting with the time of its steps after the tests; lane 2 names its files, lane 1 ignores them."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_split():
    spec = importlib.util.spec_from_file_location("ci_split", ROOT / ".ci" / "split.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def files(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")


def test_files_stay_whole_and_go_heaviest_first_to_the_lane_with_less_time(tmp_path):
    split = load_split()
    files(tmp_path, "tests/test_a.py", "tests/test_b.py", "tests/test_c.py", "tests/test_d.py")
    durations = {
        "tests/test_a.py::one": 50.0,
        "tests/test_a.py::two": 50.0,  # a: 100 in all, more than b although b has the longest test
        "tests/test_b.py::one": 80.0,
        "tests/test_c.py::one": 30.0,
        "tests/test_d.py::one": 25.0,
        "tests/test_gone.py::one": 500.0,  # a file no longer there
        split.TAIL_KEY.format(1): 0.0,
        split.TAIL_KEY.format(2): 60.0,  # lane 2's steps after its tests
    }
    first, second = split.shares(durations, tmp_path)
    # a (100) to lane 1 (0 < 60); b (80) to lane 2 (60 < 100); c (30) to lane 1 (100 < 140); d (25) to lane 1
    assert first == ["tests/test_a.py", "tests/test_c.py", "tests/test_d.py"]
    assert second == ["tests/test_b.py"]


def test_without_lane_times_the_first_file_goes_to_lane_1(tmp_path):
    split = load_split()
    files(tmp_path, "tests/test_a.py", "tests/test_b.py")
    assert split.shares({"tests/test_a.py::x": 2.0, "tests/test_b.py::x": 1.0}, tmp_path) == (
        ["tests/test_a.py"],
        ["tests/test_b.py"],
    )


def test_the_committed_durations_split_every_file_once_and_evenly():
    split = load_split()
    durations = json.loads((ROOT / ".ci" / "test-durations.json").read_text())
    first, second = split.shares(durations, ROOT)
    assert not set(first) & set(second)
    named = {test.split("::")[0] for test in durations if not test.startswith("ci::")}
    assert set(first) | set(second) == {path for path in named if (ROOT / path).is_file()}
    load = [
        durations.get(split.TAIL_KEY.format(lane), 0.0)
        + sum(s for t, s in durations.items() if t.split("::")[0] in share)
        for lane, share in ((1, first), (2, second))
    ]
    heaviest_file = max(sum(s for t, s in durations.items() if t.split("::")[0] == path) for path in first + second)
    assert abs(load[0] - load[1]) <= heaviest_file


def test_the_command_prints_lane_2s_files_and_lane_1s_ignores():
    durations = ROOT / ".ci" / "test-durations.json"
    run = lambda lane: subprocess.run(  # noqa: E731
        [sys.executable, ".ci/split.py", str(durations), lane], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    first, second = load_split().shares(json.loads(durations.read_text()), ROOT)
    assert run("2") == second
    assert run("1") == [f"--ignore={path}" for path in second]
