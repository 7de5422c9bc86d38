"""Sweep scripts (one per experiment family) and the machinery they share: the command line
(`sweeps.cli`) and running, resuming and reporting a sweep on Ray Tune (`sweeps.runner`)."""
