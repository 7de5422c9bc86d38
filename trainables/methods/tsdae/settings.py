"""What each objective of a TSDAE sweep trains with, and where each value comes from (docs/methods/tsdae.md M6,
"Settings"): by default every objective runs at its own paper's settings (`PAPER`); `--shared-settings`
runs every objective at TSDAE's (`SHARED`); a flag given on the command line (`--lr`, `--batch-size`,
`--pooling`, `--steps`, `--eval-steps`, `--max-length`, `--eval-max-length`, `--final-weights`: the
per-objective settings of method.py `SETTINGS`, typed by trainables/core/settings.py) sets that value
for every objective either way, or, written `objective=value` (`--batch-size simcse=512`,
`--lr 3e-5,ct=1e-5`), for the objectives it names only. SimCSE runs as the TSDAE paper ran it
(`--simcse-settings tsdae-paper`: Appendix B's batch 512, lr 5e-5 and linear layer + tanh over [CLS]
kept at test time) or at the SimCSE paper's later settings (`simcse-paper`). `resolve` gives the
values a trial really runs with; they are its params.

Sources: TSDAE = Wang, Reimers and Gurevych (2021), ../shared/papers/tsdae.txt; ST v1.1.0 = the
sentence-transformers release that added TSDAE (April 2021: `fit`, the TSDAE example
train_askubuntu_tsdae.py); SimCSE = princeton-nlp/SimCSE run_unsup_example.sh and train.py: of
2021-04-28 (`SIMCSE_APRIL`, what the TSDAE paper ran) or of 2021-05-11 on (`PAPER["simcse"]`, the
SimCSE paper's published unsupervised BERT-base settings); CT = FreddeFrallan/Contrastive-Tension (ExampleTraining.py,
Training.py: "hyperparameters from the original CT paper"); Devlin = BERT (Devlin et al. 2019,
Appendix A.2), whose setup the TSDAE paper keeps for MLM but for steps, batch and learning rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainables.core.settings import value_for

MODEL_MAX = "model-max"  # the model's own limit (tokenizer and position embeddings), resolved per model


@dataclass(frozen=True)
class Sourced:
    """A value of a paper's settings and where it comes from."""

    value: object
    source: str


