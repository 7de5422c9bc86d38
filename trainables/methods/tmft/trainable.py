"""The Ray Tune trial of TMFT: one epoch of the pair task's training (`PairFineTuning`, the Ray-free
loop) then dev (and, at the end, test) metrics; the best-dev weights as a sentence-transformers folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainables.core.faults import maybe_inject_fault
from trainables.encoders.loading import count_parameters, paper_parameter_count
from trainables.evaluation import layer_embeddings
from trainables.methods.tmft.encoder import ZERO_SHOT_STAGE, build_encoder
from trainables.training.best_encoder import KeepsBestEncoder
from trainables.training.pair_tasks import get_task
from trainables.training.pair_training import PairFineTuning
from trainables.training.trainable import EpochTrainable


@dataclass
class TMFTData:
    """What the driver prepares once and every TMFT trial reads: each model's tokenised task, the
    evaluation suite of `--eval-sets` (None without it), and, for a zero-epoch sweep, the suite
    of the task's dev and test sets whose embeddings the `embeddings` stage holds."""

    tasks: dict
    suite: object = None
    one_pass_scorer: object = None


class TMFTTrainable(KeepsBestEncoder, PairFineTuning, EpochTrainable):
    primary_metric = "spearman"
    pooling = "mean"

    def primary_for(self, config: dict) -> str:
        return get_task(config.get("task", "stsb")).primary_for(config)

    def build(self, config: dict, data: TMFTData) -> None:
        task = data.tasks[config["model"]]
        self.suite = data.suite if config.get("eval_sets") else None
        self.one_pass_scorer = data.one_pass_scorer if config.get("upstream_method") == ZERO_SHOT_STAGE else None
        self.best_weights, self.best_weights_epoch, self.saved_epoch, self.best_head = None, None, None, None
        self.best_dev_outputs = None  # the best epoch's dev outputs: the test score at the end needs no dev pass
        self.test_every_epoch = bool(config.get("test_every_epoch", True)) or self.epochs == 0
        encoder = build_encoder(
            task.model_path,
            int(config["layer"]),
            int(config["seed"]),
            bool(config.get("random_init", False)),
            config.get("upstream_method"),
            config.get("_upstream_path"),
        )
        self.init_fine_tuning(encoder, task, config, self.device, self.epochs)

    def evaluate(self) -> dict:
        """Dev scores each epoch, and test scores too with `test_every_epoch` or at epoch 0 (else the
        test set is scored once, with the best-dev weights, in `final_metrics`); at epoch 0 of a
        zero-epoch sweep, the task's dev/test scores from the one-pass stage."""
        if self.one_pass_scorer is None or self.epoch > 0:
            return super().evaluate(("dev", "test") if self.test_every_epoch else ("dev",))
        embeddings, _ = layer_embeddings.load(
            self.trial_config["_upstream_path"], self.trial_config["layer"], self.pooling
        )
        scores = self.one_pass_scorer.score(embeddings)
        return {
            f"{split}_{metric}": scores[f"{name}_{metric}"]
            for split, name in self.task_def.zero_shot_sets.items()
            for metric in ("spearman", "pearson")
        }

    # --- the best-dev weights -----------------------------------------------------------------
    def remember_best(self) -> None:
        self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        self.best_weights_epoch = self.epoch
        if self.head is not None:
            self.best_head = {k: v.detach().to("cpu", copy=True) for k, v in self.head.state_dict().items()}
        outputs = getattr(self, "last_outputs", None)
        self.best_dev_outputs = None if outputs is None or "dev" not in outputs else np.array(outputs["dev"])

    def final_metrics(self) -> dict:
        """With the best-dev weights: the test scores (`<metric>_at_best_dev`, unless every epoch
        scored test; the best epoch's dev outputs are kept, so only the test set is run) and the
        evaluation suite's scores (`--eval-sets`). The latest weights are put back afterwards."""
        if self.test_every_epoch and self.suite is None:
            return {}
        swap = self.best_weights_epoch != self.epoch  # the model holds the latest epoch's weights
        if swap:
            latest = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
            latest_head = (
                None
                if self.head is None
                else {k: v.detach().to("cpu", copy=True) for k, v in self.head.state_dict().items()}
            )
            self.model.load_state_dict(self.best_weights)
            if self.head is not None and self.best_head is not None:
                self.head.load_state_dict(self.best_head)
        out = {}
        if not self.test_every_epoch:
            dev = self.best_dev_outputs if self.best_dev_outputs is not None else self.predict(self.task.splits["dev"])
            scores = self.metrics_of(
                {"dev": np.asarray(dev), "test": np.asarray(self.predict(self.task.splits["test"]))}
            )
            out.update({f"{name}_at_best_dev": value for name, value in scores.items() if name.startswith("test_")})
        if self.suite is not None:
            out.update(self._suite_scores())
        if swap:
            self.model.load_state_dict(latest)
            if latest_head is not None:
                self.head.load_state_dict(latest_head)
        return out

    def _suite_scores(self) -> dict:
        from transformers import AutoTokenizer

        from trainables.evaluation.zero_shot import default_max_length, encode_sentences

        tokenizer = AutoTokenizer.from_pretrained(self.task.model_path)
        with self.precision.autocast():
            embeddings = encode_sentences(
                self.model,
                tokenizer,
                self.suite.sentences,
                self.pooling,
                batch_size=self.eval_batch_size,
                max_length=default_max_length(self.task.model_path),
                device=self.device,
            )
        return self.suite.score(embeddings)

    def on_train_step(self, step: int, epoch: int) -> None:
        if step == 2:
            maybe_inject_fault(self.trial_config, epoch)

    def parameter_count(self) -> int:
        return count_parameters(self.model)

    def paper_parameter_count(self) -> int:
        return paper_parameter_count(self.model)

    def method_state(self, checkpoint_dir: Path) -> dict:
        """Weights go to `encoder/` (a model folder with its tokenizer, loadable with AutoModel,
        e.g. for CKA); the task head, optimiser and scheduler into state.pt."""
        self.save_encoder(checkpoint_dir / "encoder")
        self.saved_epoch = self.epoch
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "head": self.head.state_dict() if self.head is not None else None,
            "best_head": self.best_head,
            "best_dev_outputs": None if self.best_dev_outputs is None else torch.from_numpy(self.best_dev_outputs),
        }

    def load_method_state(self, state: dict, checkpoint_dir: Path) -> None:
        from safetensors.torch import load_file

        self.model.load_state_dict(load_file(str(checkpoint_dir / "encoder" / "model.safetensors")))
        if self.head is not None and state.get("head") is not None:
            self.head.load_state_dict(state["head"])
        self.best_head = state.get("best_head")
        outputs = state.get("best_dev_outputs")
        self.best_dev_outputs = None if outputs is None else outputs.numpy()
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
