"""WS+TMFT and DAPT+TMFT (ELECTRA paper, Table 1): upstream stages, then a TMFT layer sweep from them.

    python sweeps/improvements.py                                 # the paper's models, both improvements
    python sweeps/improvements.py --smoke-test                    # a few minutes on a tiny model
    python sweeps/improvements.py --improvement dapt --models sentence-transformers/all-MiniLM-L6-v2 --seeds 0

The same models x layers x seeds and flags as electra_layers.py, plus `--improvement ws|dapt|both`
and the stage settings (`--ws-*`, `--dapt-*`; defaults from docs/methods/electra.md M2 and M3). Each stage (WS:
one per model and layer, seed 0; DAPT: one per model) is computed once into the stage store
`<storage-path>/stages/` and reused by every trial and every later sweep that needs it
(trainables/methods/tmft/improvements.py). `--help` lists every flag.
"""

import functools

from sweeps.engine import quick_exit, runner

main = functools.partial(runner.main, prog="improvements", description=__doc__.split("\n\n")[0], method="improvements")

if __name__ == "__main__":
    quick_exit.exit_now(main())
