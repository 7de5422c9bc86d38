"""SED's teachers and the `sed-targets` stage, without Ray: the teachers a `--teachers` list names
(models, folders, `runs:/` and `sweep:` references), their pooled embeddings, and the ensemble's
targets (the mean of the teachers' embeddings of every corpus sentence) computed once in the stage
store with the teachers' and the ensemble's embeddings of the evaluation sentences."""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trainables.core.errors import SweepInputError
from trainables.core.settings import Names
from trainables.stages.upstream import STAGES, StageKind, encoding_result

if TYPE_CHECKING:
    import torch

DEV_SET = "stsb_dev"


TARGETS_FILE = "targets.npy"


SWEEP_PREFIX = "sweep:"


# --- teachers, corpus --------------------------------------------------------------------------
def sweep_reference(spec: str) -> tuple[str, str | None]:
    """(sweep name or parent run id, layer or None) of `sweep:<sweep>[:layer=l]`; ValueError otherwise."""
    sweep, _, option = spec[len(SWEEP_PREFIX) :].partition(":")
    layer = None
    if option:
        key, _, value = option.partition("=")
        if key != "layer" or not value.strip().isdigit():
            raise ValueError(f"{spec!r}: after the sweep, only :layer=<l> is understood")
        layer = value.strip()
    if not sweep.strip():
        raise ValueError(f"{spec!r} names no sweep: write sweep:<sweep name or parent run id>[:layer=l]")
    return sweep, layer


@dataclass(frozen=True)
class Teachers(Names):
    """`--teachers`: two or more models, folders or `runs:/<run id>` (comma-separated, kept in order,
    once each), or one `sweep:<sweep>[:layer=l]` alone; empty: none given (only `--smoke-test`,
    which builds its own, runs without)."""

    empty: bool = True

    def parse(self, value):
        names = super().parse(value)
        sweeps = [name for name in names if name.startswith(SWEEP_PREFIX)]
        if sweeps and len(names) > 1:
            raise ValueError(f"{sweeps[0]!r} stands alone: a sweep's trials are the whole ensemble")
        if sweeps:
            sweep_reference(sweeps[0])
        elif len(names) == 1:
            raise ValueError(f"{names[0]!r}: an ensemble needs at least two teachers")
        return names

    def describe(self) -> str:
        return "two or more comma-separated models, folders or runs:/<run id>, or one sweep:<sweep>[:layer=l]"

    def bad_values(self) -> list[str]:
        return ["one-model", "sweep:teachers:depth=2", "sweep:teachers,a-model"]


def resolve_teachers(teachers: list[str], mlflow_uri: str) -> list[tuple[str, Path]]:
    """(label, local model folder) of every teacher of `--teachers` (its typed value, `Teachers`)."""
    from trainables.encoders.loading import resolve_model

    if len(teachers) == 1 and teachers[0].startswith(SWEEP_PREFIX):
        return _sweep_teachers(teachers[0], mlflow_uri)
    if len(teachers) < 2:
        raise SweepInputError(f"--teachers {','.join(teachers)!r}: an ensemble needs at least two teachers")
    return [(name, resolve_model(name, mlflow_uri)) for name in teachers]


