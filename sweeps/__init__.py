"""Sweep scripts, one per experiment family (a search space and a call to the engine), the
driver machinery they share (`sweeps.engine`), and the user commands around sweeps
(`mlflow_server`, `mlflow_sync`, `cluster_config`)."""
