"""SED with cached targets against students that each recompute the teachers' targets, in one run.

Both ways train the same S student seeds in this process (the SED trial's own code, without Ray):
- cached: the targets stage is computed once and every student reads it (what `sweeps/sed.py` does);
- recomputed: every student first computes the ensemble's targets itself.
Printed: seconds of the teacher part and of the whole, each way, and their ratios.

    python benchmarks/sed_targets.py                          # tiny random teachers and student, 3 seeds
    python benchmarks/sed_targets.py --teachers M1,M2,M3 --student M --seeds 0,1,2 --max-sentences 2000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from benchmarks import results_file  # noqa: E402
from sweeps.engine.runner import parser_for  # noqa: E402
from trainables.core.method import PlanContext  # noqa: E402
from trainables.methods.sed.method import SED
from trainables.methods.sed.targets import compute
from trainables.methods.sed.trainable import SEDTrainable


def train_student(config: dict, data) -> float:
    trial = SEDTrainable.__new__(SEDTrainable)  # the trial's own code, without Ray's actor lifecycle
    trial.setup(config, data=data)
    result = {"done": False}
    while not result["done"]:
        result = trial.step()
    return result["mean_spearman"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teachers", default="", help="default: the smoke test's tiny random teachers")
    parser.add_argument("--student", default=None)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--max-sentences", type=int, default=2000)
    results_file.add_flag(parser, "sed_targets")
    args = parser.parse_args(argv)
    storage = tempfile.mkdtemp(prefix="sed-bench-")
    flags = [
        "--seeds",
        args.seeds,
        "--max-sentences",
        str(args.max_sentences),
        "--storage-path",
        storage,
        "--sets",
        "stsb,sickr",
    ]
    if args.teachers:
        flags += ["--teachers", args.teachers, *(["--student", args.student] if args.student else [])]
    sweep_args = parser_for("sed").parse_args(flags)
    sweep_args.smoke_test = not args.teachers
    plan = SED.plan(sweep_args, PlanContext(storage, f"sqlite:///{storage}/mlflow.db", smoke_test=not args.teachers))
    (spec,) = plan.stages.values()
    students = [c for c in plan.configs if c["member"] == "student"]
    print(
        f"{len(spec['teacher_paths'])} teachers, {len(students)} student seeds, {plan.configs[0]['sentences']} "
        "sentences\n"
    )

    timings = {}
    for way in ("cached", "recomputed"):
        teacher_s, started = 0.0, time.perf_counter()
        for index, config in enumerate(students):
            if way == "recomputed" or index == 0:
                out = Path(tempfile.mkdtemp(dir=storage))
                stage_started = time.perf_counter()
                compute({**spec, "root": str(out.parent), "key": out.name}, out)
                teacher_s += time.perf_counter() - stage_started
            score = train_student({**config, "_upstream_path": str(out)}, plan.data)
            print(f"  {way}: student seed {config['seed']} mean Spearman {score:.2f}", flush=True)
        timings[way] = (teacher_s, time.perf_counter() - started)
    (cached_teachers, cached_total), (re_teachers, re_total) = timings["cached"], timings["recomputed"]
    print(
        f"\nteacher part: cached {cached_teachers:.1f} s, recomputed {re_teachers:.1f} s: "
        f"{re_teachers / cached_teachers:.2f}x"
    )
    print(f"whole sweep:  cached {cached_total:.1f} s, recomputed {re_total:.1f} s: {re_total / cached_total:.2f}x")
    results_file.write(
        args.results_json,
        "sed_targets",
        ["part", "cached", "recomputed", "recomputed / cached"],
        [
            [
                "the teachers' targets",
                f"{cached_teachers:.1f} s",
                f"{re_teachers:.1f} s",
                f"{re_teachers / cached_teachers:.2f}x",
            ],
            ["the whole sweep", f"{cached_total:.1f} s", f"{re_total:.1f} s", f"{re_total / cached_total:.2f}x"],
        ],
        summary=f"{len(spec['teacher_paths'])} teachers, {len(students)} student seeds, "
        f"{plan.configs[0]['sentences']} sentences, in this process.",
    )


if __name__ == "__main__":
    main()