def _sweep_teachers(spec: str, mlflow_uri: str) -> list[tuple[str, Path]]:
    from trainables.core.schema import TAG_CHECKPOINT, TAG_PARENT, TAG_ROLE, TAG_SWEEP
    from trainables.encoders.run_refs import client as store_client
    from trainables.encoders.run_refs import resolve_run

    try:
        sweep, layer = sweep_reference(spec)
    except ValueError as error:
        raise SweepInputError(f"--teachers {error}") from None
    client = store_client(mlflow_uri, f"--teachers {spec!r}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    parents = (
        [
            r.info.run_id
            for r in client.search_runs(experiments, f"tags.`{TAG_SWEEP}` = '{sweep}'")
            if r.data.tags.get(TAG_ROLE) == "sweep"
        ]
        if experiments
        else []
    )
    if not parents:
        try:
            parents = [client.get_run(sweep).info.run_id]
        except Exception:
            raise SweepInputError(
                f"--teachers {spec!r}: no sweep named {sweep!r} (nor a parent run with that id) in the "
                f"MLflow store {mlflow_uri}; pass --mlflow-uri of the sweep that trained them"
            ) from None
    runs = [
        r
        for parent in parents
        for r in client.search_runs(experiments, f"tags.`{TAG_PARENT}` = '{parent}'")
        if r.data.tags.get(TAG_ROLE) == "trial" and r.info.status == "FINISHED" and r.data.tags.get(TAG_CHECKPOINT)
    ]
    modelless = [r for r in runs if r.data.params.get("keep_checkpoints") == "none"]
    runs = [r for r in runs if r not in modelless]
    layers = sorted({r.data.params.get("layer") for r in runs} - {None}, key=int)
    if layer is not None:
        runs = [r for r in runs if r.data.params.get("layer") == layer]
    elif len(layers) > 1:
        raise SweepInputError(
            f"--teachers {spec!r}: the sweep's trials are at layers {', '.join(layers)}; "
            f"pick one, e.g. {spec}:layer={layers[-1]}"
        )
    if len(runs) < 2:
        raise SweepInputError(
            f"--teachers {spec!r}: {len(runs)} finished trial(s) that kept a model found"
            + (f" ({len(modelless)} more ran with --keep-checkpoints none and kept none)" if modelless else "")
            + "; an ensemble needs at least two (e.g. the seeds of one layer)"
        )
    runs.sort(key=lambda r: (r.data.params.get("model", ""), int(r.data.params.get("seed", 0) or 0), r.info.run_id))
    return [
        (f"{r.info.run_name} (runs:/{r.info.run_id})", resolve_run(f"runs:/{r.info.run_id}", mlflow_uri)) for r in runs
    ]


def embedding_size(path) -> int:
    from trainables.encoders.loading import load_config

    return int(load_config(path).hidden_size)


def check_sizes(teachers: list[tuple[str, Path]], student: tuple[str, Path]) -> int:
    sizes = {label: embedding_size(path) for label, path in [*teachers, student]}
    if len(set(sizes.values())) > 1:
        listed = "; ".join(f"{label}: {size}" for label, size in sizes.items())
        raise SweepInputError(
            f"SED needs teachers and a student of one embedding size (the loss compares the vectors); "
            f"got {listed}. Pick teachers and a student of the same size."
        )
    return next(iter(sizes.values()))


ARCHITECTURE_FIELDS = ("model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")


def architecture(path) -> tuple:
    """What the paper means by one architecture (§5.1: "distillation learners and ensemble models ...
    always share the same architecture"): the config's model type and shape."""
    from trainables.encoders.loading import load_config

    config = load_config(path)
    return tuple(getattr(config, field, None) for field in ARCHITECTURE_FIELDS)


def other_architectures(teachers: list[tuple[str, Path]], student: tuple[str, Path]) -> list[str]:
    """The teachers whose architecture differs from the student's, each named with both (empty: the
    paper's setting)."""
    mine = architecture(student[1])

    def describe(shape):
        return ", ".join(f"{f}={v}" for f, v in zip(ARCHITECTURE_FIELDS, shape))

    return [
        f"{label} ({describe(theirs)}; student {student[0]}: {describe(mine)})"
        for label, path in teachers
        if (theirs := architecture(path)) != mine
    ]


def read_corpus(corpus: str, data_dir, max_sentences: int | None) -> tuple[list[str], str]:
    """(sentences, checksum): `wiki` or a text file, one sentence a line (UTF-8; blank lines dropped;
    refused when it is not text or holds no sentence)."""
    from trainables.data.sentences import WIKI_FILE, read_sentence_lines, read_text_corpus
    from trainables.training.tokenized import subset

    if corpus == "wiki":
        sentences = [line for line in read_sentence_lines(Path(data_dir) / WIKI_FILE) if line.strip()]
    else:
        path = Path(corpus).expanduser()
        if not path.is_file():
            raise SweepInputError(
                f"--corpus {corpus!r}: no such file; pass a text file with one sentence a line, or 'wiki'"
            )
        sentences = read_text_corpus(path)
    if not sentences:
        raise SweepInputError(f"--corpus {corpus!r} holds no sentences")
    sentences = subset(sentences, max_sentences)
    return sentences, hashlib.sha256("\n".join(sentences).encode()).hexdigest()[:32]


def eval_sentences(suite, dev) -> list[str]:
    """The sentences teachers are scored on: the suite's, then STS-B dev's not among them."""
    known = set(suite.sentences)
    return [*suite.sentences, *(s for s in dev.sentences if s not in known)]


