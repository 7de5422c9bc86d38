"""The contract between methods and the sweep engine (`method`), the registries that name things by
string, user-input errors, the MLflow run schema, where data lives, fault injection and the checks of
the endpoints a sweep talks to. Imports nothing else of the project."""
