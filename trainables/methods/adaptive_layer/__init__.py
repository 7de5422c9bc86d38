"""Adaptive layers: one model whose every layer is usable, trained with sentence-transformers' AdaptiveLayerLoss."""
