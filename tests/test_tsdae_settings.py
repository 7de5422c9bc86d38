"""TSDAE's baselines at their own papers' settings (trainables/methods/tsdae/settings.py), the shared
settings, the schedules, SimCSE's training-only MLP, TSDAE's decoder in train mode as the released
code trains it, what a planned trial records, and the TSDAE paper's presets (tsdae/paper.py)."""

import re
from argparse import Namespace

import numpy as np
import pytest
from sweep_helpers import sweep_args

from trainables.core.errors import SweepInputError
from trainables.methods.tsdae.settings import SETTING_KEYS


def _args(**flags):
    return Namespace(**{"ct_variant": "official", "shared_settings": False, **flags})


def _resolve(objective, corpus_size=1000, model_max=512, **flags):
    from trainables.methods.tsdae.settings import resolve

    return resolve(objective, _args(**flags), corpus_size, model_max)


PAPER_VALUES = {  # (steps, batch, lr, optimizer, schedule, warm-up, decay, clip, pooling, mlp, temperature, length,
    # scoring length, dropout, decoder dropout, final weights, eval cadence, sampling, last batch, steps an
    # epoch) on a 1,000-sentence corpus and a 512-token model
    "tsdae": (
        100_000,
        8,
        3e-5,
        "adamw",
        "constant",
        0,
        0.0,
        1.0,
        "cls",
        "none",
        None,
        512,
        512,
        True,
        True,
        "last",
        1000,
        "epochs",
        "drop",
        125,
    ),
    "mlm": (
        100_000,
        8,
        5e-5,
        "adamw",
        "linear",
        10_000,
        0.01,
        1.0,
        "mean",
        "none",
        None,
        128,
        512,
        True,
        None,
        "last",
        1000,
        "epochs",
        "keep",
        125,
    ),
    # SimCSE as the TSDAE paper ran it (the default) and at the SimCSE paper's later settings
    "simcse": (2, 512, 5e-5, "adamw", "linear", 0, 0.0, 1.0, "cls", "keep", 0.05, 32, 512, True, None, "best-dev", 2)
    + ("epochs", "keep", 2),
    "simcse-paper": (
        16,
        64,
        3e-5,
        "adamw",
        "linear",
        0,
        0.0,
        1.0,
        "cls",
        "train",
        0.05,
        32,
        512,
        True,
        None,
        "best-dev",
        16,
        "epochs",
        "keep",
        16,
    ),
    "ct": (
        100_000,
        16,
        1e-5,
        "rmsprop",
        "ct-piecewise",
        0,
        0.0,
        None,
        "mean",
        "none",
        None,
        75,
        512,
        False,
        None,
        "last",
        1000,
        "replacement",
        None,
        33,  # ContrastiveTensionDataLoader: 1,000 // 30 sentences a batch of 16 pairs
    ),
}
KEYS = SETTING_KEYS  # the order of PAPER_VALUES' rows


