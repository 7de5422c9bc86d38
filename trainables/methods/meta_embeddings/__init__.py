"""Sentence meta-embeddings: UNSUP and its baselines SSE, CONC, AVG, SVD, GCCA, SUP, and the
`token-embeddings` stage kind."""