S = Sourced
TSDAE_B = "TSDAE paper Appendix B"
PAPER: dict[str, dict[str, Sourced]] = {
    "tsdae": {
        "steps": S(100_000, TSDAE_B),
        "batch_size": S(8, TSDAE_B),
        "lr": S(3e-5, TSDAE_B),
        "optimizer": S("adamw", TSDAE_B),
        "schedule": S("constant", "ST v1.1.0 TSDAE example (scheduler='constantlr')"),
        "warmup_steps": S(0, "ST v1.1.0 TSDAE example (constant rate)"),
        "weight_decay": S(0.0, "ST v1.1.0 TSDAE example (weight_decay=0)"),
        "clip": S(1.0, "ST v1.1.0 fit (max_grad_norm=1)"),
        "pooling": S("cls", "TSDAE paper §3.2, Appendix A Table 7"),
        "max_length": S(MODEL_MAX, "ST v1.1.0 models.Transformer (no max_seq_length: the tokenizer's limit)"),
        "dropout": S(True, "ST v1.1.0 fit (loss_model.train())"),
        "decoder_dropout": S(True, "ST v1.1.0 fit: loss_model.train() puts the loss's decoder in train mode"),
        "final_weights": S("last", "TSDAE paper Appendix B (a fixed number of steps, no early stopping)"),
        "eval_steps": S(1_000, "ST v1.1.0 TSDAE example (evaluation_steps=1000); scores only"),
    },
    "mlm": {
        "steps": S(100_000, "TSDAE paper §5.2"),
        "batch_size": S(8, "TSDAE paper §5.2"),
        "lr": S(5e-5, "TSDAE paper §5.2"),
        "optimizer": S("adamw", "Devlin (Adam with decoupled weight decay)"),
        "schedule": S("linear", "Devlin (warm-up, then linear decay)"),
        "warmup_steps": S(0.1, "Devlin (10,000 steps: 10 % of the TSDAE paper's 100K)"),
        "weight_decay": S(0.01, "Devlin"),
        "clip": S(1.0, "Devlin's released optimizer (global norm 1.0)"),
        "pooling": S("mean", "TSDAE paper §5.2"),
        "max_length": S(128, "Devlin (128 tokens for 90 % of the steps)"),
        "dropout": S(True, "Devlin (dropout 0.1)"),
        "final_weights": S("last", "TSDAE paper Appendix B"),
        "eval_steps": S(1_000, "project (scores only)"),
    },
    "simcse": {  # --simcse-settings simcse-paper; tsdae-paper replaces what SIMCSE_APRIL names
        "steps": S("epoch", "SimCSE (num_train_epochs 1): one pass over the corpus"),
        "batch_size": S(64, "SimCSE (per_device_train_batch_size 64)"),
        "lr": S(3e-5, "SimCSE (learning_rate 3e-5)"),
        "optimizer": S("adamw", "SimCSE (transformers Trainer)"),
        "schedule": S("linear", "SimCSE (transformers Trainer: linear decay to 0, no warm-up)"),
        "warmup_steps": S(0, "SimCSE (transformers Trainer default)"),
        "weight_decay": S(0.0, "SimCSE (transformers Trainer default)"),
        "clip": S(1.0, "SimCSE (transformers Trainer max_grad_norm)"),
        "pooling": S("cls", "SimCSE (pooler_type cls)"),
        "mlp": S("train", "SimCSE (--mlp_only_train: linear + tanh over [CLS] in training only)"),
        "temperature": S(0.05, "SimCSE (temp 0.05)"),
        "max_length": S(32, "SimCSE (max_seq_length 32)"),
        "dropout": S(True, "SimCSE (dropout is the augmentation)"),
        "final_weights": S("best-dev", "SimCSE (load_best_model_at_end on STS-B dev); TSDAE paper footnote 8"),
        "eval_steps": S(125, "SimCSE (eval_steps 125)"),
    },
    "ct": {  # --ct-variant official; in-batch takes AdamW from TSDAE's column
        "steps": S(100_000, TSDAE_B),
        "batch_size": S(16, "CT code (batch_size 16: 2 groups of 1 positive + 7 negatives)"),
        "lr": S(1e-5, "TSDAE paper Appendix B; CT code (1e-5 ... 2e-6 at 500/1000/1500/2000 steps)"),
        "optimizer": S("rmsprop", "TSDAE paper Appendix B; CT code"),
        "schedule": S("ct-piecewise", "TSDAE paper Appendix B; CT code"),
        "warmup_steps": S(0, "CT code"),
        "weight_decay": S(0.0, "CT code"),
        "clip": S(None, "CT code (no clipping)"),
        "pooling": S("mean", "TSDAE paper Appendix B; CT code"),
        "max_length": S(75, "CT code (max_sent_len 75)"),
        "dropout": S(False, "CT code (training=False)"),
        "final_weights": S("last", "TSDAE paper Appendix B"),
        "eval_steps": S(1_000, "project (scores only)"),
    },
    "none": {
        "pooling": S("mean", "TSDAE paper §5.1 (BERT-base-uncased with mean pooling)"),
        "max_length": S(MODEL_MAX, "the model's limit"),
    },
}
SIMCSE_APRIL_SOURCE = "SimCSE run_unsup_example.sh of 2021-04-28, as TSDAE paper Appendix B ran it"
SIMCSE_APRIL = {
    "batch_size": S(512, f"{SIMCSE_APRIL_SOURCE} (batch size 512)"),
    "lr": S(5e-5, f"{SIMCSE_APRIL_SOURCE} (AdamW, learning rate 5e-5)"),
    "mlp": S("keep", f"{SIMCSE_APRIL_SOURCE} (pooler_type cls: linear + tanh over [CLS], kept at test time)"),
}
del S
SIMCSE_SETTINGS = ("tsdae-paper", "simcse-paper")

SHARED = {  # --shared-settings: TSDAE's values for every objective
    **{k: s.value for k, s in PAPER["tsdae"].items() if k not in ("decoder_dropout",)},
    "temperature": 0.05,
}
FLAGS = ("steps", "batch_size", "lr", "pooling", "max_length", "eval_max_length", "eval_steps", "final_weights")
CORPUS_STEP_CAP = 100_000  # the corpus-size figure (§7.1): "10 epochs up to 100k training steps"
# How each objective's code forms batches from the corpus. `epochs`: a shuffled pass over the corpus,
# every sentence once an epoch, then a new shuffle; the last, smaller batch of an epoch trained (`keep`:
# transformers' Trainer, which SimCSE's train.py and sentence-transformers' MLM example train with) or
# dropped (`drop`: sentence-transformers' TSDAE example, `DataLoader(shuffle=True, drop_last=True)`).
# CT draws its sentences with replacement (`replacement`), as the CT code samples its pairs; an epoch of
# CT is `ContrastiveTensionDataLoader`'s: as many batches as the corpus fills, each using 2 x batch -
# batch / 8 sentences (a positive pair takes one).
LAST_BATCH = {"tsdae": "drop", "mlm": "keep", "simcse": "keep"}
FINAL_WEIGHTS = ("best-dev", "last")
SCHEDULES = ("constant", "linear", "ct-piecewise")
CT_RATES = (1e-5, 8e-6, 6e-6, 4e-6, 2e-6)
CT_BOUNDARIES = (500, 1000, 1500, 2000)
CT_GROUP = 8  # M5: groups of 8 pairs, 1 positive and 7 negatives


