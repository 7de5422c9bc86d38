"""Encoders: find a model (hub id, local folder or `runs:/` reference), build it truncated to a layer,
pool it, price it (`cost`), save it as a sentence-transformers folder, and tiny random test models."""