@pytest.mark.parametrize("objective", sorted(PAPER_VALUES))
def test_each_objective_runs_at_its_own_papers_settings_by_default(objective):
    if objective == "simcse-paper":
        settings = _resolve("simcse", simcse_settings="simcse-paper")
    else:
        settings = _resolve(objective)
    assert tuple(settings[k] for k in KEYS) == PAPER_VALUES[objective]
    assert settings["simcse_settings"] == {"simcse": "tsdae-paper", "simcse-paper": "simcse-paper"}.get(objective)
    assert settings["settings"] == "paper" and settings["epochs"] == -(-settings["steps"] // settings["eval_steps"])
    untrained = _resolve("none", model_max=128)
    assert (untrained["pooling"], untrained["max_length"], untrained["steps"], untrained["lr"]) == (
        "mean",
        128,
        0,
        None,
    )


def test_simcse_trains_one_epoch_of_the_corpus_and_ct_in_batch_takes_adamw_with_cts_pooling():
    assert _resolve("simcse", corpus_size=1_000_000)["steps"] == 1954  # wiki1m at 512 a batch (TSDAE's SimCSE)
    assert _resolve("simcse", corpus_size=1_000_000, simcse_settings="simcse-paper")["steps"] == 15_625  # at 64
    assert _resolve("simcse", corpus_size=65, simcse_settings="simcse-paper")["steps"] == 2
    in_batch = _resolve("ct", ct_variant="in-batch")
    assert (in_batch["optimizer"], in_batch["lr"], in_batch["pooling"], in_batch["dropout"]) == (
        "adamw",
        3e-5,
        "mean",
        True,
    )


def test_flags_given_win_for_every_objective_and_shared_settings_give_every_objective_tsdaes():
    for objective in ("tsdae", "mlm", "simcse", "ct"):
        given = _resolve(objective, lr=1e-4, batch_size=4, pooling="mean", steps=50, max_length=40, eval_steps=7)
        assert (given["lr"], given["batch_size"], given["pooling"], given["steps"], given["max_length"]) == (
            1e-4,
            4,
            "mean",
            50,
            40,
        )
        assert (given["eval_steps"], given["epochs"]) == (7, 8)
        shared = _resolve(objective, shared_settings=True)
        assert (shared["lr"], shared["batch_size"], shared["pooling"], shared["steps"], shared["max_length"]) == (
            3e-5,
            8,
            "cls",
            100_000,
            512,
        )
        assert (shared["schedule"], shared["optimizer"], shared["mlp"], shared["settings"]) == (
            "constant",
            "adamw",
            "none",
            "shared",
        )
        assert shared["final_weights"] == "last"
    assert _resolve("ct", shared_settings=True)["dropout"] is False  # CT's copies run without dropout either way
    assert _resolve("none", shared_settings=True)["pooling"] == "cls"


def test_learning_rate_schedules():
    from trainables.methods.tsdae.settings import learning_rate

    linear = {"lr": 1.0, "schedule": "linear", "warmup_steps": 10, "steps": 110}
    assert [learning_rate(linear, s) for s in (0, 5, 10, 60, 110, 200)] == [0.0, 0.5, 1.0, 0.5, 0.0, 0.0]
    no_warmup = {"lr": 2.0, "schedule": "linear", "warmup_steps": 0, "steps": 4}
    assert [learning_rate(no_warmup, s) for s in range(4)] == [2.0, 1.5, 1.0, 0.5]
    assert learning_rate({"lr": 3e-5, "schedule": "constant"}, 99) == 3e-5
    ct = {"lr": 1e-5, "schedule": "ct-piecewise"}
    assert [learning_rate(ct, s) for s in (0, 499, 500, 1000, 1500, 2000, 50_000)] == [
        1e-5,
        1e-5,
        8e-6,
        6e-6,
        4e-6,
        2e-6,
        2e-6,
    ]


def _training(model_path, objective, sentences, **flags):
    from trainables.methods.tsdae.training import Training, objective_settings

    args = _args(**{"steps": 4, "eval_steps": 2, **flags})
    config = {
        "objective": objective,
        "seed": 0,
        "_model_path": model_path,
        "noise": "delete",
        "ct_variant": "official",
        **objective_settings(objective, args, len(sentences), 64),
    }
    return Training(config, sentences, "cpu")


def test_the_tsdae_decoder_trains_with_dropout_as_the_released_code(tiny_models, stsb_sentences):
    """sentence-transformers v1.1.0's `fit` (the TSDAE paper's code) calls `loss_model.train()`, so the
    decoder inside DenoisingAutoEncoderLoss runs in train mode; the run records it."""
    import torch

    training = _training(tiny_models["bert"], "tsdae", stsb_sentences[:100], batch_size=4)
    assert training.config["decoder_dropout"] is True
    seen = []

    def record(module, inputs):
        dropouts = [m.training for m in module.modules() if isinstance(m, torch.nn.Dropout)]
        seen.append((module.training, bool(dropouts) and all(dropouts)))

    training.loss.decoder.register_forward_pre_hook(record)
    training.st.eval()  # as after a dev evaluation: run() must put both back in train mode
    training.loss.decoder.eval()
    training.run(2)
    assert seen == [(True, True), (True, True)]
    assert training.st.training
    # with the flag off, as sentence-transformers' v3+ trainer leaves it
    training.config["decoder_dropout"] = False
    training.run(1)
    assert seen[-1] == (False, False) and training.st.training


def test_simcse_mlp_over_cls_is_trained_and_left_out_of_the_encoder(tiny_models, stsb_sentences, tmp_path):
    import json

    import torch

    training = _training(
        tiny_models["bert"], "simcse", stsb_sentences[:200], batch_size=8, simcse_settings="simcse-paper"
    )
    assert (training.config["mlp"], training.config["temperature"]) == ("train", 0.05)
    assert training.loss.scale == pytest.approx(20.0)
    trained_model = training.loss.model
    assert len(trained_model) == 3 and len(training.st) == 2
    assert trained_model[0] is training.st[0] and trained_model[1] is training.st[1]
    dense = trained_model[2].linear
    assert any(p is dense.weight for group in training.optimizer.param_groups for p in group["params"])
    assert abs(float(dense.weight.detach().std()) - 0.02) < 0.005 and float(dense.bias.abs().max()) == 0.0
    before = dense.weight.detach().clone()
    training.run(2)
    assert not torch.equal(before, dense.weight)
    # the MLP's output is tanh of the linear map of the encoder's [CLS] vector; the encoder alone gives the vector
    features = training._tokenize(["a man is playing a guitar"])
    with torch.no_grad():
        trained_model.eval()
        cls = training.st(dict(features))["sentence_embedding"]
        mlp = trained_model(dict(training._tokenize(["a man is playing a guitar"])))["sentence_embedding"]
    assert torch.allclose(mlp, torch.tanh(dense(cls)), atol=1e-6)
    training.st.save(str(tmp_path / "saved"))
    assert len(json.loads((tmp_path / "saved" / "modules.json").read_text())) == 2
    plain = _training(tiny_models["bert"], "simcse", stsb_sentences[:200], batch_size=8, shared_settings=True)
    assert plain.config["mlp"] == "none" and plain.loss.model is plain.st


def test_mlm_weight_decay_leaves_biases_and_layer_norms_out(tiny_models, stsb_sentences):
    training = _training(tiny_models["bert"], "mlm", stsb_sentences[:100], batch_size=4)
    decayed, plain = training.optimizer.param_groups
    assert (decayed["weight_decay"], plain["weight_decay"]) == (0.01, 0.0)
    names = {id(p): n for n, p in training.loss.named_parameters()}
    assert all(names[id(p)].endswith("bias") or "LayerNorm" in names[id(p)] for p in plain["params"])
    assert not any(names[id(p)].endswith("bias") for p in decayed["params"])
    training.run(2)
    assert training.config["warmup_steps"] == 0  # 10 % of 4 steps, rounded
    assert training.optimizer.param_groups[0]["lr"] == pytest.approx(5e-5 * 3 / 4)  # the second step's rate


def _plan_flags(tmp_path, data_dir):
    store = ["--storage-path", str(tmp_path / "runs"), "--mlflow-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    return [*store, "--data-dir", str(data_dir)]


def _plan(tmp_path, data_dir, model, flags):
    from sweeps.engine.runner import parser_for, plan_sweep

    args = parser_for("tsdae").parse_args(sweep_args(model, flags, *_plan_flags(tmp_path, data_dir)))
    return plan_sweep(args, method="tsdae")


def test_a_planned_trial_records_the_settings_it_runs_with(tmp_path, data_dir, tiny_models):
    plan = _plan(
        tmp_path,
        data_dir,
        tiny_models["bert"],
        "--objective none,tsdae,mlm,simcse,ct --seeds 0 --max-sentences 130 --eval-sets none "
        "--simcse-settings simcse-paper",
    )
    by_objective = {c["objective"]: c for c in plan.configs}
    for objective in ("tsdae", "mlm", "simcse", "ct"):
        expected = dict(zip(KEYS, PAPER_VALUES["simcse-paper" if objective == "simcse" else objective]))
        for key in ("max_length", "eval_max_length"):  # the tiny model's limit caps the papers' lengths
            expected[key] = min(126, expected[key])
        expected.update({"simcse": {"steps": 3, "eval_steps": 3}}.get(objective, {}))
        # one epoch of the 130 sentences: batches of 8 (the last 2 dropped), of 8 and a last of 2, 3 of 64
        # (the last of 2), CT's loader's 30 sentences a batch
        expected["epoch_steps"] = {"tsdae": 16, "mlm": 17, "simcse": 3, "ct": 4}[objective]
        assert {k: by_objective[objective][k] for k in KEYS} == expected, objective
    assert (by_objective["none"]["pooling"], by_objective["none"]["max_length"]) == ("mean", 126)
    assert plan.static_params["settings"] == "paper"
    # every trial records these keys, and only these (their names are MLflow params and config hashes)
    recorded = {"method", "noise", "noise_ratio", "tied_decoder", "ct_variant", "ct_keep", "corpus_epochs"}
    recorded |= {"corpus", "max_sentences", "model", "objective", "eval_sets", "_model_path", "seed", "epochs"}
    recorded |= {"settings", "simcse_settings", "precision", "keep_checkpoints", "best_dtype", *KEYS}
    for config in plan.configs:
        own = recorded - ({"simcse_settings"} if config["objective"] == "none" else set())
        assert set(config) == own, set(config) ^ own
        tsdae = config["objective"] == "tsdae"  # TSDAE's configuration; None for the others
        assert (config["method"], config["noise"], config["noise_ratio"], config["corpus_epochs"]) == (
            "tsdae",
            "delete" if tsdae else None,
            0.6 if tsdae else None,
            None,
        )
        assert config["tied_decoder"] is (True if tsdae else None)
        assert (config["ct_variant"], config["ct_keep"], config["max_sentences"], config["eval_sets"]) == (
            "official",
            "second",
            130,
            "none",
        )
    shared = _plan(
        tmp_path, data_dir, tiny_models["bert"], "--objective mlm --shared-settings --lr 1e-4 --max-sentences 64"
    )
    assert {(c["lr"], c["pooling"], c["schedule"], c["settings"]) for c in shared.configs} == {
        (1e-4, "cls", "constant", "shared")
    }


def test_corpus_sizes_and_epochs_of_the_corpus(tmp_path, data_dir, tiny_models):
    plan = _plan(
        tmp_path,
        data_dir,
        tiny_models["bert"],
        "--objective tsdae,mlm --max-sentences 16,64 --corpus-epochs 10 --eval-sets none --seeds 0",
    )
    steps = {(c["objective"], c["max_sentences"]): (c["steps"], c["warmup_steps"]) for c in plan.configs}
    assert steps == {("tsdae", 16): (20, 0), ("tsdae", 64): (80, 0), ("mlm", 16): (20, 2), ("mlm", 64): (80, 8)}
    from sweeps.engine.runner import parser_for
    from trainables.methods.tsdae.method import TSDAE

    contract = TSDAE.metrics(parser_for("tsdae").parse_args(["--eval-sets", "none", "--max-sentences", "16,64"]))
    assert "max_sentences" in contract.axes and "max_sentences" in contract.reference_by


@pytest.mark.parametrize(
    "flags, message",
    [
        ("--eval-sets in-domain", "--corpus wiki has no evaluation set of its name"),
        ("--max-sentences 10,x", "not a comma-separated list of integers"),
        ("--max-sentences 0", "must be positive"),
        ("--corpus-epochs 0", "--corpus-epochs must be a positive integer"),
        ("--steps 0", "--steps must be a positive integer"),
        ("--lr -1", "--lr must be positive"),
        ("--corpus nowhere.txt", "no such file and no corpus of that name"),
        ("--objective simcse --batch-size 1", "too small for --objective simcse"),
    ],
)
def test_bad_flags_are_refused_before_anything_runs(flags, message, tmp_path, data_dir, tiny_models):
    with pytest.raises(SweepInputError, match=message):
        _plan(tmp_path, data_dir, tiny_models["bert"], flags)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_the_papers_numbers_and_presets():
    from trainables.evaluation.sets import eval_set_names
    from trainables.methods import all_presets
    from trainables.methods.tsdae import paper
    from trainables.methods.tsdae.method import main_metric

    assert paper.TABLE2["Unsupervised learning based on BERT-base"]["TSDAE"] == (
        59.4,
        14.5,
        76.8,
        69.2,
        73.0,
        71.4,
        73.9,
        75.0,
        75.6,
        74.0,
        55.2,
    )
    assert paper.TABLE11["Unsupervised method based on BERT-base"]["SimCSE"][5] == 73.8
    for group in (*paper.TABLE2.values(), *paper.TABLE11.values()):
        assert len({len(v) for v in group.values()}) == 1
    # Table 3 is Table 11's STSb beside Table 2's Avg.
    for label, (stsb, avg) in paper.TABLE3.items():
        if label in paper.TABLE11["Unsupervised method based on BERT-base"]:
            assert stsb == paper.TABLE11["Unsupervised method based on BERT-base"][label][5]
            assert avg == paper.TABLE2["Unsupervised learning based on BERT-base"][label][-1]
    presets = all_presets()
    assert {"tsdae-table2", "tsdae-table11", "tsdae-fig3"} <= set(presets)
    table2 = presets["tsdae-table2"]
    assert [r.label for r in table2.published] == ["TSDAE", "MLM", "CT", "SimCSE", "BERT-base-uncased"]
    assert dict(table2.published[0].values)["SciDocs CV"] == 75.6
    assert next(c for c in table2.columns if c.name == "Avg.").of  # the mean of the four task columns
    assert dict(table2.published[4].match)["objective"] == "none"
    assert {c.name for c in table2.columns} == {*paper.TABLE2_METRICS, "Avg."}
    from sweeps.engine.runner import parser_for

    dests = set(vars(parser_for("tsdae").parse_args([])))
    for preset in (p for p in presets.values() if p.method == "tsdae"):
        assert set(preset.flags) <= dests and preset.paper == paper.PAPER
        if not preset.columns:
            continue
        if preset.flags["eval_sets"] == "none":  # Appendix A: STS-B dev, the best over training
            assert {m for column in preset.columns for m in column.metrics} == {"best_dev_spearman"}, preset.name
            continue
        # each set's main metric is compared, and every compared metric is one of the evaluated sets'
        compared = {m for column in preset.columns for m in column.metrics}
        sets = paper.DOMAIN_SETS if preset.flags["eval_sets"] == "in-domain" else preset.flags["eval_sets"].split(",")
        registered = [s for s in sets if s in eval_set_names()]
        assert {main_metric(s) for s in registered} <= compared, preset.name
        assert all(any(m.startswith(f"{s}_") for s in sets) for m in compared), preset.name


def test_the_table2_preset_plans_on_the_domain_sets_registered_and_refuses_the_others(tmp_path, data_dir, tiny_models):
    """Table 2 needs each domain set (trainables/evaluation) and its unlabelled sentences as a corpus
    (trainables/data/sentences.py): the corpora that are both registered and in the data folder plan,
    one trial per corpus, objective and seed, each scored on its own set; any other is refused, naming it."""
    from trainables.data.sentences import DAPT_SOURCES
    from trainables.evaluation.sets import eval_set_names, load_suite
    from trainables.methods.tsdae.paper import DOMAIN_SETS

    usable, refused = [], []
    for name in DOMAIN_SETS:
        try:
            if name not in DAPT_SOURCES or name not in eval_set_names():
                raise SweepInputError(f"{name} is not registered")
            load_suite([name], data_dir)
            usable.append(name)
        except SweepInputError:
            refused.append(name)
    smoke = "--smoke-test --preset tsdae-table2 --seeds 0,1 --max-sentences 64 --eval-sets in-domain"
    for name in refused:
        with pytest.raises(SweepInputError, match=name):
            _plan(tmp_path, data_dir, tiny_models["bert"], f"{smoke} --corpus {name}")
    if usable:
        plan = _plan(tmp_path, data_dir, tiny_models["bert"], f"{smoke} --corpus {','.join(usable)}")
        assert {(c["corpus"], c["eval_sets"]) for c in plan.configs} == {(n, n) for n in usable}
        assert len(plan.configs) == len(usable) * (1 + 4 * 2)


def test_a_done_trial_keeps_the_weights_its_final_scores_came_from(tiny_models, tmp_path):
    """`final_weights` last: the kept model folder holds the last weights once the trial is done (the ones
    its evaluation sets scored); before that, and with best-dev, the best dev weights."""
    import torch
    from sentence_transformers import SentenceTransformer

    from trainables.methods.tsdae.trainable import TSDAETrainable
    from trainables.methods.tsdae.training import sentence_model

    trial = object.__new__(TSDAETrainable)  # the kept-folder rule alone, without Ray
    trial.st = sentence_model(tiny_models["bert"], "cls", 32)
    trial.best_weights = {k: v.detach().clone() for k, v in trial.st.state_dict().items()}
    with torch.no_grad():
        next(trial.st.parameters()).add_(1.0)  # training moved on after the best dev score
    last = next(trial.st.parameters()).detach().clone()

    def kept(final_weights, epoch, name):
        trial.trial_config, trial.epoch, trial.epochs = (
            {"final_weights": final_weights, "eval_max_length": 64},
            epoch,
            3,
        )
        trial.save_best(tmp_path / name)
        loaded = SentenceTransformer(str(tmp_path / name), device="cpu")
        assert loaded.max_seq_length == 64 and trial.st.max_seq_length == 32  # scored at 64, trained at 32
        return next(loaded.parameters()).detach()

    assert torch.equal(kept("last", 3, "done-last"), last)
    assert not torch.equal(kept("last", 2, "running-last"), last)
    assert not torch.equal(kept("best-dev", 3, "done-best"), last)


def test_simcse_as_the_tsdae_paper_ran_it_keeps_its_linear_layer_in_the_encoder(tiny_models, stsb_sentences, tmp_path):
    """TSDAE Appendix B: SimCSE with "a linear layer on the CLS token embedding as the pooling method"
    (SimCSE's April 2021 code: linear + tanh over [CLS], kept at test time), batch 512, lr 5e-5."""
    import json

    import torch
    from sentence_transformers import SentenceTransformer

    training = _training(tiny_models["bert"], "simcse", stsb_sentences[:200], batch_size=8)
    config = training.config
    assert (config["mlp"], config["lr"], config["simcse_settings"]) == ("keep", 5e-5, "tsdae-paper")
    assert len(training.st) == 3 and training.loss.model is training.st
    dense = training.st[2].linear
    assert any(p is dense.weight for group in training.optimizer.param_groups for p in group["params"])
    before = dense.weight.detach().clone()
    training.run(2)
    assert not torch.equal(before, dense.weight)
    training.st.save(str(tmp_path / "saved"))
    assert len(json.loads((tmp_path / "saved" / "modules.json").read_text())) == 3
    training.st.eval()
    sentence = ["a man is playing a guitar"]
    with torch.no_grad():
        pooled = training.st[1](training.st[0](dict(training._tokenize(sentence))))["sentence_embedding"]
        expected = torch.tanh(dense(pooled)).numpy()
    loaded = SentenceTransformer(str(tmp_path / "saved"), device="cpu").encode(sentence, convert_to_numpy=True)
    assert np.allclose(loaded, expected, atol=1e-5)
    assert _resolve("simcse", batch_size=512)["batch_size"] == 512  # the paper's batch (the tiny test trains 8)


def test_a_flag_can_set_one_objectives_value_and_leave_the_others(tmp_path, data_dir, tiny_models):
    plan = _plan(
        tmp_path,
        data_dir,
        tiny_models["bert"],
        "--objective tsdae,simcse,ct --batch-size 8,simcse=16 --lr simcse=1e-4 --seeds 0 --max-sentences 64 "
        "--eval-sets none --steps 4",
    )
    got = {c["objective"]: (c["batch_size"], c["lr"]) for c in plan.configs}
    assert got == {"tsdae": (8, 3e-5), "simcse": (16, 1e-4), "ct": (8, 1e-5)}


@pytest.mark.parametrize(
    "flags, message",
    [
        ("--objective tsdae --batch-size simcse=16", "gives a value for simcse, which --objective tsdae does not run"),
        ("--objective tsdae --final-weights ct=last", "--final-weights gives a value for ct"),
        ("--objective tsdae --lr tsdae=-1", "--lr must be positive"),
        ("--objective tsdae --eval-max-length 0", "--eval-max-length must be a positive integer"),
    ],
)
def test_a_per_objective_value_is_checked_like_any_other(flags, message, tmp_path, data_dir, tiny_models):
    with pytest.raises(SweepInputError, match=message):
        _plan(tmp_path, data_dir, tiny_models["bert"], flags)


@pytest.mark.parametrize(
    "value, message",
    [
        ("simcsee=16", "'simcsee' is not one of tsdae, mlm, simcse, ct"),
        ("simcse=x", "must be a whole number"),
        ("8,8", "gives every one twice"),
        ("simcse=8,simcse=9", "gives simcse twice"),
        ("none=8", "'none' is not one of"),  # the untrained encoder has no batch
    ],
)
def test_a_malformed_per_objective_value_is_refused_naming_the_flag(value, message):
    from sweeps.engine.runner import parser_for

    with pytest.raises(SweepInputError, match=f"^--batch-size .*{re.escape(message)}"):
        parser_for("tsdae").parse_args(["--batch-size", value])


def test_a_per_objective_value_is_typed_for_every_objective_or_each():
    from sweeps.engine.runner import parser_for
    from trainables.core.settings import value_for

    args = parser_for("tsdae").parse_args(["--batch-size", "32,simcse=512", "--lr", "1e-4", "--pooling", "none=cls"])
    assert args.batch_size == {"*": 32, "simcse": 512} and args.lr == 1e-4 and args.pooling == {"none": "cls"}
    assert [value_for(args.batch_size, o) for o in ("tsdae", "simcse")] == [32, 512]
    assert value_for(args.pooling, "tsdae") is None and args.steps is None  # each objective's own value


def test_the_corpus_size_figure_gives_every_objective_ten_epochs_up_to_100k_steps(tmp_path, data_dir, tiny_models):
    """§7.1: "10 epochs up to 100k training steps" for every objective, SimCSE included, each epoch as its
    code forms it: at the figure's first sizes (128, 256 sentences) SimCSE's Trainer trains one batch of the
    whole corpus an epoch (its batch of 512 is never filled), TSDAE's DataLoader 16 batches of 8, MLM's
    Trainer 16 of 8, CT's loader 4 batches of 16 pairs (30 sentences each)."""
    plan = _plan(
        tmp_path,
        data_dir,
        tiny_models["bert"],
        "--objective tsdae,mlm,simcse,ct --max-sentences 128,256 --corpus-epochs 10 --eval-sets none --seeds 0",
    )
    got = {(c["objective"], c["max_sentences"]): (c["steps"], c["batch_size"], c["epoch_steps"]) for c in plan.configs}
    assert got == {
        ("tsdae", 128): (160, 8, 16),
        ("mlm", 128): (160, 8, 16),
        ("simcse", 128): (10, 128, 1),
        ("ct", 128): (40, 16, 4),
        ("tsdae", 256): (320, 8, 32),
        ("mlm", 256): (320, 8, 32),
        ("simcse", 256): (10, 256, 1),
        ("ct", 256): (80, 16, 8),
    }
    for c in plan.configs:
        assert c["corpus_epochs"] == 10 and c["steps"] == 10 * c["epoch_steps"], c["objective"]
        assert (c["sampling"], c["last_batch"]) == {
            "tsdae": ("epochs", "drop"),
            "mlm": ("epochs", "keep"),
            "simcse": ("epochs", "keep"),
            "ct": ("replacement", None),
        }[c["objective"]]
    from trainables.methods.tsdae.settings import with_corpus_epochs

    simcse = _resolve("simcse", corpus_size=65_536, simcse_settings="simcse-paper")
    assert simcse["steps"] == 1024  # its own budget: one epoch
    assert with_corpus_epochs(simcse, 10)["steps"] == 10_240  # the figure's: ten
    assert with_corpus_epochs(_resolve("simcse", corpus_size=65_537), 10)["steps"] == 1290  # a last batch of 1
    assert with_corpus_epochs(_resolve("tsdae", corpus_size=1_000_000), 10)["steps"] == 100_000  # the cap
    assert with_corpus_epochs(_resolve("tsdae", corpus_size=1_000_000), 10, cap=500)["steps"] == 500  # --steps


@pytest.mark.parametrize(
    "flags, message",
    [
        ("--objective tsdae --max-sentences 7", "--max-sentences 7: 7 sentence(s), but one batch of --objective tsdae"),
        ("--objective ct --max-sentences 29", "one batch of --objective ct needs 30"),
        ("--objective mlm --batch-size 16 --max-sentences 128,8 --objective tsdae", "needs 16"),
    ],
)
def test_a_corpus_that_fills_no_batch_is_refused_by_the_plan_and_its_dry_run(
    flags, message, tmp_path, data_dir, tiny_models
):
    """A corpus smaller than a batch that is never trained smaller (TSDAE's drop_last, CT's loader) is
    refused by the plan and, before any data is read, by the check a dry run makes; a smaller batch is
    trained where the code trains one (MLM, SimCSE)."""
    from sweeps.engine.runner import parser_for
    from trainables.methods.tsdae.method import TSDAE

    with pytest.raises(SweepInputError, match=re.escape(message)):
        _plan(tmp_path, data_dir, tiny_models["bert"], flags + " --eval-sets none")
    with pytest.raises(SweepInputError, match=re.escape(message)):
        TSDAE.check(parser_for("tsdae").parse_args([*flags.split(), "--eval-sets", "none"]))
    ok = _plan(tmp_path, data_dir, tiny_models["bert"], "--objective mlm,simcse --max-sentences 7 --eval-sets none")
    assert {(c["objective"], c["batch_size"], c["epoch_steps"]) for c in ok.configs} == {
        ("mlm", 7, 1),
        ("simcse", 7, 1),
    }


def test_scoring_encodes_at_the_models_length_whatever_the_training_length(tiny_models, stsb_sentences):
    from trainables.methods.tsdae.trainable import TSDAETrainable

    assert _resolve("simcse", model_max=512)["max_length"] == 32 and _resolve("simcse")["eval_max_length"] == 512
    assert _resolve("ct", eval_max_length={"ct": 64, "*": 128})["eval_max_length"] == 64
    training = _training(tiny_models["bert"], "simcse", stsb_sentences[:50], batch_size=8, max_length=8)
    long = " ".join(stsb_sentences[:6])
    seen = []

    class Suite:
        sentences = [long]

        def score(self, embeddings):
            seen.append(embeddings)
            return {}

    trial = object.__new__(TSDAETrainable)
    trial.st, trial.trial_config = training.st, training.config
    assert training.config["eval_max_length"] == 64 and training.st.max_seq_length == 8
    trial._scores(Suite())
    assert training.st.max_seq_length == 8  # the training length is back for the next steps
    truncated = training.st.encode([long], convert_to_numpy=True)
    assert not np.allclose(seen[0], truncated)
    training.st.max_seq_length = 64
    assert np.allclose(seen[0], training.st.encode([long], convert_to_numpy=True), atol=1e-6)


@pytest.mark.parametrize("scores, kept", [((0.7, 0.5), 1), ((0.4, 0.6), 2), ((0.5, 0.5), 2)])
def test_top_ct_eval_keeps_the_better_copy_of_each_epoch(scores, kept, tiny_models, stsb_sentences):
    """The CT code: after each epoch both copies are scored on STS-B dev and the better (copy 2 on a
    tie: `eval_1 > eval_2`) is the epoch's model; the trial records which copy its best weights are."""
    import torch

    from trainables.methods.tsdae.trainable import TSDAETrainable

    training = _training(tiny_models["bert"], "ct", stsb_sentences[:50], batch_size=8, ct_keep="better")
    training.config["ct_keep"] = "better"
    first = training.first_copy()
    assert first is training.loss.model1 and first is not training.st
    with torch.no_grad():
        for p in first.parameters():
            p.add_(0.5)
    trial = object.__new__(TSDAETrainable)
    trial.st, trial.training, trial.trial_config, trial.dev, trial.suite = (
        training.st,
        training,
        training.config,
        0,
        None,
    )
    trial.best_copy = trial.epoch_copy = 2
    trial._scores = lambda suite, model=None: {
        "stsb_dev_spearman": scores[0] if model is first else scores[1],
        "stsb_dev_pearson": 0.0,
    }
    metrics = trial.evaluate()
    assert (metrics["dev_spearman"], metrics["dev_spearman_copy1"], metrics["dev_spearman_copy2"]) == (
        max(scores),
        *scores,
    )
    trial.remember_best()
    source = first if kept == 1 else training.st
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in trial.best_weights.items())
    assert trial.final_metrics() == {"best_copy": kept}
    plain = _training(tiny_models["bert"], "ct", stsb_sentences[:50], batch_size=8)
    assert plain.first_copy() is None  # the default: sentence-transformers' second copy alone


def test_the_tsdae_table2_estimate_counts_the_trials_its_plan_runs():
    from sweeps.engine.runner import parser_for
    from trainables.methods.tsdae import paper as tsdae_paper

    parser = parser_for("tsdae")
    parser.set_defaults(**tsdae_paper.PRESETS["tsdae-table2"].flags)
    estimate = tsdae_paper.estimate(parser.parse_args([]))
    assert estimate.trials == len(estimate.costs) == 4 * (4 * 5 + 1)  # the untrained encoder once per corpus
    assert estimate.gpu_hours == pytest.approx(sum(c.seconds for c in estimate.costs) / 3600)
    assert min(c.seconds for c in estimate.costs) == 0  # the untrained encoder trains no step
    assert all(c.memory_bytes > 0 and c.weight_bytes > 0 for c in estimate.costs)


def test_the_sed_teachers_command_trains_uncased_bert_large_keeping_the_better_copy():
    import shlex

    from sweeps.engine.runner import parser_for
    from trainables.methods.sed import paper

    argv = shlex.split(paper.TEACHERS_COMMAND)
    assert argv[:2] == ["python", "sweeps/tsdae.py"]
    args = parser_for("tsdae").parse_args(argv[2:])
    assert (args.models, args.ct_keep, args.eval_steps, args.final_weights) == (
        ["bert-large-uncased"],
        "better",
        500,
        "best-dev",
    )
    assert paper.PRESETS["sed-table3"].flags["student"] == "bert-large-uncased"


def test_a_tsdae_table2_simcse_run_records_the_papers_simcse(tmp_path, data_dir, tiny_models):
    from sweeps.engine import presets
    from sweeps.engine.runner import parser_for, plan_sweep
    from trainables.methods.tsdae.method import TSDAE

    parser = parser_for("tsdae")
    argv = sweep_args(
        tiny_models["bert"],
        "--preset tsdae-table2 --objective simcse --corpus wiki --eval-sets none --max-sentences 600 --seeds 0",
        *_plan_flags(tmp_path, data_dir),
    )
    args = presets.apply(parser, argv, parser.parse_args(argv), TSDAE)
    (config,) = plan_sweep(args, method="tsdae").configs
    assert (config["batch_size"], config["lr"], config["mlp"], config["simcse_settings"]) == (
        512,
        5e-5,
        "keep",
        "tsdae-paper",
    )


def test_the_old_method_flag_still_chooses_the_objectives_with_a_warning(capsys):
    """`--objective` was `--method` (whose name clashed with the trial's `method` key): the old flag still
    works, with a warning, and a sweep recorded under the old name resumes under the new one."""
    from sweeps.engine.runner import parser_for
    from trainables.methods.tsdae.method import TSDAE

    args = parser_for("tsdae").parse_args(["--method", "mlm,ct"])
    assert args.objectives == ["mlm", "ct"]
    assert "--method is now --objective" in capsys.readouterr().err
    assert parser_for("tsdae").parse_args(["--objective", "simcse,simcse"]).objectives == ["simcse"]
    assert TSDAE.renamed == {"method": "objectives"}
    assert all("method" not in p.flags and "objectives" in p.flags for p in TSDAE.presets.values())


def test_the_tsdae_stage_declares_its_settings_with_tsdaes_paper_values():
    """`--improvement tsdae`'s `--tsdae-*` settings (TsdaeStage.settings): TSDAE's paper values (settings.py
    PAPER) but for the project's step budget and length; none goes into a trial config as it is (the
    trials record them through `downstream_params`)."""
    from trainables.methods.tsdae.settings import PAPER
    from trainables.methods.tsdae.stage import TsdaeStage
    from trainables.stages.upstream import STAGES

    declared = {s.name: s for s in STAGES.get("tsdae").settings}
    assert STAGES.get("tsdae") is TsdaeStage
    assert list(declared) == [
        "tsdae_steps",
        "tsdae_batch_size",
        "tsdae_lr",
        "tsdae_pooling",
        "tsdae_noise",
        "tsdae_max_length",
        "tsdae_corpus",
        "tsdae_max_sentences",
    ]
    assert not any(s.config for s in declared.values())
    defaults = {name: s.default for name, s in declared.items()}
    assert (defaults["tsdae_lr"], defaults["tsdae_batch_size"], defaults["tsdae_pooling"]) == tuple(
        PAPER["tsdae"][k].value for k in ("lr", "batch_size", "pooling")
    )
    assert declared["tsdae_lr"].source == PAPER["tsdae"]["lr"].source
    assert (defaults["tsdae_steps"], defaults["tsdae_max_length"], defaults["tsdae_noise"]) == (10_000, 128, "delete")
    with pytest.raises(SweepInputError, match="--tsdae-steps must be a positive integer"):
        declared["tsdae_steps"].parse("0")
    with pytest.raises(SweepInputError, match="--tsdae-lr must be positive"):
        declared["tsdae_lr"].parse("-1")
    typed = {name: s.parse(s.default) for name, s in declared.items()}
    assert TsdaeStage.downstream_params(typed) == {**defaults, "tsdae_lr": 3e-5, "tsdae_max_sentences": None}
    assert TsdaeStage.config(typed)["lr"] == 3e-5 and TsdaeStage.config(typed)["steps"] == 10_000
