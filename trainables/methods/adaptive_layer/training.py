"""The adaptive-layer training loop without Ray: TMFT's pair task and loss (trainables/training/pair_tasks.py)
wrapped in sentence-transformers' `AdaptiveLayerLoss` (2D Matryoshka Sentence Embeddings, Li et al. 2024,
arXiv 2402.14776), and the task's scores of every layer of the one model from one forward pass.

The encoder is the whole pretrained model inside a `SentenceTransformer` (its `Transformer` module, then
mean pooling, as TMFT pools). Per step, `AdaptiveLayerLoss` computes the task's loss on the last layer
(times `last_layer_weight`), on `n_layers_per_step` earlier layers drawn at random (-1: all; each
weighted `prior_layers_weight` / the number drawn), and, with `kl_temperature` > 0, the KL divergence
of each drawn layer's embeddings from the last layer's (times `kl_temperature` x `kl_div_weight`).
Everything else is TMFT's step (trainables/training/pair_training.py): AdamW, the linear schedule,
clipping at 1.0, the precision's autocast and scaler.

Evaluation encodes each distinct sentence of a split once with all hidden states on and pools every
layer (0 = the embedding output), so every layer's scores come from one forward pass: per layer
`layer<k>_<split>_<metric>`, and `<split>_<metric>` is their mean over the layers, which picks the
best epoch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from trainables.encoders.loading import mean_pool
from trainables.encoders.precision import to_device
from trainables.methods.adaptive_layer.method import DEFAULTS
from trainables.training.batches import forward_chunks, pad
from trainables.training.pair_training import PairFineTuning


class TaskPairLoss(nn.Module):
    """The pair task's loss (TMFT's) on a SentenceTransformer's two pooled embeddings, in the form
    sentence-transformers' losses take: forward(sentence_features, labels)."""

    def __init__(self, model, task_def, head):
        super().__init__()
        self.model, self.task_def, self.head = model, task_def, head

    def forward(self, sentence_features, labels):
        u, v = (self.model(features)["sentence_embedding"] for features in sentence_features)
        return self.task_def.loss(u.float(), v.float(), labels, self.head)


def sentence_transformer(model_path: str, device):
    """The whole pretrained encoder as a SentenceTransformer with mean pooling."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    transformer = Transformer(str(model_path))
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    return SentenceTransformer(modules=[transformer, pooling], device=str(device))


class AdaptiveLayerFineTuning(PairFineTuning):
    """PairFineTuning whose step is AdaptiveLayerLoss around the task's loss, scored at every layer."""

    def init_adaptive(self, data, config: dict, device, epochs: int) -> None:
        from sentence_transformers.sentence_transformer.losses import AdaptiveLayerLoss

        self.st_model = sentence_transformer(data.model_path, device)
        self.init_fine_tuning(self.st_model[0].auto_model, data, config, device, epochs)
        self.adaptive_loss = AdaptiveLayerLoss(
            self.st_model, TaskPairLoss(self.st_model, self.task_def, self.head), **adaptive_settings(config)
        )
        self.depth = int(self.model.config.num_hidden_layers)

    def _features(self, sequences) -> dict:
        ids, mask = pad(sequences, self.task.pad_id)
        return {"input_ids": to_device(ids, self.device), "attention_mask": to_device(mask, self.device)}

    def batch_loss(self, batch: list[int], labels: torch.Tensor) -> torch.Tensor:
        """AdaptiveLayerLoss around the task's loss (PairFineTuning's loop does the rest of the step)."""
        features = [self._features([side[i] for i in batch]) for side in (self.train_data.s1, self.train_data.s2)]
        with self.precision.autocast():
            return self.adaptive_loss(features, labels)

    @torch.no_grad()
    def layer_outputs(self, split) -> list[np.ndarray]:
        """The task's per-pair outputs at every layer (index 0 = the embedding output), one forward pass."""
        self.model.eval()
        if self.head is not None:
            self.head.eval()
        distinct: dict[tuple, int] = {}
        first = [distinct.setdefault(tuple(s), len(distinct)) for s in split.s1]
        second = [distinct.setdefault(tuple(s), len(distinct)) for s in split.s2]
        sequences = list(distinct)
        pooled = torch.zeros(self.depth + 1, len(sequences), int(self.model.config.hidden_size))
        for members in forward_chunks([len(s) for s in sequences], 2 * self.eval_batch_size):
            ids, mask = pad([sequences[i] for i in members], self.task.pad_id)
            ids, mask = to_device(ids, self.device), to_device(mask, self.device)
            with self.precision.autocast():
                states = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
            for layer, hidden in enumerate(states):
                pooled[layer, members] = mean_pool(hidden.float(), mask).cpu()
        return [self.task_def.outputs(layer[first], layer[second], self.head).float().cpu().numpy() for layer in pooled]

    def layer_metrics(self, splits: tuple[str, ...]) -> dict:
        """`layer<k>_<split>_<metric>` for every layer, and `<split>_<metric>`: their mean over the layers."""
        per_split = {split: self.layer_outputs(self.task.splits[split]) for split in dict.fromkeys(("dev", *splits))}
        out, by_name = {}, {}
        for layer in range(self.depth + 1):
            scores = self.metrics_of({split: outputs[layer] for split, outputs in per_split.items()})
            for name, value in scores.items():
                out[f"layer{layer}_{name}"] = value
                by_name.setdefault(name, []).append(value)
        out.update({name: float(np.mean(values)) for name, values in by_name.items()})
        return out


def adaptive_settings(config: dict) -> dict:
    """AdaptiveLayerLoss's keyword arguments from a trial config (its defaults where the config has none)."""
    return {key: type(default)(config.get(key, default)) for key, default in DEFAULTS.items()}
