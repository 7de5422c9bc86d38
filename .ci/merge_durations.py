"""Merge the lanes' test durations (pytest-split's `--store-durations` files, each a copy of the committed
`.ci/test-durations.json` updated with the tests its lane ran) into one, printed as JSON:
`python .ci/merge_durations.py BASE LANE...`. A test's duration is the one a lane measured, else the base's."""

import json
import sys

base_path, *lane_paths = sys.argv[1:]
with open(base_path) as handle:
    base = json.load(handle)
merged = dict(base)
for path in lane_paths:
    try:
        with open(path) as handle:
            lane = json.load(handle)
    except FileNotFoundError:  # a lane that ended before its first step
        continue
    merged.update({test: seconds for test, seconds in lane.items() if base.get(test) != seconds})
print(json.dumps(merged, sort_keys=True, indent=4))