# --- pooling ----------------------------------------------------------------------------------
def pooled(model, input_ids, attention_mask, layers: int) -> torch.Tensor:
    """The mean over the last `layers` layers of the masked mean over tokens."""
    import torch

    from trainables.encoders.loading import mean_pool

    output = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=layers > 1)
    states = output.hidden_states[-layers:] if layers > 1 else (output.last_hidden_state,)
    return torch.stack([mean_pool(state, attention_mask) for state in states]).mean(0)


def encode(
    model,
    tokenizer,
    sentences: list[str],
    layers: int,
    batch_size: int = 64,
    device="cpu",
    max_length: int | None = None,
    on_batch=None,
) -> np.ndarray:
    """float32 [n, hidden]: the mean over the last `layers` layers of their mean pooling, from one
    forward pass per batch (trainables/evaluation/zero_shot.py `pooled_layers`), rows in the order of `sentences`."""
    from trainables.encoders.loading import model_depth
    from trainables.evaluation.zero_shot import pooled_layers

    depth = model_depth(model.config)
    chosen = list(range(max(0, depth - layers + 1), depth + 1))
    pooled_by_layer = pooled_layers(
        model,
        tokenizer,
        sentences,
        chosen,
        ["mean"],
        batch_size=batch_size,
        max_length=max_length,
        device=device,
        on_batch=on_batch,
    )
    return np.mean([pooled_by_layer[(layer, "mean")] for layer in chosen], axis=0).astype(np.float32)


# --- the targets stage ------------------------------------------------------------------------
def stage_config(
    teachers: list[tuple[str, Path]],
    corpus: str,
    corpus_checksum: str,
    max_sentences: int | None,
    train_layers: int,
    eval_layers: int,
    sets: list[str],
    batch_size: int = 64,
) -> dict:
    from trainables.stages.store import model_fingerprint

    return {
        "stage": "sed-targets",
        "teachers": [f"{label}@{model_fingerprint(path)}" for label, path in teachers],
        "corpus": corpus,
        "corpus_checksum": corpus_checksum,
        "max_sentences": max_sentences,
        "train_pool_layers": int(train_layers),
        "eval_pool_layers": int(eval_layers),
        "sets": list(sets),
        "batch_size": int(batch_size),
    }


def compute(spec: dict, out_dir: Path) -> dict:
    """Targets and evaluation embeddings of the ensemble (see the module docstring)."""
    import torch
    from transformers import AutoTokenizer

    from trainables.encoders.loading import load_pretrained
    from trainables.evaluation.sets import load_suite
    from trainables.stages.progress import StageProgress

    config = spec["config"]
    started = time.time()
    sentences, _ = read_corpus(spec["corpus_path"], spec["data_dir"], config["max_sentences"])
    suite, dev = load_suite(config["sets"], spec["data_dir"]), load_suite([DEV_SET], spec["data_dir"])
    scored = eval_sentences(suite, dev)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batch = int(config["batch_size"])
    steps = math.ceil(len(sentences) / batch) + math.ceil(len(scored) / batch)
    progress = StageProgress(spec, len(spec["teacher_paths"]) * steps)
    total, evals = None, []
    for index, path in enumerate(spec["teacher_paths"]):
        model = load_pretrained(path).to(device)
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        targets = encode(
            model, tokenizer, sentences, config["train_pool_layers"], batch, device, on_batch=progress.step
        )
        total = targets.astype(np.float64) if total is None else total + targets
        evals.append(
            encode(model, tokenizer, scored, config["eval_pool_layers"], batch, device, on_batch=progress.step)
        )
        np.save(Path(out_dir) / f"eval_teacher{index}.npy", evals[-1].astype(np.float16))
    progress.finish()
    np.save(Path(out_dir) / TARGETS_FILE, (total / len(spec["teacher_paths"])).astype(np.float16))
    np.save(Path(out_dir) / "eval_ensemble.npy", np.mean(evals, axis=0).astype(np.float16))
    return {**encoding_result(len(sentences), device, started), "teachers": len(evals)}


@STAGES.register("sed-targets")
class SedTargetsStage(StageKind):
    downstream, task = "sed", "distillation"
    compute = staticmethod(compute)

    @staticmethod
    def params(config: dict) -> dict:
        return {
            "sed_corpus": config["corpus"],
            "sed_teachers": len(config["teachers"]),
            "train_pool_layers": config["train_pool_layers"],
            "eval_pool_layers": config["eval_pool_layers"],
        }
