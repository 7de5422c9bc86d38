"""TSDAE and its unsupervised baselines (MLM, SimCSE, CT)."""

from trainables.methods.tsdae import method  # noqa: F401  (registration)