def flag_value(args, flag: str, objective: str):
    """The value of a per-objective setting (`Setting(per=...)`, trainables/core/settings.py) for
    `objective`: its own (`simcse=512`), else the one given for every objective, else None (the
    objective's own setting)."""
    return value_for(getattr(args, flag, None), objective)


def resolve(objective: str, args, corpus_size: int, model_max: int) -> dict:
    """The settings `objective` runs with (its trial params): its paper's (or with --shared-settings
    TSDAE's), each flag given on the command line over them (for every objective or for this one),
    `epoch` steps and `model-max` lengths resolved for the corpus and the model, and the settings an
    objective does not use set to None."""
    shared = bool(getattr(args, "shared_settings", False))
    ct_official = objective == "ct" and getattr(args, "ct_variant", "official") == "official"
    eval_length = flag_value(args, "eval_max_length", objective) or MODEL_MAX
    eval_length = int(model_max) if eval_length == MODEL_MAX else min(int(eval_length), int(model_max))
    if objective == "none":
        base = {k: s.value for k, s in PAPER["none"].items()}
        if shared:
            base.update(pooling=SHARED["pooling"], max_length=SHARED["max_length"])
        for flag in ("pooling", "max_length"):
            if flag_value(args, flag, objective) is not None:
                base[flag] = flag_value(args, flag, objective)
        out = {**dict.fromkeys(SETTING_KEYS), **base, "steps": 0, "epochs": 0, "optimizer": "none", "schedule": "none"}
        out.update(dropout=False, mlp="none", settings="shared" if shared else "paper")
        out["max_length"] = model_max if out["max_length"] == MODEL_MAX else min(int(out["max_length"]), model_max)
        out["eval_max_length"] = eval_length
        return out
    if shared:
        values = dict(SHARED)
        if ct_official:  # the objective itself: two copies without dropout (CT code)
            values["dropout"] = False
    else:
        column = "tsdae" if objective == "ct" and not ct_official else objective
        values = {k: s.value for k, s in PAPER[column].items()}
        if objective == "ct" and not ct_official:
            values.update(pooling="mean")  # CT's pooling (TSDAE paper Appendix B) with AdamW
        if objective == "simcse" and simcse_settings(args) == "tsdae-paper":
            values.update({k: s.value for k, s in SIMCSE_APRIL.items()})
    for flag in FLAGS:
        given = flag_value(args, flag, objective)
        if given is not None:
            values[flag] = given
    out = dict.fromkeys(SETTING_KEYS)
    out.update(values)
    out["batch_size"] = int(out["batch_size"])
    out.update(batching(objective, ct_official, out["batch_size"], corpus_size))
    if out["last_batch"] == "keep":  # a corpus smaller than a batch is one batch of all of it
        out["batch_size"] = min(out["batch_size"], int(corpus_size) or out["batch_size"])
    if out["steps"] == "epoch":
        out["steps"] = max(1, out["epoch_steps"])
    if isinstance(out["warmup_steps"], float):
        out["warmup_steps"] = int(round(out["warmup_steps"] * int(out["steps"])))
    if out["max_length"] == MODEL_MAX:
        out["max_length"] = model_max
    for key in ("steps", "max_length"):
        out[key] = int(out[key])
    out["max_length"] = min(out["max_length"], int(model_max))  # what the model can take is what runs
    out["eval_max_length"] = eval_length
    out["eval_steps"] = min(int(out["eval_steps"]), out["steps"])
    out["epochs"] = math.ceil(out["steps"] / out["eval_steps"])
    out["lr"] = float(out["lr"])
    out["mlp"] = out.get("mlp") or "none"
    if objective != "simcse":
        out["temperature"], out["mlp"] = None, "none"
    out["simcse_settings"] = simcse_settings(args) if objective == "simcse" and not shared else None
    out["decoder_dropout"] = bool(out["dropout"]) if objective == "tsdae" else None
    out["settings"] = "shared" if shared else "paper"
    return out


def batch_sentences(objective: str, ct_official: bool, batch: int) -> int:
    """The corpus sentences one full batch of `objective` takes: official CT's `batch` pairs, of which
    one in `CT_GROUP` is a sentence with itself; else `batch`."""
    return 2 * batch - batch // CT_GROUP if objective == "ct" and ct_official else batch


