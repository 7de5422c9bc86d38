"""TSDAE and its unsupervised baselines (MLM, SimCSE, CT), and the `tsdae` stage kind."""
