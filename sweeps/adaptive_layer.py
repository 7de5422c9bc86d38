"""Adaptive layers: every layer of one model from one training run (sentence-transformers' AdaptiveLayerLoss
around TMFT's pair loss; 2D Matryoshka Sentence Embeddings), scored at every layer.

    python sweeps/adaptive_layer.py --models sentence-transformers/all-MiniLM-L6-v2 --seeds 0 --epochs 1
    python sweeps/adaptive_layer.py --smoke-test          # a one-minute check on a tiny model

Beside a TMFT layer sweep of the same model, task and budget (`sweeps/electra_layers.py`), the report
puts its per-layer curve beside TMFT's, with the compute each took (docs/methods/adaptive-layers.md).
"""

import functools

from sweeps.engine import quick_exit, runner

main = functools.partial(
    runner.main, prog="adaptive_layer", description=__doc__.split("\n\n")[0], method="adaptive-layer"
)

if __name__ == "__main__":
    quick_exit.exit_now(main())
