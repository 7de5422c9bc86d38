"""The Ray Tune trial of a meta-embedding sweep: an epoch of UNSUP or SUP training over the cached
source vectors (or a baseline's one pass), scored on STS-B dev and, at the end, the suite."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainables.core.errors import SweepInputError
from trainables.encoders.precision import adamw
from trainables.methods.meta_embeddings import token_embeddings
from trainables.methods.meta_embeddings.models import (
    MetaModel,
    authors_code_loss,
    baseline_vectors,
    batch_words,
    paper_loss,
    paper_terms,
    sentence_vectors,
    sup_mse_loss,
    sup_signed_loss,
)
from trainables.methods.meta_embeddings.variants import ABLATIONS, TRAINED, default_optimizer
from trainables.training.divergence import CAUSES, check_step
from trainables.training.trainable import EpochTrainable


# --- the trial ----------------------------------------------------------------------------------
@dataclass
class MetaData:
    """Shipped to every trial: rows of the stage (its sentence order) for the STS-B train and dev
    pairs and the suite's sentences, the gold scores, and the suite."""

    train: tuple  # (rows of s1, rows of s2, gold 0-5)
    dev: tuple
    suite_rows: np.ndarray
    suite: object
    sentences: int  # rows in each source's stage


class MetaEmbeddingTrainable(EpochTrainable):
    """A baseline is one step (epochs 0). UNSUP/SUP: an epoch per step, STS-B dev Pearson after
    each, early stopping (patience, cap), the suite scored with the best epoch's weights."""

    primary_metric = "pearson"

    def build(self, config: dict, data: MetaData) -> None:
        self.data, self.meta, self.variant = data, config["meta"], config["variant"]
        self.sources = [token_embeddings.load(path) for path in config["_source_paths"]]
        for path, (_, starts) in zip(config["_source_paths"], self.sources):
            if len(starts) != data.sentences + 1:
                raise SweepInputError(
                    f"stage {path} holds {len(starts) - 1} sentences, the sweep expects {data.sentences}"
                )
        self.best_state, self.best_dev, self.bad = None, None, 0
        self.model, self.cached = None, None
        if self.meta not in TRAINED:
            self.epochs = 0
            return
        architecture = "authors_code" if self.variant in ("authors_code", "signed") else "paper"
        dims = [int(words.shape[1]) for words, _ in self.sources]
        self.model = MetaModel(
            dims, int(config["width"]), architecture, config["pooling"], weighted=self.variant != "no-weights"
        ).to(self.device)
        lr = 1e-4 if self.variant == "signed" else float(config["lr"])
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = config.get("optimizer") or default_optimizer(self.variant)
        if optimizer == "sgd":  # the paper's (§4.4); momentum 0 as the authors' commented-out SGD line
            self.optimizer = torch.optim.SGD(parameters, lr=lr, weight_decay=float(config["weight_decay"]))
        else:
            self.optimizer = adamw(parameters, lr, self.device, weight_decay=float(config["weight_decay"]))

    # training
    def _words(self, rows) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        xs, masks = batch_words(self.sources, rows)
        return [x.to(self.device) for x in xs], [m.to(self.device) for m in masks]

    def loss(self, rows1, rows2, gold) -> torch.Tensor:
        """The trial's loss on a batch of pairs. The authors' model (`authors_code`, SUP `signed`)
        pads each side to its own longest sentence and pools over the pads, as their code does;
        the paper's pads both sides to one length (its criteria compare positions across them)
        and pools each sentence's words."""
        authors = self.model.variant == "authors_code"
        if authors:
            (x1, k1), (x2, k2) = self._words(rows1), self._words(rows2)
        else:
            xs, masks = self._words(np.concatenate([rows1, rows2]))
            n = len(rows1)
            x1, x2, k1, k2 = [x[:n] for x in xs], [x[n:] for x in xs], [m[:n] for m in masks], [m[n:] for m in masks]
        w1, w2 = self.model.words(x1, k1), self.model.words(x2, k2)
        if self.meta == "unsup" and not authors:  # word-level criteria only: no sentence vectors needed
            how = self.trial_config.get("paper_loss") or "literal"
            margin = float(self.trial_config["margin"]) if how == "hinge" else None
            terms = paper_terms([w1, w2], [k1, k2], self.model.matrices(), margin)
            dropped = self.variant[3:] if self.variant in ABLATIONS and self.variant != "no-weights" else None
            return paper_loss(terms, self.model.coefficients, how, dropped)
        m1, m2 = (self.model.sentence(w, None if authors else k) for w, k in ((w1, k1), (w2, k2)))
        if self.meta == "sup":
            gold = torch.as_tensor(gold, dtype=torch.float32, device=self.device)
            return sup_signed_loss(m1, m2, gold) if self.variant == "signed" else sup_mse_loss(m1, m2, gold)
        return authors_code_loss([w1, w2], m1, m2, self.model.matrices(), *self.model.coefficients)

    def train_epoch(self, epoch: int) -> dict:
        s1, s2, gold = self.data.train
        order = np.random.default_rng(int(self.trial_config["seed"]) * 100_003 + epoch).permutation(len(s1))
        batch, total = int(self.trial_config["batch_size"]), 0.0
        self.model.train()
        causes = {k: self.trial_config[k] for k in CAUSES if k in self.trial_config}
        for step, begin in enumerate(range(0, len(order), batch), start=1):
            pick = order[begin : begin + batch]
            loss = self.loss(s1[pick], s2[pick], gold[pick])
            value = float(loss.detach())
            check_step(epoch, step, value, causes)  # a diverged trial ends here, not after its epoch
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            total += value * len(pick)
        # non-finite weights after the last step fail the trial in EpochTrainable, before evaluation
        return {"train_loss": total / len(order), **self._weights()}

    def _weights(self) -> dict:
        """The sources' weights (softmax-normalised in the paper variant), one metric each."""
        return {f"source_weight_{i}": a for i, a in enumerate(self.model.source_weights().tolist())}

    # scoring
    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """Sentence vectors of stage rows: the baseline's, or the model's (each sentence's own words)."""
        if self.model is None:
            position, vectors = self._baseline()
            return vectors[[position[int(r)] for r in rows]]
        self.model.eval()
        rows = np.asarray(rows)
        starts = self.sources[0][1]
        order = np.argsort(starts[rows + 1] - starts[rows], kind="stable")  # similar lengths batched: little padding
        out = []
        with torch.no_grad():
            for begin in range(0, len(rows), 512):
                xs, masks = self._words(rows[order[begin : begin + 512]])
                out.append(self.model.sentence(self.model.words(xs, masks), masks).cpu().numpy())
        return np.concatenate(out)[np.argsort(order)]  # back to the order of `rows`

    def _baseline(self) -> tuple[dict, np.ndarray]:
        """(stage row -> position, vectors) of the dev and suite sentences, fitted and computed once."""
        if self.cached is None:
            rows = np.unique(np.concatenate([*self.data.dev[:2], self.data.suite_rows]))
            train_rows = np.unique(np.concatenate(self.data.train[:2]))
            pooling = self.trial_config.get("pooling") or "mean"
            inputs = self.trial_config.get("baseline_inputs") or "l2"  # a sweep recorded before the setting: l2
            vectors = baseline_vectors(
                self.meta,
                self.variant,
                [sentence_vectors(s, train_rows, pooling, inputs) for s in self.sources],
                [sentence_vectors(s, rows, pooling, inputs) for s in self.sources],
                lambda: [sentence_vectors(s, np.arange(self.data.sentences), pooling, inputs) for s in self.sources],
                int(self.trial_config["width"]),
                int(self.trial_config["seed"]),
                int(self.trial_config["source_index"]),
            )
            self.cached = ({int(r): i for i, r in enumerate(rows)}, vectors)
        return self.cached

    def evaluate(self) -> dict:
        from trainables.evaluation.metrics import correlations, improves

        s1, s2, gold = self.data.dev
        vectors = self.vectors(np.concatenate([s1, s2]))
        a, b = vectors[: len(s1)], vectors[len(s1) :]
        cosine = np.sum(a * b, 1) / np.clip(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12, None)
        scores = correlations(cosine, gold)
        if improves(scores["pearson"], self.best_dev):  # a NaN (collapsed) epoch is never the best
            self.best_dev, self.bad = scores["pearson"], 0
        else:
            self.bad += 1
            if self.bad >= int(self.trial_config["patience"]):
                self.epochs = self.epoch  # early stop: this epoch is the last
        return {"dev_pearson": scores["pearson"], "dev_spearman": scores["spearman"]}

    def remember_best(self) -> None:
        if self.model is not None:
            self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def final_metrics(self) -> dict:
        if self.model is not None:
            self.model.load_state_dict(self.best_state)
        scores = self.data.suite.score(self.vectors(self.data.suite_rows))
        extra = {"test_spearman_at_best_dev": scores["stsb_spearman"]} if "stsb_spearman" in scores else {}
        if self.model is not None:
            extra.update(self._weights())
        return {**scores, **extra, "stopped_epoch": self.epoch}

    def parameter_count(self) -> int:
        return 0 if self.model is None else sum(p.numel() for p in self.model.parameters())

    def trained_parameters(self) -> list:
        return [] if self.model is None else list(self.model.parameters())

    def method_state(self, checkpoint_dir: Path) -> dict:
        if self.model is None:
            return {}
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "best_state": self.best_state,
            "best_dev": self.best_dev,
            "bad": self.bad,
            "epochs": self.epochs,
        }

    def load_method_state(self, state: dict, checkpoint_dir: Path) -> None:
        if self.model is None:
            return
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.best_state, self.best_dev, self.bad, self.epochs = (
            state["best_state"],
            state["best_dev"],
            state["bad"],
            state["epochs"],
        )
