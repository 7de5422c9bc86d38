"""End-to-end sweeps on a real local Ray and a real MLflow SQLite store, with tiny models."""

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow_helpers import metric_steps, runs_by_role
from sweep_helpers import hold_all, sweep_args

from sweeps.electra_layers import main
from trainables.core import schema
from trainables.core.faults import fault_spec


@pytest.mark.sweep
def test_smoke_sweep_writes_one_parent_and_four_children_with_the_schema(sweep_env, tiny_models, capsys):
    code = main(
        sweep_args(tiny_models["bert"], "--layers 0,2 --seeds 0,1 --epochs 1 --name smoke", *sweep_env["flags"])
    )
    assert code == 0
    parents, children = runs_by_role(sweep_env["uri"])
    assert len(parents) == 1 and len(children) == 4
    parent_id = parents[0].info.run_id
    assert {(c.data.params["layer"], c.data.params["seed"]) for c in children} == {
        ("0", "0"),
        ("0", "1"),
        ("2", "0"),
        ("2", "1"),
    }
    for child in children:
        assert child.info.status == "FINISHED"
        assert child.data.tags[schema.TAG_PARENT] == parent_id
        assert set(schema.PARAMS) <= set(child.data.params)
        assert set(schema.EPOCH_METRICS) | set(schema.FINAL_METRICS) <= set(child.data.metrics)
        assert child.data.params["method"] == "tmft" and child.data.params["task"] == "stsb"
        assert metric_steps(sweep_env["uri"], child.info.run_id, "dev_spearman") == [1]
        assert -100 <= child.data.metrics["test_spearman_at_best_dev"] <= 100
        assert 0 < child.data.metrics["train_time_s"] < child.data.metrics["wall_time_s"]
    counts = {c.data.params["layer"]: int(c.data.params["params_truncated"]) for c in children}
    assert int(counts["0"]) < int(counts["2"])
    out = capsys.readouterr().out
    assert "mlflow ui --backend-store-uri" in out and "trials 4/4 done" in out
    assert "GB of checkpoints kept (--keep-checkpoints best, --best-dtype float16)" in out
    checkpoints = list(Path(sweep_env["storage"], "smoke").rglob("trial.json"))
    assert len(checkpoints) == 4
    for checkpoint in checkpoints:  # finished: the best-dev folder, no last weights or optimiser state
        assert (checkpoint.parent / "best" / "config.json").is_file()
        assert not (checkpoint.parent / "encoder").exists()


@pytest.mark.sweep
def test_zero_epochs_evaluates_the_pretrained_truncated_encoder(sweep_env, tiny_models):
    sweep = "--layers 1 --seeds 0 --epochs 0 --name zeroshot"
    code = main(sweep_args(tiny_models["electra-discriminator"], sweep, *sweep_env["flags"]))
    assert code == 0
    _, children = runs_by_role(sweep_env["uri"])
    (child,) = children
    assert metric_steps(sweep_env["uri"], child.info.run_id, "dev_spearman") == [0]
    assert "train_loss" not in child.data.metrics  # nothing was trained
    assert child.data.metrics["best_dev_spearman"] == child.data.metrics["dev_spearman"]


@pytest.mark.sweep
def test_zero_epochs_score_every_layer_from_one_forward_pass(sweep_env, tiny_models):
    """Without a dev/test subset, a zero-epoch STS-B sweep reads all layers from one `embeddings`
    stage (one forward pass per sentence) and gives the numbers of the per-layer path (forced here
    by --max-eval-samples at the splits' full size, which keeps every pair)."""
    from trainables.stages.upstream import read_executions

    flags = [f for f in sweep_env["flags"]]
    flags[flags.index("--max-eval-samples") + 1] = "1500"
    common = sweep_args(tiny_models["bert"], "--layers 0,2,4 --seeds 0 --epochs 0")
    one_pass = [f for f in flags if f not in ("--max-eval-samples", "1500")]
    assert main([*common, "--name", "one-pass", *one_pass]) == 0
    assert main([*common, "--name", "per-layer", *flags]) == 0
    executions = read_executions(Path(sweep_env["storage"]) / "stages")
    assert [e["kind"] for e in executions] == ["embeddings"]  # one stage for the three layers
    parents, children = runs_by_role(sweep_env["uri"])
    by_sweep = {p.info.run_id: p.info.run_name for p in parents}
    scores = {(by_sweep[c.data.tags[schema.TAG_PARENT]], c.data.params["layer"]): c.data.metrics for c in children}
    for layer in ("0", "2", "4"):
        fast, slow = scores[("one-pass", layer)], scores[("per-layer", layer)]
        for metric in ("dev_spearman", "dev_pearson", "test_spearman", "test_pearson", "best_dev_spearman"):
            assert fast[metric] == pytest.approx(slow[metric], abs=1e-3), (layer, metric)


