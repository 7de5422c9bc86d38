"""Zero-shot evaluation of any encoder on STS12-16, STS-B and SICK-R, as the papers report it.

    python sweeps/evaluate.py --models sentence-transformers/all-MiniLM-L6-v2              # last layer, its own pooling
    python sweeps/evaluate.py --models M1,DIR,runs:/<run id> --layers all --pooling mean,cls \
        --sets sts12,sts13,sts14,stsb,sickr
    python sweeps/evaluate.py --smoke-test              # a tiny random model, in seconds

Models x poolings x layers are trials on Ray (one MLflow run each, under one parent run per
sweep); all of a model's layers come from one forward pass (trainables/methods/evaluate/method.py). `--help`
lists every flag.
"""

import functools

from sweeps.engine import quick_exit, runner

main = functools.partial(runner.main, prog="evaluate", description=__doc__.split("\n\n")[0], method="evaluate")

if __name__ == "__main__":
    quick_exit.exit_now(main())
