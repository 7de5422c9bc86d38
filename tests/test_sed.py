"""SED: teachers from a finished sweep, the ensemble's targets computed once as a stage and reused
by every student seed and by a later sweep, the targets against a reference computation, students
pulled towards the ensemble, and teachers of different sizes refused before any compute; the
declared settings: teachers that make no ensemble refused when parsed, the trial configs as they
always were, and the grid priced per trial for --dry-run."""

import shutil

import numpy as np
import pytest
import torch
from mlflow import MlflowClient
from sweep_helpers import sweep_args

from sweeps import electra_layers, sed
from sweeps.engine.runner import parser_for
from trainables.core import schema
from trainables.core.errors import SweepInputError
from trainables.stages.upstream import read_executions


@pytest.fixture
def teacher_sweep(sweep_env, tiny_models):
    """Three seeds of a tiny TMFT sweep at layer 2 (and layer 1, to be told apart)."""
    sweep = "--layers 1,2 --seeds 0,1,2 --epochs 1 --name teachers"
    assert electra_layers.main(sweep_args(tiny_models["bert"], sweep, *sweep_env["flags"])) == 0
    return "teachers"


def _sed_flags(sweep_env, tiny_models):
    """A SED sweep's flags, without an experiment (the script's own, unless a test names one)."""
    store = [f for f in sweep_env["base"] if f not in ("--experiment", "test")]
    return ["--student", tiny_models["bert"], *"--max-sentences 160 --sets stsb,sickr --batch-size 16".split(), *store]


@pytest.mark.slow
def test_targets_run_once_for_every_student_and_not_again_in_a_later_sweep(sweep_env, tiny_models, teacher_sweep):
    flags = [*_sed_flags(sweep_env, tiny_models), "--other-architectures"]  # layer-2 teachers, a 4-layer student
    assert (
        sed.main(
            [
                "--teachers",
                f"sweep:{teacher_sweep}:layer=2",
                "--seeds",
                "0,1,2",
                "--lr",
                "1e-3",
                "--epochs",
                "2",
                "--name",
                "sed-a",
                "--experiment",
                "sed",
                *flags,
            ]
        )
        == 0
    )
    stages = sweep_env["storage"] / "stages"
    assert [e["kind"] for e in read_executions(stages)] == ["sed-targets"]
    assert (
        sed.main(
            [
                "--teachers",
                f"sweep:{teacher_sweep}:layer=2",
                "--seeds",
                "3",
                "--name",
                "sed-b",
                "--experiment",
                "sed",
                *flags,
            ]
        )
        == 0
    )
    assert [e["kind"] for e in read_executions(stages)] == ["sed-targets"]  # reused by the second sweep

    client = MlflowClient(sweep_env["uri"])
    experiment = client.get_experiment_by_name("sed").experiment_id
    runs = client.search_runs([experiment], max_results=100)
    stage_runs = [r for r in runs if r.data.tags.get(schema.TAG_ROLE) == "stage"]
    trials = [r for r in runs if r.data.tags.get(schema.TAG_ROLE) == "trial"]
    assert len(stage_runs) >= 1
    members = sorted((r.data.params["member"], r.data.params["replica"]) for r in trials)
    assert members.count(("ensemble", "0")) == 2 and sum(m == "teacher" for m, _ in members) == 6
    assert sorted(r for m, r in members if m == "student") == ["0", "1", "2", "3"]
    stage_ids = {r.info.run_id for r in stage_runs}
    for run in trials:
        assert run.data.params["upstream_run_id"] in stage_ids
        assert run.info.status == "FINISHED" and "mean_spearman" in run.data.metrics
        for key in (
            "lr",
            "batch_size",
            "warmup_ratio",
            "optimizer",
            "schedule",
            "clip",
            "train_pool_layers",
            "eval_pool_layers",
            "corpus",
            "sentences",
            "teachers",
        ):
            assert key in run.data.params, key
    assert {r.data.params["teachers"] for r in trials} == {"3"}
    students = [r for r in trials if r.data.params["member"] == "student" and r.data.params["lr"] == "0.001"]
    scores = {round(r.data.metrics["mean_spearman"], 6) for r in students}
    assert len(scores) > 1, "student seeds gave identical students"