@pytest.mark.sweep
@pytest.mark.parametrize("kind", ["raise", "kill"])
def test_trial_failing_in_epoch_two_is_retried_from_its_checkpoint_without_a_duplicate_run(
    sweep_env, tiny_models, edit_trials, kind
):
    """The fault fires once in epoch 2 (the trial raises, or its worker gets SIGKILL); the retry
    restores epoch 1's checkpoint and finishes. Its metrics equal those of a sweep without it."""
    marker = sweep_env["tmp"] / "fault-fired"

    def with_fault(plan):
        if plan.name == "faulty":
            plan.configs[0]["_fault"] = fault_spec(2, kind, marker)

    edit_trials(with_fault)
    common = sweep_args(tiny_models["bert"], "--layers 1 --seeds 0 --epochs 3", *sweep_env["flags"])
    assert main([*common, "--name", "faulty"]) == 0
    assert marker.exists(), "the fault never fired"
    assert main([*common, "--name", "clean", "--experiment", "clean"]) == 0

    _, faulty = runs_by_role(sweep_env["uri"])
    _, clean = runs_by_role(sweep_env["uri"], "clean")
    assert len(faulty) == 1 and faulty[0].info.status == "FINISHED"
    assert metric_steps(sweep_env["uri"], faulty[0].info.run_id, "dev_spearman") == [1, 2, 3]
    for key in ("dev_spearman", "test_spearman_at_best_dev", "train_loss", "best_dev_spearman"):
        assert faulty[0].data.metrics[key] == pytest.approx(clean[0].data.metrics[key], abs=1e-4), key


@pytest.mark.sweep
def test_resume_reruns_errored_trials_under_the_same_parent(sweep_env, tiny_models, edit_trials):
    marker = sweep_env["tmp"] / "fault-fired"

    def with_fault(plan):
        if not plan.resuming:
            plan.configs[1]["_fault"] = fault_spec(2, "raise", marker)

    edit_trials(with_fault)
    flags = sweep_args(
        tiny_models["bert"], "--layers 0,1 --seeds 0 --epochs 2 --name res --max-failures 0", *sweep_env["flags"]
    )
    assert main(flags) == 1, "one trial must have errored"
    _, children = runs_by_role(sweep_env["uri"])
    assert sorted(c.info.status for c in children) == ["FAILED", "FINISHED"]

    sweep_dir = sweep_env["storage"] / "res"
    assert main(["--resume", str(sweep_dir)]) == 0
    parents, children = runs_by_role(sweep_env["uri"])
    assert len(parents) == 1 and len(children) == 2
    assert all(c.info.status == "FINISHED" for c in children)
    for child in children:
        assert metric_steps(sweep_env["uri"], child.info.run_id, "dev_spearman") == [1, 2]
    saved = json.loads((sweep_dir / "sweep.json").read_text())
    assert all(c.data.tags[schema.TAG_PARENT] == saved["parent_run_id"] for c in children)


@pytest.mark.sweep
def test_four_half_gpu_trials_share_two_logical_gpus(sweep_env, tiny_models, edit_trials):
    """Trials are held for a few seconds so that all four overlap (otherwise one reused actor
    may run them one after another)."""
    edit_trials(hold_all(8))
    flags = list(sweep_env["flags"])
    flags[flags.index("--gpus-per-trial") + 1] = "0.5"
    flags[flags.index("--cpus-per-trial") + 1] = "0.25"
    code = main(sweep_args(tiny_models["bert"], "--layers 0,1 --seeds 0,1 --epochs 1 --name gpus", *flags))
    assert code == 0
    _, children = runs_by_role(sweep_env["uri"])
    gpu_ids = [c.data.tags["gpu_ids"] for c in children]
    assert len(gpu_ids) == 4 and all(gpu_ids)
    assert sorted(gpu_ids.count(g) for g in set(gpu_ids)) == [2, 2], gpu_ids
    assert all(c.data.tags["device"] == "cpu" for c in children)  # no CUDA here: the device is chosen at run time


def test_tokenisation_happens_once_per_model(sweep_env, tiny_models, monkeypatch):
    import trainables.training.tokenized as tokenized
    from sweeps.engine.runner import parser_for, plan_sweep

    calls = []
    original = tokenized.tokenize_task
    monkeypatch.setattr(
        tokenized, "tokenize_task", lambda task, path, *a, **k: calls.append(path) or original(task, path, *a, **k)
    )
    models = f"{tiny_models['bert']},{tiny_models['mpnet']}"
    args = parser_for("tmft").parse_args(sweep_args(models, "--layers 0,1,2 --seeds 0,1", *sweep_env["flags"]))
    plan = plan_sweep(args, method="tmft")
    assert len(plan.configs) == 12 and len(calls) == 2
    assert set(plan.data.tasks) == {tiny_models["bert"], tiny_models["mpnet"]}


