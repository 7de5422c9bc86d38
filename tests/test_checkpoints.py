"""Best-dev checkpoints: a trial keeps its best-dev weights as a sentence-transformers folder
beside its latest state, `runs:/<run id>` resolves to it, and zero-shot evaluation of that
reference reproduces the trial's own best dev score."""

from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow_helpers import runs_by_role
from sweep_helpers import sweep_args

from sweeps.electra_layers import main as tmft_main
from sweeps.evaluate import main as evaluate_main
from trainables.core import schema
from trainables.core.errors import SweepInputError


@pytest.fixture(scope="module")
def sweep_env(tmp_path_factory, ray_session, data_dir):
    """One store for this module: the trial below is trained once for all its tests."""
    from conftest import sweep_environment

    return sweep_environment(tmp_path_factory.mktemp("checkpoints"), data_dir)


@pytest.fixture(scope="module")
def finished_trial(sweep_env, tiny_models):
    flags = list(sweep_env["flags"])
    flags[flags.index("--max-eval-samples") : flags.index("--max-eval-samples") + 2] = []  # the full STS-B dev
    sweep = "--layers 2 --seeds 0 --epochs 3 --lr 1e-4 --eval-sets stsb_dev,sts12 --name trained"
    assert tmft_main(sweep_args(tiny_models["bert"], sweep, *flags)) == 0
    _, children = runs_by_role(sweep_env["uri"])
    return children[0]


@pytest.mark.sweep
def test_best_dev_checkpoint_is_a_sentence_transformer_and_evaluates_as_in_the_trial(
    finished_trial, sweep_env, tiny_models
):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    from trainables.encoders.loading import resolve_model
    from trainables.evaluation.zero_shot import encode_sentences

    run_id = finished_trial.info.run_id
    best = resolve_model(f"runs:/{run_id}", sweep_env["uri"])
    assert best.name == "best" and Path(finished_trial.data.tags[schema.TAG_CHECKPOINT]) == best.parent
    assert (best / "modules.json").is_file()
    # --keep-checkpoints best (the default): the finished trial kept its best-dev folder, no optimiser state
    assert {p.name for p in best.parent.iterdir()} == {"best", "best.files.json", "state.pt", "trial.json"}
    assert finished_trial.data.params["keep_checkpoints"] == "best"

    sentences = ["A man is playing a guitar.", "Two dogs run on the beach.", "A woman slices an onion."]
    ours = encode_sentences(AutoModel.from_pretrained(best), AutoTokenizer.from_pretrained(best), sentences, "mean")
    theirs = SentenceTransformer(str(best), device="cpu").encode(sentences, convert_to_numpy=True)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)

    assert evaluate_main(sweep_args(f"runs:/{run_id}", "--sets stsb_dev --name of-run", *sweep_env["base"])) == 0
    client = MlflowClient(sweep_env["uri"])
    evaluated = [c for c in runs_by_role(sweep_env["uri"])[1] if c.data.params["method"] == "evaluate"]
    assert len(evaluated) == 1 and evaluated[0].data.params["evaluated_run_id"] == run_id
    assert evaluated[0].data.params["layer"] == "2"
    best_dev = finished_trial.data.metrics["best_dev_spearman"]
    # the folder holds the best-dev weights rounded to float16 (--best-dtype's default): the same score to 0.05
    assert evaluated[0].data.metrics["stsb_dev_spearman"] == pytest.approx(best_dev, abs=0.05)
    assert finished_trial.data.params["best_dtype"] == "float16"
    history = {m.step: m.value for m in client.get_metric_history(run_id, "dev_spearman")}
    assert len(history) == 3 and best_dev == pytest.approx(max(history.values()))


@pytest.mark.sweep
def test_eval_sets_score_the_best_dev_weights_into_the_trials_own_run(finished_trial):
    """`--eval-sets stsb_dev` at the end of a trial scores its best-dev weights: on the full STS-B
    dev that is the trial's own best dev score, whatever epoch was last."""
    metrics = finished_trial.data.metrics
    assert metrics["stsb_dev_spearman"] == pytest.approx(metrics["best_dev_spearman"], abs=1e-3)
    assert metrics["stsb_dev_pearson"] == pytest.approx(metrics["dev_pearson_at_best_dev"], abs=1e-3)
    assert -100 < metrics["sts12_spearman"] < 100 and "sts12_MSRvid_spearman" in metrics
    assert finished_trial.data.params["eval_sets"] == "stsb_dev,sts12"
    assert finished_trial.data.params["metric_columns"] == "stsb_dev_spearman,sts12_spearman"


@pytest.mark.sweep
def test_a_run_without_a_checkpoint_is_refused(sweep_env, finished_trial):
    from trainables.encoders.loading import resolve_model

    parent_id = finished_trial.data.tags[schema.TAG_PARENT]
    with pytest.raises(SweepInputError, match="recorded no checkpoint"):
        resolve_model(f"runs:/{parent_id}", sweep_env["uri"])
    with pytest.raises(SweepInputError, match="no run"):
        resolve_model("runs:/0123456789abcdef", sweep_env["uri"])
