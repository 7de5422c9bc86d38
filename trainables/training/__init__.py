"""Training shared by methods: the Ray Tune trial base class (`trainable`), numeric precision and the
optimiser, token batches, pair tasks and the pair fine-tuning loop (importable without Ray)."""