@pytest.mark.sweep
def test_the_targets_are_the_mean_of_the_teachers_pooled_embeddings(tmp_path, tiny_models, data_dir):
    from transformers import AutoModel, AutoTokenizer

    from trainables.encoders.loading import mean_pool
    from trainables.methods.sed import targets as sed_method

    teachers = [("a", tiny_models["bert"]), ("b", tiny_models["electra-discriminator"])]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("A man is playing a guitar.\n\nTwo dogs run in the snow.\nA woman slices an onion.\n")
    config = sed_method.stage_config(teachers, "corpus.txt", "x", None, train_layers=2, eval_layers=1, sets=["stsb"])
    spec = {
        "config": config,
        "teacher_paths": [p for _, p in teachers],
        "corpus_path": str(corpus),
        "data_dir": str(data_dir),
        "root": str(tmp_path),
        "key": "k",
    }
    out = tmp_path / "stage"
    out.mkdir()
    result = sed_method.compute(spec, out)
    targets = np.load(out / sed_method.TARGETS_FILE)
    assert result["sentences"] == 3 and targets.dtype == np.float16 and targets.shape == (3, 32)
    sentences = ["A man is playing a guitar.", "Two dogs run in the snow.", "A woman slices an onion."]
    expected = []
    for _, path in teachers:
        model, tokenizer = AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
        batch = tokenizer(sentences, padding=True, return_tensors="pt")
        with torch.no_grad():
            states = model(**batch, output_hidden_states=True).hidden_states
        expected.append(
            (
                (mean_pool(states[-1], batch["attention_mask"]) + mean_pool(states[-2], batch["attention_mask"])) / 2
            ).numpy()
        )
    np.testing.assert_allclose(targets.astype(np.float32), np.mean(expected, axis=0), atol=2e-3, rtol=2e-3)


def test_teachers_of_different_sizes_are_refused_before_any_compute(sweep_env, tiny_models, capsys):
    flags = _sed_flags(sweep_env, tiny_models)
    code = sed.main(
        ["--teachers", f"{tiny_models['bert']},{tiny_models['electra-generator']}", "--name", "mixed", *flags]
    )
    err = capsys.readouterr().err
    assert code == 2 and "one embedding size" in err and ": 32" in err and ": 16" in err
    assert not (sweep_env["storage"] / "stages").exists()


@pytest.mark.slow
def test_a_sweep_of_several_layers_asks_for_one(sweep_env, tiny_models, teacher_sweep, capsys):
    code = sed.main(["--teachers", f"sweep:{teacher_sweep}", "--name", "which", *_sed_flags(sweep_env, tiny_models)])
    assert code == 2 and "layers 1, 2" in capsys.readouterr().err
    assert sed.main(["--teachers", "sweep:nowhere", "--name", "none", *_sed_flags(sweep_env, tiny_models)]) == 2


@pytest.mark.slow
def test_optuna_tunes_the_students_lr_batch_and_warmup(sweep_env, tiny_models):
    flags = [f for f in _sed_flags(sweep_env, tiny_models) if f not in ("--student", tiny_models["bert"])]
    assert (
        sed.main(
            [
                "--smoke-test",
                "--search",
                "optuna",
                "--num-samples",
                "2",
                "--name",
                "tuned",
                "--experiment",
                "sed",
                *flags,
            ]
        )
        == 0
    )
    client = MlflowClient(sweep_env["uri"])
    runs = [
        r
        for r in client.search_runs([client.get_experiment_by_name("sed").experiment_id])
        if r.data.tags.get(schema.TAG_ROLE) == "trial"
    ]
    assert len(runs) == 2 and {r.data.params["member"] for r in runs} == {"student"}
    assert len({(r.data.params["lr"], r.data.params["batch_size"], r.data.params["warmup_ratio"]) for r in runs}) == 2