def batching(objective: str, ct_official: bool, batch: int, corpus_size: int) -> dict:
    """How `objective` forms its batches (`LAST_BATCH`) and the optimiser steps one epoch of a corpus of
    `corpus_size` sentences takes: `sampling`, `last_batch` and `epoch_steps` (its trial params; 0 where
    the corpus fills no batch, which the plan refuses)."""
    corpus_size = int(corpus_size or 0)
    if objective == "ct":
        return {
            "sampling": "replacement",
            "last_batch": None,
            "epoch_steps": corpus_size // batch_sentences(objective, ct_official, batch),
        }
    last = LAST_BATCH[objective]
    steps = corpus_size // batch if last == "drop" else math.ceil(corpus_size / batch)
    return {"sampling": "epochs", "last_batch": last, "epoch_steps": steps}


def simcse_settings(args) -> str:
    return getattr(args, "simcse_settings", None) or SIMCSE_SETTINGS[0]


SETTING_KEYS = (
    "steps",
    "batch_size",
    "lr",
    "optimizer",
    "schedule",
    "warmup_steps",
    "weight_decay",
    "clip",
    "pooling",
    "mlp",
    "temperature",
    "max_length",
    "eval_max_length",
    "dropout",
    "decoder_dropout",
    "final_weights",
    "eval_steps",
    "sampling",
    "last_batch",
    "epoch_steps",
)


def learning_rate(config: dict, step: int) -> float:
    """The rate of optimiser step `step` (0-based): `constant`; `linear` (transformers'
    get_linear_schedule_with_warmup: up from 0 over `warmup_steps`, then down to 0 at `steps`);
    `ct-piecewise` (the CT code's 1e-5/8e-6/6e-6/4e-6/2e-6 at 500/1000/1500/2000 steps)."""
    lr, schedule = float(config["lr"]), config["schedule"]
    if schedule == "ct-piecewise":
        rate = CT_RATES[sum(step >= b for b in CT_BOUNDARIES)]
        return rate if lr == CT_RATES[0] else rate * lr / CT_RATES[0]
    if schedule == "linear":
        warmup, total = int(config.get("warmup_steps") or 0), int(config["steps"])
        if step < warmup:
            return lr * step / max(1, warmup)
        return lr * max(0.0, (total - step) / max(1, total - warmup))
    return lr


def corpus_settings(objective: str, args, corpus_size: int, model_max: int, corpus: str) -> dict:
    """`resolve`'s settings of `objective` on a corpus of `corpus_size` sentences, with `--corpus-epochs`
    passes over it where given; a corpus one epoch of the objective's batches cannot use (`epoch_steps`
    0: fewer sentences than a batch that is never trained smaller) refused, naming `corpus` (the flag that
    gave it) and the sentences a batch needs."""
    from trainables.core.errors import SweepInputError

    settings = resolve(objective, args, corpus_size, model_max)
    if objective == "none":
        return settings
    if settings["epoch_steps"] == 0:
        ct_official = objective == "ct" and getattr(args, "ct_variant", "official") == "official"
        needed = batch_sentences(objective, ct_official, settings["batch_size"])
        why = (
            "CT's loader (ContrastiveTensionDataLoader) fills a batch of pairs only from that many"
            if objective == "ct"
            else "its code drops an epoch's last incomplete batch, so an epoch would train nothing"
        )
        raise SweepInputError(
            f"{corpus}: {corpus_size} sentence(s), but one batch of --objective {objective} needs {needed} ({why}); "
            f"pass a larger corpus or --max-sentences, or a smaller --batch-size"
        )
    if getattr(args, "corpus_epochs", None) is not None:
        settings = with_corpus_epochs(settings, args.corpus_epochs, flag_value(args, "steps", objective))
    return settings


def with_corpus_epochs(settings: dict, epochs: int, cap: int | None = None) -> dict:
    """`epochs` passes over the corpus (`epoch_steps` each, as the objective's code forms its batches), up
    to `cap` steps (the corpus-size figure's rule, §7.1: "10 epochs up to 100k training steps" for every
    objective, SimCSE's one-epoch budget included); `cap` None: `CORPUS_STEP_CAP`, the paper's."""
    cap = CORPUS_STEP_CAP if cap is None else int(cap)
    steps = min(cap, max(1, epochs * int(settings["epoch_steps"])))
    eval_steps = min(int(settings["eval_steps"]), steps)
    out = {**settings, "steps": steps, "eval_steps": eval_steps, "epochs": math.ceil(steps / eval_steps)}
    if out.get("schedule") == "linear" and settings.get("warmup_steps"):
        out["warmup_steps"] = int(round(settings["warmup_steps"] * steps / int(settings["steps"])))
    return out
