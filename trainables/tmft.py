"""TMFT: truncated model fine-tuning (ELECTRA paper; METHODS.md M1), on any pair task.

Inputs: sentence pairs of a task (trainables/tasks.py: STS-B, MRPC, SICK; word pairs for the
word-similarity stage), an encoder and a layer l (0 = embedding output).
Model: the encoder physically truncated to its embeddings plus the first l layers; u, v = masked
mean of the last hidden state; the task's loss on (u, v) (STS-B: MSE(cos(u, v), gold / 5); MRPC:
BCE-with-logits on the cosine; SICK: cross-entropy of a Linear(3h, 3) head on [u; v; |u - v|]).
AdamW (lr 2e-5, weight decay 0.01 except LayerNorm and bias), linear warm-up over 10% of steps
then linear decay to 0, gradient clipping 1.0, batch 32, 10 epochs; after every epoch the task's
dev and test metrics (x100).

Upstream stages (WS+TMFT, DAPT+TMFT; trainables/stages_compute.py): a config with
`upstream_method` = "ws" or "dapt" and `_upstream_path` (the stage's directory in the stage store)
starts from that stage's weights: WS weights are loaded into the layer-l encoder with
`strict=False` (as the authors), DAPT's encoder folder replaces the pretrained model before
truncation to layer l.

Config keys: model, layer, seed, epochs, lr, batch_size, weight_decay, warmup_ratio,
eval_batch_size, length_grouped, random_init, task (+ upstream_method, _upstream_path). The
tokenised data arrives per model id via `tune.with_parameters(..., data={model id: TokenizedTask})`.
"""
from __future__ import annotations

import math
import shutil
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from trainables.base import EpochTrainable, register_trainable
from trainables.batches import eval_batches, pad, train_batches
from trainables.encoders import count_parameters, encode, load_pretrained, random_init, truncate
from trainables.faults import maybe_inject_fault
from trainables.tasks import get_task

# Full pretrained models kept in this worker between trials (actors are reused): loading is
# done once per model per worker, each trial copies only the layers it needs.
_PRETRAINED: OrderedDict = OrderedDict()
_PRETRAINED_CAPACITY = 2
_NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "LayerNorm.bias")
STAGE_ENCODER_DIR = "encoder"  # a stage's weights: <stage dir>/encoder/ (a model folder)


def pretrained(path: str):
    if path in _PRETRAINED:
        _PRETRAINED.move_to_end(path)
        return _PRETRAINED[path]
    model = load_pretrained(path)
    _PRETRAINED[path] = model
    while len(_PRETRAINED) > _PRETRAINED_CAPACITY:
        _PRETRAINED.popitem(last=False)
    return model


def build_encoder(model_path: str, layer: int, seed: int, random_weights: bool = False,
                  upstream_method: str | None = None, upstream_path: str | None = None):
    """The layer-`layer` encoder: pretrained (or random) weights, or an upstream stage's."""
    if upstream_method == "dapt":
        return truncate(pretrained(str(Path(upstream_path) / STAGE_ENCODER_DIR)), layer)
    encoder = random_init(model_path, layer, seed) if random_weights else truncate(pretrained(model_path), layer)
    if upstream_method == "ws":
        from safetensors.torch import load_file

        state = load_file(str(Path(upstream_path) / STAGE_ENCODER_DIR / "model.safetensors"))
        result = encoder.load_state_dict(state, strict=False)  # as the authors (METHODS.md M2)
        if result.missing_keys:
            print(f"warning: {len(result.missing_keys)} encoder weights not in the WS stage {upstream_path} "
                  f"(kept as they were): {result.missing_keys[:4]}", file=sys.stderr)
    elif upstream_method:
        raise ValueError(f"unknown upstream method {upstream_method!r}; expected 'ws' or 'dapt'")
    return encoder


