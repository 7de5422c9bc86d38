"""Evaluation: correlations and best-dev bookkeeping (`metrics`), the registered evaluation sets
(`sets`), pooled embeddings of every layer from one forward pass (`zero_shot`) and the stage that
caches them (`layer_embeddings`)."""
