"""Everything a single trial needs, in layers that import only downwards:

- `core`: the method contract, registries, errors, the MLflow run schema, paths and endpoint checks;
- `data`: readers of the released datasets;
- `encoders`: loading, truncating and pooling encoders, their cost model, tiny test models;
- `evaluation`: metrics, evaluation sets and zero-shot embeddings;
- `training`: the trial base class, precision, batching, pair tasks and the pair training loop;
- `stages`: the content-addressed store of upstream stages and their execution;
- `methods`: one package per method, each registering itself on import (`trainables.methods`).
"""
