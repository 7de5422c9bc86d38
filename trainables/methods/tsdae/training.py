"""TSDAE's training loop and its objectives' losses (TSDAE, MLM, SimCSE, CT), the deletion noise and the
corpus, without Ray: the trials (trainable.py) and the `tsdae` stage (stage.py) both train through
`Training`. The objectives and their settings are described in method.py."""

from __future__ import annotations

import numpy as np
import torch

from trainables.encoders.precision import adamw
from trainables.methods.tsdae.noise import DEFAULT_RATIOS, Noise, vocabulary_words
from trainables.methods.tsdae.settings import CT_GROUP, learning_rate, resolve


def sentence_model(model_path: str, pooling: str, max_length: int):
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(str(model_path), max_seq_length=max_length)
    pool = models.Pooling(transformer.get_embedding_dimension(), pooling)
    return SentenceTransformer(modules=[transformer, pool])


def _rng_state(rng: np.random.RandomState) -> list:
    """The state as plain lists (a checkpoint is read back with torch.load(weights_only=True))."""
    name, keys, pos, has_gauss, gauss = rng.get_state()
    return [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)]


def _rng_state_back(state: list) -> tuple:
    name, keys, pos, has_gauss, gauss = state
    return name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss


def objective_settings(objective: str, args, corpus_size: int = 0, model_max: int = 512) -> dict:
    """What `objective` trains with, recorded in every trial's params (settings.py: its paper's
    values, or TSDAE's with --shared-settings, each flag given over them)."""
    return resolve(objective, args, corpus_size, model_max)


class Batches:
    """The corpus rows of each batch, from a seeded generator: `epochs` (TSDAE, MLM, SimCSE, as their
    data loaders: a new shuffle every epoch, each sentence once an epoch, consecutive slices of it; the
    last, smaller slice trained with `last_batch` keep, dropped with drop) or `replacement` (CT; and a
    trial recorded before epochs were, which records no `sampling`): every row drawn at random."""

    def __init__(self, size: int, sampling: str, last_batch: str | None, generator: torch.Generator):
        self.size, self.sampling, self.last_batch, self.generator = size, sampling, last_batch, generator
        self.order: list[int] = []
        self.position = 0
        self.epochs = 0  # shuffles so far: the epoch the next batch comes from

    def draw(self, n: int) -> list[int]:
        """`n` rows at random, with replacement."""
        return torch.randint(self.size, (n,), generator=self.generator).tolist()

    def next(self, n: int) -> list[int]:
        """The rows of the next batch of (at most) `n`."""
        if self.sampling != "epochs":
            return self.draw(n)
        left = len(self.order) - self.position
        if left <= 0 or (self.last_batch == "drop" and left < n):
            self.order = torch.randperm(self.size, generator=self.generator).tolist()
            self.position, self.epochs = 0, self.epochs + 1
        rows = self.order[self.position : self.position + n]
        self.position += len(rows)
        return rows

    def passes(self) -> float | None:
        """Passes over the corpus so far (`epochs` sampling; a started epoch counts its share of the
        corpus used); None when drawing with replacement."""
        if self.sampling != "epochs":
            return None
        return max(0, self.epochs - 1) + (self.position / self.size if self.order else 0.0)

    def state_dict(self) -> dict:
        return {"order": list(self.order), "position": self.position, "epochs": self.epochs}

    def load_state_dict(self, state: dict | None) -> None:
        """A checkpoint written before epochs were recorded has none: the next batch starts an epoch."""
        state = state or {}
        self.order, self.position = list(state.get("order", [])), int(state.get("position", 0))
        self.epochs = int(state.get("epochs", 0))


