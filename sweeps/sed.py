"""Sentence ensemble distillation (SED): a student distilled to the mean embedding of an ensemble of teachers.

    python sweeps/sed.py --teachers sweep:tmft-minilm:layer=6 \
        --student sentence-transformers/all-MiniLM-L6-v2 --seeds 0-4
    python sweeps/sed.py --teachers M1,M2,M3 --student M --corpus sentences.txt --seeds 0-2
    python sweeps/sed.py --smoke-test                 # tiny random teachers and student, in about a minute

The ensemble's targets are computed once per (teachers, poolings, corpus) as a stage in the stage
store and reused by every student seed and later sweep (trainables/methods/sed/method.py). Each teacher, the
ensemble itself and each student seed are a run; the report's table of the sweep is the paper's
stability table. `--help` lists every flag.
"""

import functools

from sweeps.engine import quick_exit, runner

main = functools.partial(runner.main, prog="sed", description=__doc__.split("\n\n")[0], method="sed")

if __name__ == "__main__":
    quick_exit.exit_now(main())