@pytest.mark.sweep
def test_optuna_search_tunes_lr_batch_and_warmup(sweep_env, tiny_models):
    sweep = "--layers 2 --seeds 0 --epochs 2 --search optuna --num-samples 3 --max-concurrent 2 --name optuna"
    code = main(sweep_args(tiny_models["bert"], sweep, *sweep_env["flags"]))
    assert code == 0
    _, children = runs_by_role(sweep_env["uri"])
    assert len(children) == 3
    assert len({c.data.params["lr"] for c in children}) == 3
    assert {c.data.params["search"] for c in children} == {"optuna"}
    assert all(1e-5 <= float(c.data.params["lr"]) <= 1e-4 for c in children)


@pytest.mark.sweep
def test_a_sweep_saved_before_newer_flags_existed_resumes(sweep_env, tiny_models):
    """sweep.json of a sweep started by an older version lacks today's flags and the method's
    class (and its seal): --resume asks for the folder to be sealed, then fills the flags' defaults,
    takes the script's method, and adds no run."""
    from sweeps.engine import seal

    assert main(sweep_args(tiny_models["bert"], "--layers 1 --seeds 0 --epochs 1 --name old", *sweep_env["flags"])) == 0
    saved_path = Path(sweep_env["storage"], "old", "sweep.json")
    saved = json.loads(saved_path.read_text())
    del saved["method_class"], saved["script"], saved["args"]["eval_sets"]
    saved_path.write_text(json.dumps(saved))
    assert main(["--resume", str(saved_path.parent)]) == 2  # not sealed: the user seals a folder they trust
    assert seal.main([str(saved_path.parent)]) == 0
    assert main(["--resume", str(saved_path.parent)]) == 0
    parents, children = runs_by_role(sweep_env["uri"])
    assert len(parents) == 1 and len(children) == 1


@pytest.mark.sweep
def test_deberta_sweeps_from_layer_zero_pretrained_and_random(sweep_env, tiny_models):
    """DeBERTa-v2's encoder fails with no layers in transformers; the project's layer 0 works."""
    base = sweep_args(tiny_models["deberta-v2"], "--layers 0,1 --seeds 0 --epochs 1", *sweep_env["flags"])
    assert main([*base, "--name", "deberta"]) == 0
    assert main([*base, "--name", "deberta-random", "--random-init"]) == 0
    _, children = runs_by_role(sweep_env["uri"])
    assert len(children) == 4 and all(c.info.status == "FINISHED" for c in children)
    for child in children:
        params = child.data.params
        assert int(params["params_paper"]) <= int(params["params_truncated"])
        assert child.data.metrics["best_dev_spearman"] == child.data.metrics["best_dev_spearman"]  # not NaN


@pytest.mark.parametrize(
    "task", [pytest.param("stsb", marks=pytest.mark.sweep), pytest.param("sick", marks=pytest.mark.slow)]
)
def test_the_test_set_scored_once_at_the_end_equals_its_score_at_the_best_dev_epoch(sweep_env, tiny_models, task):
    """By default the test set is scored once, with the best-dev weights (and head); with
    --test-every-epoch after every epoch. The reported numbers are the same."""
    common = sweep_args(tiny_models["bert"], f"--layers 2 --seeds 0 --epochs 3 --task {task}", *sweep_env["flags"])
    assert main([*common, "--name", "once"]) == 0
    assert main([*common, "--name", "every", "--test-every-epoch", "--experiment", "every"]) == 0
    (once,), (every,) = runs_by_role(sweep_env["uri"])[1], runs_by_role(sweep_env["uri"], "every")[1]
    primary, companion = ("spearman", "pearson") if task == "stsb" else ("f1", "accuracy")
    assert metric_steps(sweep_env["uri"], every.info.run_id, f"test_{primary}") == [1, 2, 3]
    assert f"test_{primary}" not in once.data.metrics
    assert metric_steps(sweep_env["uri"], once.info.run_id, f"test_{primary}_at_best_dev") == [3]
    history = {
        m.step: m.value for m in MlflowClient(sweep_env["uri"]).get_metric_history(every.info.run_id, f"test_{primary}")
    }
    best_epoch = int(every.data.metrics["best_epoch"])
    assert once.data.metrics["best_epoch"] == best_epoch
    for metric in (primary, companion):
        assert once.data.metrics[f"test_{metric}_at_best_dev"] == pytest.approx(
            every.data.metrics[f"test_{metric}_at_best_dev"], abs=1e-4
        )
    assert once.data.metrics[f"test_{primary}_at_best_dev"] == pytest.approx(history[best_epoch], abs=1e-4)