class Training:
    """One objective's training loop on a sentence-transformers model: the trial (`TSDAETrainable`)
    and the `tsdae` upstream stage (`compute`) both run it. Batches come from `Batches` (the config's
    `sampling` and `last_batch`); `run(steps)` takes that many optimiser steps."""

    def __init__(self, config: dict, sentences: list[str], device):
        from sentence_transformers import losses

        self.config, self.sentences, self.device = config, sentences, device
        self.objective = config["objective"]
        seed = int(config["seed"])
        self.st = sentence_model(config["_model_path"], config["pooling"], int(config["max_length"])).to(device)
        self.generator = torch.Generator().manual_seed(seed)
        self.batches = Batches(
            len(sentences), config.get("sampling") or "replacement", config.get("last_batch"), self.generator
        )
        self.noise_rng = np.random.RandomState(seed)
        self.noise = self._noise(config)
        self.step_count = 0
        self.loss = self.optimizer = None
        if self.objective == "none":
            return
        if self.objective == "tsdae":
            tied = config.get("tied_decoder", True) is not False
            self.loss = losses.DenoisingAutoEncoderLoss(
                self.st, decoder_name_or_path=None if tied else str(config["_model_path"]), tie_encoder_decoder=tied
            )
        elif self.objective == "simcse":
            if config.get("mlp") == "keep":  # the layer is part of the encoder: trained, scored and saved with it
                self.st = simcse_training_model(self.st, "keep")
            self.loss = losses.MultipleNegativesRankingLoss(
                simcse_training_model(self.st, config.get("mlp") or "none"),
                scale=1.0 / float(config.get("temperature") or 0.05),
            )
        elif self.objective == "ct" and config["ct_variant"] == "official":
            self.loss = losses.ContrastiveTensionLoss(self.st)
        elif self.objective == "ct":
            self.loss = losses.ContrastiveTensionLossInBatchNegatives(self.st)
        else:
            self.loss = _MLMLoss(self.st, config["_model_path"], seed)
        self.loss.to(device)
        if config["optimizer"] == "rmsprop":  # TF2 Keras RMSprop defaults (rho 0.9, epsilon 1e-7), as the CT code
            self.optimizer = torch.optim.RMSprop(
                self.loss.parameters(), lr=learning_rate(config, 0), alpha=0.9, eps=1e-7
            )
        else:
            decay = float(config.get("weight_decay") or 0.0)
            self.optimizer = adamw(decay_groups(self.loss, decay), float(config["lr"]), device, weight_decay=decay)

    def _noise(self, config: dict) -> Noise | None:
        """TSDAE's noise: the config's type at its ratio (`noise_ratio`; a trial recorded before it was
        names `delete_ratio`, or its type's own ratio)."""
        if self.objective != "tsdae":
            return None
        kind = config.get("noise") or "delete"
        ratio = config.get("noise_ratio") or config.get("delete_ratio") or DEFAULT_RATIOS[kind]
        words = vocabulary_words(self.st.tokenizer) if kind in ("replace", "add") else []
        return Noise(kind, float(ratio), self.noise_rng, self.st.tokenizer.mask_token or "", words)

    def first_copy(self):
        """Official CT's first copy (the one sentence-transformers trains beside `st` and drops), when
        `ct_keep` better has both scored; else None."""
        if self.objective == "ct" and self.config.get("ct_keep") == "better" and hasattr(self.loss, "model1"):
            return self.loss.model1
        return None

    def features(self) -> list[dict]:
        """One batch's inputs to the loss."""
        batch = [self.sentences[i] for i in self.batches.next(int(self.config["batch_size"]))]
        if self.objective == "tsdae":
            return [self._tokenize([self.noise(s) for s in batch]), self._tokenize(batch)]
        if self.objective == "ct" and self.config["ct_variant"] == "official":
            # ContrastiveTensionDataLoader's rule: the first pair of every group of 8 is positive
            others = [self.sentences[i] for i in self.batches.draw(len(batch))]
            pairs = [s if i % CT_GROUP == 0 else o for i, (s, o) in enumerate(zip(batch, others))]
            return [self._tokenize(batch), self._tokenize(pairs)]
        if self.objective in ("simcse", "ct"):
            return [self._tokenize(batch), self._tokenize(batch)]
        return [self._tokenize(batch)]

    def _tokenize(self, texts: list[str]) -> dict:
        return {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in self.st.preprocess(texts).items()}

    def trained_parameters(self) -> list:
        """Every weight the objective trains (the decoder and CT's second copy included)."""
        return list((self.loss if self.loss is not None else self.st).parameters())

    def set_train_mode(self) -> None:
        """Dropout as the objective's code trains: the whole loss module in train mode (TSDAE: the
        encoder and the decoder, as sentence-transformers v1.1.0's `fit` calls `loss_model.train()`;
        `decoder_dropout` False keeps the decoder in eval mode, as the v3+ trainer leaves it), or,
        with `dropout` False (CT's code), in eval mode."""
        dropout = bool(self.config["dropout"])
        self.loss.train(dropout)
        if self.objective == "tsdae":
            self.loss.decoder.train(dropout and self.config.get("decoder_dropout", True) is not False)

    def run(self, steps: int, progress=None) -> float:
        """`steps` optimiser steps; the mean training loss (a NaN or an infinity when a step's loss was one:
        the caller checks it with trainables/training/divergence.py)."""
        self.set_train_mode()
        clip = self.config.get("clip")
        total = torch.zeros((), device=self.device)
        for _ in range(steps):
            if self.config["schedule"] != "constant":
                for group in self.optimizer.param_groups:
                    group["lr"] = learning_rate(self.config, self.step_count)
            loss = self.loss(self.features(), None)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(self.loss.parameters(), float(clip))
            self.optimizer.step()
            total += loss.detach()
            self.step_count += 1
            if progress is not None:
                progress.step()
        return float(total) / max(1, steps)

    def state_dict(self) -> dict:
        return {
            "model": self.loss.state_dict() if self.loss is not None else self.st.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "generator": self.generator.get_state(),
            "noise_rng": _rng_state(self.noise_rng),
            "batches": self.batches.state_dict(),
            "steps": self.step_count,
        }

    def load_state_dict(self, state: dict) -> None:
        (self.loss if self.loss is not None else self.st).load_state_dict(state["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.noise_rng.set_state(_rng_state_back(state["noise_rng"]))
        self.batches.load_state_dict(state.get("batches"))
        self.step_count = int(state["steps"])


def decay_groups(module: torch.nn.Module, weight_decay: float) -> list[dict]:
    """The parameters in two AdamW groups: biases and LayerNorm weights without weight decay (BERT's
    and transformers' Trainer rule), the rest with it; one group when `weight_decay` is 0."""
    params = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    if not weight_decay:
        return [{"params": [p for _, p in params]}]
    plain = [p for n, p in params if n.endswith("bias") or "LayerNorm" in n or "layer_norm" in n]
    plain_ids = {id(p) for p in plain}
    return [
        {"params": [p for _, p in params if id(p) not in plain_ids], "weight_decay": weight_decay},
        {"params": plain, "weight_decay": 0.0},
    ]


def simcse_training_model(st, mlp: str):
    """The model SimCSE's loss trains: with `mlp` "train" (SimCSE's --mlp_only_train), the encoder
    and its pooling followed by a new linear layer + tanh over the pooled [CLS] vector (SimCSE's
    `MLPLayer`, initialised as BERT initialises new weights: normal(0, initializer_range), bias 0);
    the layer is trained with the encoder, and `st` (scored, saved) never holds it. With "keep"
    (SimCSE's April 2021 code, as the TSDAE paper ran it) the caller makes this model its encoder, so
    the layer is scored and saved too. Else (and for a model that already holds the layer) `st`."""
    if mlp == "none" or (mlp == "keep" and _has_dense(st)):
        return st
    from sentence_transformers import SentenceTransformer, models

    width = st.get_embedding_dimension()
    dense = models.Dense(width, width, activation_function=torch.nn.Tanh())
    std = float(getattr(st[0].auto_model.config, "initializer_range", 0.02))
    torch.nn.init.normal_(dense.linear.weight, mean=0.0, std=std)
    torch.nn.init.zeros_(dense.linear.bias)
    return SentenceTransformer(modules=[*st, dense], device=str(st.device))


def _has_dense(st) -> bool:
    from sentence_transformers import models

    return any(isinstance(module, models.Dense) for module in st)


class _MLMLoss(torch.nn.Module):
    """The DAPT objective on the trial's encoder: an MLM model sharing the encoder's weights."""

    def __init__(self, st, model_path: str, seed: int):
        super().__init__()
        from transformers import DataCollatorForLanguageModeling

        from trainables.encoders.mlm import MLM_PROBABILITY, mlm_model

        self.mlm, _ = mlm_model(model_path, "auto", False, seed)
        encoder = st[0].auto_model
        setattr(self.mlm, self.mlm.base_model_prefix, encoder)
        self.mlm.tie_weights()
        self.collator = DataCollatorForLanguageModeling(
            st.tokenizer, mlm=True, mlm_probability=MLM_PROBABILITY, seed=seed
        )

    def forward(self, features: list[dict], labels=None):
        ids = features[0]["input_ids"]
        batch = self.collator(
            [
                {"input_ids": row[mask.bool()].tolist()}
                for row, mask in zip(ids.cpu(), features[0]["attention_mask"].cpu())
            ]
        )
        batch = {k: v.to(ids.device) for k, v in batch.items() if k in ("input_ids", "attention_mask", "labels")}
        return self.mlm(**batch).loss
