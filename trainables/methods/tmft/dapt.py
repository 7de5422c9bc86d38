"""The DAPT stage of DAPT+TMFT: masked-language-model pre-training of the full model
(ELECTRA paper; docs/methods/electra.md M3).

Inputs: a model and a sentence corpus (trainables/data/sentences.py; the paper's SNLI+MultiNLI
`AllNLI` sentences where available, here by default SICK + STS-B train + the Wikipedia sample;
the sources go into the stage config and the run's params as `corpus`).
Masking: transformers' `DataCollatorForLanguageModeling`, 15% of tokens, 80/10/10
(mask / random / keep), special and pad tokens never masked, seeded.
Model and head: `AutoModelForMaskedLM`. With `head = "auto"` (default) the checkpoint's MLM head is
used when it has one; a checkpoint without one (an encoder saved as `AutoModel`, e.g. the
sentence-transformers models, or an ELECTRA discriminator) gets a newly initialised head whose
decoder is tied to the input embeddings, and every head parameter is trained. `head = "authors"`
does what the authors' code does for every model: a new head, decoder tied to the input
embeddings, and the head's other parameters (transform, bias) left out of the optimiser.
Loss: cross-entropy on the masked positions of the last layer. AdamW lr 2e-5, weight decay 0.01
(not on LayerNorm/bias), batch 32 x gradient accumulation 8 (256 effective), 10 epochs, seed 0,
warm-up over 10% of the optimiser steps then linear decay, gradient clipping 1.0 (the paper).
Variants (stage config, hence params): `schedule = "authors"`, the authors' scheduler, which counted
batches, not optimiser steps, so their warm-up ran for 80% of training and the rate ended near
its peak (docs/methods/index.md ambiguity 8); `clip = None`, the authors' code, which does not clip.

Speed without changing the objective: the vocabulary projection runs only at the masked
positions (the loss and accuracy need no other logits); on the CPU each batch runs in CPU_CHUNKS
length-sorted parts trimmed of their shared padding, whose losses add up to the batch's mean over
its masked tokens (the same gradient; dropout draws differ); the epoch's sums stay on the device
and are read once per epoch.

Output (in the stage directory): `encoder/`, the encoder part of the MLM model after the last
epoch (a model folder with the tokenizer; the TMFT trial truncates it to layer l), and the
per-epoch history (`train_loss`, `masked_accuracy`) returned to the stage store's manifest.
Progress for the driver: optimiser steps done of `epochs x ceil(batches / accumulation)`
(trainables/stages/progress.py).
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

from trainables.core import settings as shared
from trainables.core.errors import SweepInputError
from trainables.core.settings import Auto, Choice, Float, Int, Names, Setting
from trainables.data.sentences import DAPT_SOURCES
from trainables.encoders.mlm import HEADS, MLM_PROBABILITY, mlm_model
from trainables.stages.upstream import STAGES, StageKind, stage_settings

if TYPE_CHECKING:
    import torch

STAGE_DEFAULTS = {
    "epochs": 10,
    "batch_size": 32,
    "accumulation": 8,
    "lr": 2e-5,
    "weight_decay": 0.01,
    "warmup_ratio": 0.1,
    "mlm_probability": MLM_PROBABILITY,
    "mask_replace_prob": 0.8,
    "random_replace_prob": 0.1,
    "seed": 0,
    "head": "auto",
    "max_length": None,
    "schedule": "steps",
    "clip": 1.0,
}
# steps: warm-up over 10% of the optimiser steps; authors: warm-up and decay counted in batches
# while the scheduler steps once per optimiser step, so the rate peaks at 80% of training with
# accumulation 8 (docs/methods/index.md ambiguity 8).
SCHEDULES = ("steps", "authors")
PAPER = "ELECTRA paper §4 (domain-adaptive pre-training)"


class Clip(Auto):
    """A positive gradient-clipping norm or 'none'; runs record it as it was given (`1.0`, `none`)."""

    def to_config(self, value):
        return str(value)


class Sources(Names):
    """Sentence sources, comma- or plus-separated (`sick,wiki`, `sick+wiki`)."""

    def parse(self, value):
        return super().parse(value.replace("+", ",") if isinstance(value, str) else value)


SETTINGS = stage_settings(
    "dapt",
    (
        shared.EPOCHS.but(help="DAPT stage epochs", source=PAPER),
        shared.BATCH_SIZE.but(help="DAPT stage batch size", source=PAPER),
        Setting(
            "accumulation",
            Int(low=1),
            help="gradient accumulation steps (effective batch = batch x this)",
            source=PAPER,
        ),
        shared.LR.but(help="DAPT stage learning rate", source=PAPER),
        Setting(
            "corpus",
            Sources(known=lambda: list(DAPT_SOURCES)),
            ["sick", "stsb-train", "wiki"],
            "comma-separated sentence sources: sick, stsb-train, wiki, allnli (the paper's SNLI+MultiNLI), snli, "
            "multinli",
        ),
        Setting("max_sentences", Int(low=1), None, "a deterministic subset of the corpus (quick runs)"),
        Setting(
            "head",
            Choice(HEADS),
            help="auto: the checkpoint's MLM head, or a new tied one if it has none; authors: always a new head, "
            "only its tied decoder trained",
        ),
        Setting(
            "schedule",
            Choice(SCHEDULES),
            help="steps: warm-up over 10% of the optimiser steps (the paper); authors: counted in batches, so the "
            "rate peaks at 80% of training (the authors' code)",
        ),
        Setting(
            "clip",
            Clip(Float(above=0), word="none"),
            help="gradient clipping norm of the DAPT stage (the paper: 1.0), or 'none' (the authors' code)",
        ),
    ),
    STAGE_DEFAULTS,
)


def stage_config(
    *,
    corpus: str,
    epochs: int,
    batch_size: int,
    accumulation: int,
    lr: float,
    head: str,
    random_init: bool,
    max_sentences: int | None,
    max_length: int | None = None,
    schedule: str = "steps",
    clip: float | None = 1.0,
) -> dict:
    """The stage config that, with the model and the corpus checksum, keys a DAPT stage."""
    if head not in HEADS:
        raise SweepInputError(f"unknown --dapt-head {head!r}; valid: {', '.join(HEADS)}")
    if schedule not in SCHEDULES:
        raise SweepInputError(f"unknown --dapt-schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
    return {
        **STAGE_DEFAULTS,
        "stage": "dapt",
        "corpus": corpus,
        "epochs": int(epochs),
        "batch_size": int(batch_size),
        "accumulation": int(accumulation),
        "lr": float(lr),
        "head": head,
        "random_init": bool(random_init),
        "max_sentences": max_sentences,
        "max_length": max_length,
        "schedule": schedule,
        "clip": None if clip is None else float(clip),
    }


def schedule_steps(config: dict, batches_per_epoch: int, optimizer_steps: int) -> tuple[int, int]:
    """(warm-up steps, training steps) of the linear schedule, which steps once per optimiser step."""
    epochs = max(1, int(config["epochs"]))
    counted = epochs * batches_per_epoch if config.get("schedule", "steps") == "authors" else optimizer_steps
    return math.ceil(float(config["warmup_ratio"]) * counted), counted


CPU_CHUNKS = 4  # length-sorted parts per batch on the CPU, where padding costs its full share


def length_chunk_count(config: dict, device, tokenizer) -> int:
    """Parts per batch: on the CPU a batch runs in CPU_CHUNKS length-sorted parts (less padding,
    the same gradient); on a GPU in one (small parts would wait on kernel launches). Right
    padding only. `config["chunks"]` overrides (tests)."""
    import torch

    if tokenizer.padding_side != "right":
        return 1
    return int(config.get("chunks") or (CPU_CHUNKS if torch.device(device).type == "cpu" else 1))


def length_chunks(batch: dict, chunks: int) -> list[dict]:
    """The batch's rows sorted by length and cut into `chunks` parts, each trimmed of the padding
    columns all its rows share (right padding: the other positions' outputs do not change)."""
    import torch

    if chunks <= 1:
        return [dict(batch)]
    lengths = batch["attention_mask"].sum(1)
    parts = []
    for rows in torch.argsort(lengths, descending=True, stable=True).chunk(chunks):
        width = int(lengths[rows].max())
        parts.append({k: v[rows, :width] for k, v in batch.items()})
    return parts


class _MaskedHead:
    """Computes the MLM decoder (the vocabulary projection) only at the masked positions: a
    forward pre-hook on the output embeddings keeps the rows `select` chose. Where a model calls
    no such module, the full logits come back and `masked_logits` picks the rows itself."""

    def __init__(self, model):
        self.rows = None
        self.fired = False
        output = model.get_output_embeddings()
        self.handle = output.register_forward_pre_hook(self._keep) if output is not None else None

    def _keep(self, module, args):
        self.fired = True
        return (args[0][self.rows],) + tuple(args[1:])

    def select(self, rows: torch.Tensor) -> torch.Tensor:
        self.rows, self.fired = rows, False
        return rows

    def masked_logits(self, logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return logits if self.fired else logits[rows]


@contextlib.contextmanager
def masked_positions_only(model):
    head = _MaskedHead(model)
    try:
        yield head
    finally:
        if head.handle is not None:
            head.handle.remove()


def _tokenized_corpus(spec: dict):
    """(sentences, their sources, the tokenizer, their token ids) of a DAPT stage's corpus."""
    from transformers import AutoTokenizer

    from trainables.data.sentences import dapt_corpus
    from trainables.training.tokenized import subset

    config = spec["config"]
    sentences, sources = dapt_corpus(spec["data_dir"], config["corpus"])
    sentences = subset(sentences, config.get("max_sentences"))
    tokenizer = AutoTokenizer.from_pretrained(str(spec["model_path"]))
    limit = config.get("max_length")
    ids = (
        tokenizer(sentences, truncation=True, max_length=limit)["input_ids"]
        if limit
        else tokenizer(sentences, truncation=True)["input_ids"]
    )
    return sentences, sources, tokenizer, ids


def _collator(tokenizer, config: dict, seed: int):
    """The masking of DAPT's MLM objective, as the stage's config sets it."""
    from transformers import DataCollatorForLanguageModeling

    return DataCollatorForLanguageModeling(
        tokenizer,
        mlm=True,
        mlm_probability=float(config["mlm_probability"]),
        mask_replace_prob=float(config["mask_replace_prob"]),
        random_replace_prob=float(config["random_replace_prob"]),
        seed=seed,
    )


def compute(spec: dict, out_dir: Path) -> dict:
    """Run the DAPT stage of `spec` (model_path, data_dir, config) and write `out_dir/encoder/`."""
    import torch
    import torch.nn.functional as F
    from transformers import get_linear_schedule_with_warmup

    from trainables.encoders.precision import adamw, resolve
    from trainables.stages.progress import StageProgress
    from trainables.training.device import pick_device, seed_everything
    from trainables.training.pair_training import adamw_param_groups

    started = time.perf_counter()
    config = spec["config"]
    seed = int(config["seed"])
    seed_everything(seed)
    sentences, sources, tokenizer, ids = _tokenized_corpus(spec)
    device = pick_device()
    precision = resolve(config.get("precision", "fp32"), device)
    precision.apply_matmul_settings()
    model, head_source = mlm_model(spec["model_path"], config["head"], bool(config.get("random_init")), seed)
    model.to(device)
    collator = _collator(tokenizer, config, seed)
    batch_size, accumulation, epochs = int(config["batch_size"]), int(config["accumulation"]), int(config["epochs"])
    batches_per_epoch = math.ceil(len(ids) / batch_size)
    steps_per_epoch = math.ceil(batches_per_epoch / accumulation)
    steps = max(1, epochs * steps_per_epoch)
    optimizer = adamw(adamw_param_groups(model, float(config["weight_decay"])), float(config["lr"]), device)
    scaler = precision.grad_scaler()
    scheduler = get_linear_schedule_with_warmup(optimizer, *schedule_steps(config, batches_per_epoch, steps))
    clip = config.get("clip")
    chunks = length_chunk_count(config, device, tokenizer)
    history = []
    progress = StageProgress(spec, epochs * steps_per_epoch)
    with masked_positions_only(model) as head:
        for epoch in range(1, epochs + 1):
            model.train()
            order = torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed * 100_003 + epoch)).tolist()
            total_loss, total_masked, correct = (torch.zeros((), device=device) for _ in range(3))
            optimizer.zero_grad(set_to_none=True)
            for index in range(batches_per_epoch):
                batch = collator([{"input_ids": ids[i]} for i in order[index * batch_size : (index + 1) * batch_size]])
                batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
                masked = (batch["labels"] != -100).sum()
                for part in length_chunks(batch, chunks):
                    labels = part.pop("labels")
                    selected = head.select(labels != -100)
                    with precision.autocast():
                        logits = model(**part).logits
                    logits = head.masked_logits(logits, selected).float()
                    targets = labels[selected]
                    # the batch's mean over its masked tokens, whatever the chunks (none masked: no gradient)
                    loss = F.cross_entropy(logits, targets, reduction="sum") / masked.clamp(min=1)
                    scaler.scale(loss / accumulation).backward()
                    total_loss += loss.detach() * masked
                    correct += (logits.detach().argmax(-1) == targets).sum()
                total_masked += masked
                if (index + 1) % accumulation == 0 or index + 1 == batches_per_epoch:
                    if clip is not None:
                        scaler.unscale_(optimizer)
                        torch.nn.utils.clip_grad_norm_(model.parameters(), float(clip))
                    scaler.step(optimizer)
                    scaler.update()
                    scheduler.step()
                    optimizer.zero_grad(set_to_none=True)
                    progress.step()
            masked_total = max(1, int(total_masked))  # one host sync per epoch
            history.append(
                {
                    "epoch": epoch,
                    "train_loss": float(total_loss) / masked_total,
                    "masked_accuracy": 100.0 * int(correct) / masked_total,
                }
            )
    progress.finish()
    encoder_dir = Path(out_dir) / "encoder"
    model.base_model.save_pretrained(str(encoder_dir))
    tokenizer.save_pretrained(str(encoder_dir))
    return {
        "history": history,
        "final": {
            "wall_time_s": time.perf_counter() - started,
            **({"final_train_loss": history[-1]["train_loss"]} if history else {}),
        },
        "sentences": len(sentences),
        "corpus": sources,
        "head_source": head_source,
        "optimizer_steps": steps if epochs else 0,
        "device": str(device),
        "precision": precision.name,
        "length_chunks": chunks,
    }


@STAGES.register("dapt")
class DaptStage(StageKind):
    downstream, task = "dapt+tmft", "mlm"
    compute = staticmethod(compute)
    recorded = {"dapt_corpus": "corpus", "dapt_head": "head"}
    settings = SETTINGS
