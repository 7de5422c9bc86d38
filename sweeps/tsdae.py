"""TSDAE and its unsupervised baselines (MLM, SimCSE, Contrastive Tension) on unlabelled sentences.

    python sweeps/tsdae.py --models sentence-transformers/all-MiniLM-L6-v2 --objective tsdae,mlm,simcse,ct --seeds 0-2
    python sweeps/tsdae.py --corpus sentences.txt --steps 2000 --eval-steps 500
    python sweeps/tsdae.py --smoke-test                                     # a tiny random model, every objective

Models x objectives x seeds are trials on Ray (one MLflow run each); STS-B dev every --eval-steps,
the best kept, the evaluation suite on it at the end (trainables/methods/tsdae/method.py). `--help` lists every flag.
"""

import functools

from sweeps.engine import quick_exit, runner

main = functools.partial(runner.main, prog="tsdae", description=__doc__.split("\n\n")[0], method="tsdae")

if __name__ == "__main__":
    quick_exit.exit_now(main())
