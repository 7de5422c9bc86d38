"""The TMFT training loop over a tokenised pair task, without Ray: the TMFT Trainable, the
word-similarity stage and `benchmarks/gpu.py` (which runs where only torch and transformers are
installed) all train through `PairFineTuning`.

Per step: pad the batch's sentences (both sides; in length-sorted chunks with `forward_chunk`,
trainables/training/batches.py), through pinned host memory copied without waiting on CUDA, encode them
under the trial's precision (trainables/encoders/precision.py), the task's loss in fp32, backward
through the gradient scaler (active for fp16 only), clip to 1.0, AdamW (fused), linear
schedule. The epoch's loss is summed on the device and read once at the end of the epoch.
Evaluation encodes each distinct sentence of a split once, in length order, then scores the pairs;
the dev split's encode time per distinct sentence is reported as `encode_ms_per_sentence`.
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from trainables.encoders.loading import encode
from trainables.encoders.precision import adamw, resolve, to_device
from trainables.training.batches import forward_chunks, pad, resolve_forward_chunk, train_batches
from trainables.training.pair_tasks import get_task

_NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "LayerNorm.bias")


def adamw_param_groups(model, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if name.endswith(_NO_DECAY) or "norm" in name.lower() else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def copy_tokenizer_files(source, target) -> None:
    for tokenizer_file in Path(source).glob("*"):
        if (
            tokenizer_file.name.startswith(("tokenizer", "vocab", "special_tokens", "spm", "merges"))
            and tokenizer_file.is_file()
        ):
            shutil.copy(tokenizer_file, Path(target) / tokenizer_file.name)


def _in_order(parts: list[torch.Tensor], chunks: list[list[int]]) -> torch.Tensor:
    """The rows of `parts` (the embeddings of `chunks`' indices, chunk by chunk) put back in index order."""
    inverse = torch.empty(sum(len(c) for c in chunks), dtype=torch.long)
    inverse[torch.tensor([i for chunk in chunks for i in chunk])] = torch.arange(len(inverse))
    return torch.cat(parts)[inverse.to(parts[0].device)]


class PairFineTuning:
    """Attributes: model (encoder), head (the task's, or None), optimizer, scheduler, scaler,
    precision, task (the TokenizedTask), task_def (the Task), train_data, batch_size."""

    def init_fine_tuning(self, encoder, data, config: dict, device, epochs: int) -> None:
        self.device = torch.device(device)
        self.precision = resolve(config.get("precision", "fp32"), self.device)
        self.precision.apply_matmul_settings()
        self.task = data
        self.task_def = get_task(data.task)
        self.seed = int(config["seed"])
        self.model = encoder.to(self.device)
        self.head = self.task_def.build_head(int(self.model.config.hidden_size))
        if self.head is not None:
            self.head = self.head.to(self.device)
        self.train_data = data.splits["train"]
        self.batch_size = int(config["batch_size"])
        self.eval_batch_size = int(config.get("eval_batch_size", 64))
        self.length_grouped = bool(config.get("length_grouped", False))
        # configs written before chunking existed (resumed trials) keep the whole-batch forward they began with
        self.forward_chunk = resolve_forward_chunk(config.get("forward_chunk", 0), self.device)
        steps = max(1, epochs) * math.ceil(len(self.train_data) / self.batch_size)
        groups = adamw_param_groups(self.model, float(config["weight_decay"]))
        if self.head is not None:
            head_groups = adamw_param_groups(self.head, float(config["weight_decay"]))
            for group, extra in zip(groups, head_groups):
                group["params"] = group["params"] + extra["params"]
        self.optimizer = adamw(groups, float(config["lr"]), self.device)
        self.scaler = self.precision.grad_scaler()
        from transformers import get_linear_schedule_with_warmup

        self.scheduler = get_linear_schedule_with_warmup(
            self.optimizer, num_warmup_steps=math.ceil(float(config["warmup_ratio"]) * steps), num_training_steps=steps
        )

    def trained_parameters(self):
        return list(self.model.parameters()) + (list(self.head.parameters()) if self.head is not None else [])

    def _embed(self, sequences, chunk: int | None = None) -> torch.Tensor:
        """Pooled embeddings in fp32, in the order of `sequences` (the forward under the trial's
        precision, in length-sorted chunks of `chunk` sentences, default `forward_chunk`)."""
        chunks = forward_chunks([len(s) for s in sequences], self.forward_chunk if chunk is None else chunk)
        parts = []
        for members in chunks:
            ids, mask = pad([sequences[i] for i in members], self.task.pad_id)
            with self.precision.autocast():
                parts.append(encode(self.model, to_device(ids, self.device), to_device(mask, self.device)).float())
        return parts[0] if len(parts) == 1 else _in_order(parts, chunks)

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
            labels = to_device(
                torch.tensor([self.train_data.labels[i] for i in batch], dtype=torch.float32), self.device
            )
            loss = self.batch_loss(batch, labels)
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
            total += loss.detach().float() * len(batch)
        # a NaN when a step's loss was: the caller checks it (trainables/training/divergence.py)
        return {"train_loss": float(total) / len(self.train_data)}

    def batch_loss(self, batch: list[int], labels: torch.Tensor) -> torch.Tensor:
        """The loss of one training batch (indices into the training pairs): the task's loss on the pooled
        embeddings of both sides."""
        embeddings = self._embed([self.train_data.s1[i] for i in batch] + [self.train_data.s2[i] for i in batch])
        u, v = embeddings[: len(batch)], embeddings[len(batch) :]
        return self.task_def.loss(u, v, labels, self.head)

    @torch.no_grad()
    def predict(self, split) -> np.ndarray:
        """The task's per-pair outputs (cosines, logits, ...) in the split's order."""
        self.model.eval()
        if self.head is not None:
            self.head.eval()
        distinct: dict[tuple, int] = {}  # a sentence's token ids -> its row among the embeddings
        first = [distinct.setdefault(tuple(s), len(distinct)) for s in split.s1]
        second = [distinct.setdefault(tuple(s), len(distinct)) for s in split.s2]
        # as many sentences per forward as `eval_batch_size` pairs hold
        started = time.perf_counter()
        embeddings = self._embed(list(distinct), chunk=2 * self.eval_batch_size)
        if embeddings.is_cuda:
            torch.cuda.synchronize(embeddings.device)
        self.encode_ms_per_sentence = 1000 * (time.perf_counter() - started) / max(1, len(distinct))
        return self.task_def.outputs(embeddings[first], embeddings[second], self.head).float().cpu().numpy()

    def evaluate(self, splits: tuple[str, ...] = ("dev", "test")) -> dict:
        """The task's metrics on `splits` (dev is always among them: MRPC's thresholds come from it)."""
        splits = tuple(dict.fromkeys(("dev", *splits)))
        self.last_outputs, encode_ms = {}, None
        for split in splits:
            self.last_outputs[split] = np.asarray(self.predict(self.task.splits[split]))
            encode_ms = self.encode_ms_per_sentence if split == "dev" else encode_ms
        return {**self.metrics_of(self.last_outputs), "encode_ms_per_sentence": encode_ms}

    def metrics_of(self, outputs: dict) -> dict:
        """The task's metrics of per-split outputs (dev among them)."""
        labels = {split: np.asarray(self.task.splits[split].labels) for split in outputs}
        return self.task_def.metrics(outputs, labels)

    def save_encoder(self, target: Path, state_dict: dict | None = None) -> None:
        """A loadable model folder (AutoModel) with the model's tokenizer files."""
        self.model.save_pretrained(str(target), state_dict=state_dict)
        copy_tokenizer_files(self.task.model_path, target)
