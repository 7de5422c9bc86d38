"""The tool's MLflow experiments declare themselves model-training experiments (tag
`mlflow.experimentKind`), so MLflow 3's UI opens them on their training runs, not in GenAI mode;
the browser test (tests/test_mlflow_ui_browser.py) shows the page it opens."""

import shutil

from analysis_helpers import shared_store
from mlflow import MlflowClient

from sweeps.engine.tracking import ensure_experiment
from trainables.core.schema import EXPERIMENT_KIND_TAGS

KIND = "mlflow.experimentKind"


def test_experiments_are_created_and_kept_as_model_training_ones(tmp_path_factory, tmp_path):
    assert EXPERIMENT_KIND_TAGS == {KIND: "custom_model_development"}  # the UI's "custom model development"
    uri = f"sqlite:///{shutil.copy(shared_store(tmp_path_factory).path, tmp_path / 'mlflow.db')}"  # tables made
    client = MlflowClient(tracking_uri=uri)
    older = client.get_experiment_by_name("electra")  # made without the tag, as by an earlier version
    assert KIND not in older.tags
    assert ensure_experiment(uri, "electra") == older.experiment_id
    assert client.get_experiment(older.experiment_id).tags[KIND] == "custom_model_development"
    assert client.get_experiment(ensure_experiment(uri, "new")).tags[KIND] == "custom_model_development"
    chosen = client.get_experiment_by_name("scratch").experiment_id
    client.set_experiment_tag(chosen, KIND, "genai_development")
    ensure_experiment(uri, "scratch")
    assert client.get_experiment(chosen).tags[KIND] == "genai_development"  # a user's choice stays