@pytest.mark.parametrize(
    "teachers, message",
    [
        ("only-one", "an ensemble needs at least two teachers"),
        ("sweep:teachers,another-model", "stands alone"),
        ("sweep:teachers:depth=2", "only :layer=<l> is understood"),
    ],
)
def test_teachers_that_make_no_ensemble_are_refused_when_parsed(teachers, message):
    with pytest.raises(SweepInputError, match="--teachers") as error:
        parser_for("sed").parse_args(["--teachers", teachers])
    assert message in str(error.value)
    args = parser_for("sed").parse_args(["--teachers", "a, b,a", "--seeds", "0-2", "--sets", "stsb"])
    assert (args.teachers, args.seeds, args.sets) == (["a", "b"], [0, 1, 2], ["stsb"])


def test_the_trial_configs_keep_their_keys_and_values(tmp_path, tiny_models, data_dir):
    """The declared settings give the trial configs (so the MLflow params and config hashes) the keys,
    values and types the hand-written configs had."""
    from trainables.core.method import PlanContext
    from trainables.methods.sed.method import SED

    second = str(shutil.copytree(tiny_models["bert"], tmp_path / "second-teacher"))
    argv = ["--teachers", f"{tiny_models['bert']},{second}", "--student", tiny_models["bert"], "--seeds", "0-1"]
    argv += ["--max-sentences", "32", "--sets", "stsb", "--lr", "1e-3", "--data-dir", str(data_dir)]
    args = parser_for("sed").parse_args([*argv, "--storage-path", str(tmp_path / "runs")])
    plan = SED.plan(args, PlanContext(str(tmp_path / "runs"), f"sqlite:///{tmp_path / 'mlflow.db'}"))
    assert [(c["member"], c["replica"], c["seed"]) for c in plan.configs] == [
        ("teacher", 0, 0),
        ("teacher", 1, 1),
        ("ensemble", 0, 0),
        ("student", 0, 0),
        ("student", 1, 1),
    ]
    student = plan.configs[-1]
    expected = {
        "method": "sed",
        "student": tiny_models["bert"],
        "epochs": 1,
        "lr": 1e-3,
        "batch_size": 32,
        "warmup_ratio": 0.1,
        "optimizer": "adamw-wd0",
        "schedule": "warmup-linear",
        "clip": 1.0,
        "train_pool_layers": 1,
        "eval_pool_layers": 2,
        "saved_pooling": "mean of the last layer (folder_* metrics)",
        "corpus": "wiki",
        "sentences": 32,
        "teachers": 2,
        "upstream_method": "sed-targets",
        "upstream_run_id": None,
        "member": "student",
        "replica": 1,
        "seed": 1,
    }
    assert set(student) == {*expected, "_student_path", "stage_key", "_upstream_path"}
    assert {key: (student[key], type(student[key])) for key in expected} == {
        key: (value, type(value)) for key, value in expected.items()
    }
    (spec,) = plan.stages.values()
    assert spec["config"]["sets"] == ["stsb"] and spec["config"]["max_sentences"] == 32


def test_the_grid_is_priced_per_trial_with_its_targets_stage(data_dir):
    from trainables.methods.sed.method import SED

    argv = ["--teachers", "a,b,c", "--student", "bert-base-uncased", "--seeds", "0-4", "--data-dir", str(data_dir)]
    estimate = SED.estimate(parser_for("sed").parse_args(argv))
    assert estimate.trials == 3 + 1 + 5 == len(estimate.costs) and estimate.gpu_hours > 0
    assert [c.gpu for c in estimate.costs] == [False] * 4 + [True] * 5  # teachers, ensemble: cached embeddings
    assert all(c.memory_bytes > 0 and c.weight_bytes > 0 for c in estimate.costs[4:])
    (stage,) = estimate.stages
    assert stage.startswith("sed-targets:") and "by 3 teachers" in stage
    preset = SED.estimate(parser_for("sed").parse_args(["--teachers", "sweep:sed-ct-teachers", "--seeds", "0"]))
    assert preset.trials == 5 + 1 + 1  # the preset's teachers command trains five
    assert SED.estimate(parser_for("sed").parse_args(["--teachers", "sweep:elsewhere"])).trials == 0
