"""Sentence meta-embeddings: UNSUP and its baselines SSE, CONC, AVG, SVD, GCCA, SUP."""

from trainables.methods.meta_embeddings import method  # noqa: F401  (registration)
