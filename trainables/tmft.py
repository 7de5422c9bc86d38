"""TMFT: truncated model fine-tuning (ELECTRA paper; METHODS.md M1).

Inputs: STS-B pairs (s1, s2, gold in [0, 5]), an encoder and a layer l (0 = embedding output).
Model: the encoder physically truncated to its embeddings plus the first l layers; u, v = masked
mean of the last hidden state. Loss: MSE(cos(u, v), gold / 5). AdamW (lr 2e-5, weight decay
0.01 except LayerNorm and bias), linear warm-up over 10% of steps then linear decay to 0,
gradient clipping 1.0, batch 32, 10 epochs; after every epoch dev and test Spearman/Pearson x100.

Config keys: model, layer, seed, epochs, lr, batch_size, weight_decay, warmup_ratio,
eval_batch_size, length_grouped, random_init, task. The tokenised data arrives per model id via
`tune.with_parameters(..., data={model id: TokenizedTask})`.
"""
from __future__ import annotations

import math
import shutil
from collections import OrderedDict
from pathlib import Path

import torch
import torch.nn.functional as F

from trainables.base import EpochTrainable, register_trainable
from trainables.batches import eval_batches, pad, train_batches
from trainables.encoders import count_parameters, encode, load_pretrained, random_init, truncate
from trainables.evaluation import correlations
from trainables.faults import maybe_inject_fault

# Full pretrained models kept in this worker between trials (actors are reused): loading is
# done once per model per worker, each trial copies only the layers it needs.
_PRETRAINED: OrderedDict = OrderedDict()
_PRETRAINED_CAPACITY = 2
_NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "LayerNorm.bias")


def pretrained(path: str):
    if path in _PRETRAINED:
        _PRETRAINED.move_to_end(path)
        return _PRETRAINED[path]
    model = load_pretrained(path)
    _PRETRAINED[path] = model
    while len(_PRETRAINED) > _PRETRAINED_CAPACITY:
        _PRETRAINED.popitem(last=False)
    return model


def build_encoder(model_path: str, layer: int, seed: int, random_weights: bool = False):
    if random_weights:
        return random_init(model_path, layer, seed)
    return truncate(pretrained(model_path), layer)


def adamw_param_groups(model, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if name.endswith(_NO_DECAY) or "norm" in name.lower() else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


@register_trainable("tmft")
class TMFTTrainable(EpochTrainable):
    primary_metric = "spearman"

    def build(self, config: dict, data) -> None:
        task = data[config["model"]]
        self.task = task
        self.model = build_encoder(task.model_path, int(config["layer"]), int(config["seed"]),
                                   bool(config.get("random_init", False))).to(self.device)
        self.train_data = task.splits["train"]
        self.batch_size = int(config["batch_size"])
        self.length_grouped = bool(config.get("length_grouped", False))
        steps = max(1, self.epochs) * math.ceil(len(self.train_data) / self.batch_size)
        self.optimizer = torch.optim.AdamW(adamw_param_groups(self.model, float(config["weight_decay"])), lr=float(config["lr"]))
        from transformers import get_linear_schedule_with_warmup

        self.scheduler = get_linear_schedule_with_warmup(
            self.optimizer, num_warmup_steps=math.ceil(float(config["warmup_ratio"]) * steps), num_training_steps=steps
        )

    def _embed(self, sequences):
        ids, mask = pad(sequences, self.task.pad_id)
        return encode(self.model, ids.to(self.device), mask.to(self.device))

    def train_epoch(self, epoch: int) -> dict:
        self.model.train()
        generator = torch.Generator().manual_seed(int(self.trial_config["seed"]) * 100_003 + epoch)
        batches = train_batches(self.train_data.pair_lengths(), self.batch_size, generator, self.length_grouped)
        total = torch.zeros((), device=self.device)
        for step, batch in enumerate(batches, start=1):
            if step == 2:
                maybe_inject_fault(self.trial_config, epoch)
            embeddings = self._embed([self.train_data.s1[i] for i in batch] + [self.train_data.s2[i] for i in batch])
            u, v = embeddings[: len(batch)], embeddings[len(batch):]
            gold = torch.tensor([self.train_data.labels[i] / 5.0 for i in batch], device=self.device)
            loss = F.mse_loss(F.cosine_similarity(u, v), gold)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.scheduler.step()
            total += loss.detach() * len(batch)
        return {"train_loss": float(total) / len(self.train_data)}

    @torch.no_grad()
    def predict(self, split) -> list[float]:
        self.model.eval()
        size = int(self.trial_config.get("eval_batch_size", 64))
        scores = [0.0] * len(split)
        for batch in eval_batches(split.pair_lengths(), size):
            embeddings = self._embed([split.s1[i] for i in batch] + [split.s2[i] for i in batch])
            cosines = F.cosine_similarity(embeddings[: len(batch)], embeddings[len(batch):]).tolist()
            for index, cosine in zip(batch, cosines):
                scores[index] = cosine
        return scores

    def evaluate(self) -> dict:
        metrics = {}
        for split in ("dev", "test"):
            data = self.task.splits[split]
            for name, value in correlations(self.predict(data), data.labels).items():
                metrics[f"{split}_{name}"] = value
        return metrics

    def parameter_count(self) -> int:
        return count_parameters(self.model)

    def method_state(self, checkpoint_dir: Path) -> dict:
        """Weights go to `encoder/` (a model folder with its tokenizer, loadable with AutoModel,
        e.g. for CKA); optimiser and scheduler into state.pt."""
        self._save_encoder(checkpoint_dir / "encoder")
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_method_state(self, state: dict, checkpoint_dir: Path) -> None:
        from safetensors.torch import load_file

        self.model.load_state_dict(load_file(str(checkpoint_dir / "encoder" / "model.safetensors")))
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def _save_encoder(self, target: Path) -> None:
        self.model.save_pretrained(str(target))
        for tokenizer_file in Path(self.task.model_path).glob("*"):
            if tokenizer_file.name.startswith(("tokenizer", "vocab", "special_tokens", "spm", "merges")) and tokenizer_file.is_file():
                shutil.copy(tokenizer_file, target / tokenizer_file.name)