def adamw_param_groups(model, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if name.endswith(_NO_DECAY) or "norm" in name.lower() else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class PairFineTuning:
    """The TMFT loop over a tokenised pair task, without Ray: used by the TMFT Trainable and by the
    word-similarity stage. Attributes: model (encoder), head (the task's, or None), optimizer,
    scheduler, task (the TokenizedTask), task_def (the Task), train_data, batch_size."""

    def init_fine_tuning(self, encoder, data, config: dict, device, epochs: int) -> None:
        self.device = device
        self.task = data
        self.task_def = get_task(data.task)
        self.seed = int(config["seed"])
        self.model = encoder.to(device)
        self.head = self.task_def.build_head(int(self.model.config.hidden_size))
        if self.head is not None:
            self.head = self.head.to(device)
        self.train_data = data.splits["train"]
        self.batch_size = int(config["batch_size"])
        self.eval_batch_size = int(config.get("eval_batch_size", 64))
        self.length_grouped = bool(config.get("length_grouped", False))
        steps = max(1, epochs) * math.ceil(len(self.train_data) / self.batch_size)
        groups = adamw_param_groups(self.model, float(config["weight_decay"]))
        if self.head is not None:
            head_groups = adamw_param_groups(self.head, float(config["weight_decay"]))
            for group, extra in zip(groups, head_groups):
                group["params"] = group["params"] + extra["params"]
        self.optimizer = torch.optim.AdamW(groups, lr=float(config["lr"]))
        from transformers import get_linear_schedule_with_warmup

        self.scheduler = get_linear_schedule_with_warmup(
            self.optimizer, num_warmup_steps=math.ceil(float(config["warmup_ratio"]) * steps), num_training_steps=steps
        )

    def trained_parameters(self):
        return list(self.model.parameters()) + (list(self.head.parameters()) if self.head is not None else [])

    def _embed(self, sequences):
        ids, mask = pad(sequences, self.task.pad_id)
        return encode(self.model, ids.to(self.device), mask.to(self.device))

    def on_train_step(self, step: int, epoch: int) -> None:
        """Hook before each optimiser step (fault injection in tests)."""

    def train_epoch(self, epoch: int) -> dict:
        self.model.train()
        if self.head is not None:
            self.head.train()
        generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        batches = train_batches(self.train_data.pair_lengths(), self.batch_size, generator, self.length_grouped)
        total = torch.zeros((), device=self.device)
        parameters = self.trained_parameters()
        for step, batch in enumerate(batches, start=1):
            self.on_train_step(step, epoch)
            embeddings = self._embed([self.train_data.s1[i] for i in batch] + [self.train_data.s2[i] for i in batch])
            u, v = embeddings[: len(batch)], embeddings[len(batch):]
            labels = torch.tensor([self.train_data.labels[i] for i in batch], dtype=torch.float32, device=self.device)
            loss = self.task_def.loss(u, v, labels, self.head)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            self.optimizer.step()
            self.scheduler.step()
            total += loss.detach() * len(batch)
        return {"train_loss": float(total) / len(self.train_data)}

    @torch.no_grad()
    def predict(self, split) -> np.ndarray:
        """The task's per-pair outputs (cosines, logits, ...) in the split's order."""
        self.model.eval()
        if self.head is not None:
            self.head.eval()
        rows = [None] * len(split)
        for batch in eval_batches(split.pair_lengths(), self.eval_batch_size):
            embeddings = self._embed([split.s1[i] for i in batch] + [split.s2[i] for i in batch])
            outputs = self.task_def.outputs(embeddings[: len(batch)], embeddings[len(batch):], self.head).float().cpu().numpy()
            for index, row in zip(batch, outputs):
                rows[index] = row
        return np.asarray(rows)

    def evaluate(self) -> dict:
        outputs = {split: np.asarray(self.predict(self.task.splits[split])) for split in ("dev", "test")}
        labels = {split: np.asarray(self.task.splits[split].labels) for split in ("dev", "test")}
        return self.task_def.metrics(outputs, labels)

    def save_encoder(self, target: Path) -> None:
        """A loadable model folder (AutoModel) with the model's tokenizer files."""
        self.model.save_pretrained(str(target))
        for tokenizer_file in Path(self.task.model_path).glob("*"):
            if tokenizer_file.name.startswith(("tokenizer", "vocab", "special_tokens", "spm", "merges")) and tokenizer_file.is_file():
                shutil.copy(tokenizer_file, Path(target) / tokenizer_file.name)


@register_trainable("tmft", "ws+tmft", "dapt+tmft")
class TMFTTrainable(PairFineTuning, EpochTrainable):
    primary_metric = "spearman"

    def primary_for(self, config: dict) -> str:
        return get_task(config.get("task", "stsb")).primary_for(config)

    def build(self, config: dict, data) -> None:
        task = data[config["model"]]
        encoder = build_encoder(task.model_path, int(config["layer"]), int(config["seed"]),
                                bool(config.get("random_init", False)),
                                config.get("upstream_method"), config.get("_upstream_path"))
        self.init_fine_tuning(encoder, task, config, self.device, self.epochs)

    def on_train_step(self, step: int, epoch: int) -> None:
        if step == 2:
            maybe_inject_fault(self.trial_config, epoch)

    def parameter_count(self) -> int:
        return count_parameters(self.model)

    def method_state(self, checkpoint_dir: Path) -> dict:
        """Weights go to `encoder/` (a model folder with its tokenizer, loadable with AutoModel,
        e.g. for CKA); the task head, optimiser and scheduler into state.pt."""
        self._save_encoder(checkpoint_dir / "encoder")
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "head": self.head.state_dict() if self.head is not None else None}

    def load_method_state(self, state: dict, checkpoint_dir: Path) -> None:
        from safetensors.torch import load_file

        self.model.load_state_dict(load_file(str(checkpoint_dir / "encoder" / "model.safetensors")))
        if self.head is not None and state.get("head") is not None:
            self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def _save_encoder(self, target: Path) -> None:
        self.save_encoder(target)
