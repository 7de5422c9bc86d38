"""Share CI's long tests out between its two lanes, whole files at a time, by their measured durations:
`python .ci/split.py DURATIONS LANE` prints the pytest arguments of that lane (1 or 2).

Whole files, because a file's module-scoped fixtures (a sweep, a two-node Ray, a server) and its imports run
once in each lane that has one of its tests. A file's weight is the sum of its tests' durations in DURATIONS
(`.ci/test-durations.json`, pytest-split's format: {test id: seconds}); each lane starts with the time of the
steps it runs after its tests (the keys `ci::lane N after its tests`, measured by `.ci/run` in its last run), and
each file, the heaviest first, goes to the lane with less time so far. Lane 2 gets its files by name; lane 1 gets
every other test file (`--ignore` of lane 2's), so a test file that has no duration yet runs in lane 1."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

TAIL_KEY = "ci::lane {} after its tests"


def shares(durations: dict[str, float], root: Path) -> tuple[list[str], list[str]]:
    """(lane 1's files, lane 2's files) of the test files that exist under `root`."""
    weights = Counter()
    for test, seconds in durations.items():
        path = test.split("::", 1)[0]
        if not test.startswith("ci::") and (root / path).is_file():
            weights[path] += seconds
    load = [durations.get(TAIL_KEY.format(1), 0.0), durations.get(TAIL_KEY.format(2), 0.0)]
    lanes: list[list[str]] = [[], []]
    for path, seconds in sorted(weights.items(), key=lambda item: (-item[1], item[0])):
        lane = 0 if load[0] <= load[1] else 1
        lanes[lane].append(path)
        load[lane] += seconds
    return sorted(lanes[0]), sorted(lanes[1])


def main(argv: list[str]) -> int:
    durations_path, lane = argv
    root = Path(__file__).resolve().parents[1]
    first, second = shares(json.loads(Path(durations_path).read_text()), root)
    print(" ".join(second if lane == "2" else [f"--ignore={path}" for path in second]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
