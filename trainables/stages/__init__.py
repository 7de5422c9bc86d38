"""Upstream stages: the content-addressed store (`store`), the registry of stage kinds and their
execution (`upstream`), and progress reports a driver reads while a stage runs (`progress`). Each
stage kind is registered by the package that owns it."""
