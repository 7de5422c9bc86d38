"""TMFT layer sweep (ELECTRA paper, Figure 2 and Table 2): models x layers 0..L x seeds on STS-B.

    python sweeps/electra_layers.py                       # the paper's grid (needs the model hub)
    python sweeps/electra_layers.py --smoke-test          # a one-minute check on a tiny model
    python sweeps/electra_layers.py --models sentence-transformers/all-MiniLM-L6-v2 --seeds 0

Defaults are the paper's: ELECTRA-base discriminator and generator and BERT-base-cased, every
layer, seeds 0-4, 10 epochs, batch 32, lr 2e-5 (docs/methods/electra.md M1; trainables/methods/tmft/method.py). `--help`
lists every flag.
"""

import functools

from sweeps.engine import quick_exit, runner

main = functools.partial(runner.main, prog="electra_layers", description=__doc__.split("\n\n")[0], method="tmft")

if __name__ == "__main__":
    quick_exit.exit_now(main())
