"""Sentence meta-embeddings (UNSUP, SUP) and their baselines (SSE, CONC, AVG, SVD, GCCA) of frozen sources.

    python sweeps/meta_embeddings.py \
        --sources sentence-transformers/all-MiniLM-L6-v2,sentence-transformers/all-mpnet-base-v2 \
        --methods unsup,sse,conc,avg,svd,gcca,sup --seeds 0-4
    python sweeps/meta_embeddings.py --smoke-test       # two tiny random sources of different sizes

Methods x variants x seeds are trials on Ray; each source is encoded once into the stage store
(trainables/methods/meta_embeddings/token_embeddings.py) and trials read its word vectors
(trainables/methods/meta_embeddings/method.py).
"""

import functools

from sweeps.engine import quick_exit, runner

main = functools.partial(
    runner.main, prog="meta_embeddings", description=__doc__.split("\n\n")[0], method="meta-embeddings"
)

if __name__ == "__main__":
    quick_exit.exit_now(main())
