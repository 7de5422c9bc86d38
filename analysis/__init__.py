"""Analysis: MLflow runs -> one tidy DataFrame -> summaries, layer curves, Pareto fronts,
the ELECTRA paper's tables, and linear CKA between models' layers.

Everything reads MLflow through `analysis.loader.load_runs` (one row per trial run). The
command line is `python -m analysis report ...` and `python -m analysis cka ...`.
"""

from analysis.loader import AnalysisError, load_runs

__all__ = ["AnalysisError", "load_runs"]
