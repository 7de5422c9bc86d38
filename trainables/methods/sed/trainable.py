"""The Ray Tune trial of SED: a teacher or the ensemble scored from the stage's embeddings, or a
student trained by mean squared error towards the ensemble's targets."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from trainables.methods.sed.targets import DEV_SET, TARGETS_FILE, encode, eval_sentences, pooled
from trainables.stages.store import local_stage
from trainables.training.trainable import EpochTrainable


# --- the trial ---------------------------------------------------------------------------------
@dataclass
class SEDData:
    """Shipped to every trial: the corpus tokenised by the student, the evaluation suite, and the
    STS-B dev set (scored every epoch)."""

    corpus_ids: list
    pad_id: int
    suite: object
    dev: object


class SEDTrainable(EpochTrainable):
    def build(self, config: dict, data: SEDData) -> None:
        self.member, self.data = config["member"], data
        self.stage = local_stage(config["_upstream_path"])
        self.eval_layers = int(config["eval_pool_layers"])
        self.best_weights = None
        if self.member != "student":
            self.epochs = 0
            name = "eval_ensemble.npy" if self.member == "ensemble" else f"eval_teacher{int(config['replica'])}.npy"
            self.cached = np.load(self.stage / name).astype(np.float32)
            return
        from transformers import AutoTokenizer, get_linear_schedule_with_warmup

        from trainables.encoders.loading import count_parameters, load_pretrained
        from trainables.encoders.precision import adamw, resolve

        self.precision = resolve(config.get("precision", "fp32"), self.device)
        self.precision.apply_matmul_settings()
        self.model = load_pretrained(config["_student_path"]).to(self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(config["_student_path"])
        self.targets = np.load(self.stage / TARGETS_FILE, mmap_mode="r")
        self.batch_size, self.train_layers = int(config["batch_size"]), int(config["train_pool_layers"])
        steps = max(1, self.epochs) * math.ceil(len(data.corpus_ids) / self.batch_size)
        self.optimizer = adamw(
            [p for p in self.model.parameters() if p.requires_grad], float(config["lr"]), self.device
        )
        self.scheduler = get_linear_schedule_with_warmup(
            self.optimizer, math.ceil(float(config["warmup_ratio"]) * steps), steps
        )
        self.params = count_parameters(self.model)

    def train_epoch(self, epoch: int) -> dict:
        from trainables.encoders.precision import to_device
        from trainables.training.batches import pad

        self.model.train()
        order = torch.randperm(
            len(self.data.corpus_ids),
            generator=torch.Generator().manual_seed(int(self.trial_config["seed"]) * 100_003 + epoch),
        ).tolist()
        total = torch.zeros((), device=self.device)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            ids, mask = pad([self.data.corpus_ids[i] for i in rows], self.data.pad_id)
            target = torch.from_numpy(np.asarray(self.targets[sorted(rows)], dtype=np.float32))
            target = to_device(target[np.argsort(np.argsort(rows))], self.device)
            with self.precision.autocast():
                student = pooled(
                    self.model, to_device(ids, self.device), to_device(mask, self.device), self.train_layers
                )
            loss = F.mse_loss(student.float(), target)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.scheduler.step()
            total += loss.detach() * len(rows)
        return {"train_loss": float(total) / len(order)}  # a NaN diverged: EpochTrainable fails the trial

    def _scores(self, suite, layers: int | None = None) -> dict:
        """The suite's scores; a student's pooled over its last `layers` layers (default: --eval-pool-layers)."""
        if self.member != "student":  # rows of the stage's evaluation sentences
            position = {s: i for i, s in enumerate(eval_sentences(self.data.suite, self.data.dev))}
            return suite.score(self.cached[[position[s] for s in suite.sentences]])
        with self.precision.autocast():
            embeddings = encode(
                self.model, self.tokenizer, suite.sentences, layers or self.eval_layers, 64, self.device
            )
        return suite.score(embeddings)

    def evaluate(self) -> dict:
        scores = self._scores(self.data.dev)
        return {"dev_spearman": scores[f"{DEV_SET}_spearman"], "dev_pearson": scores[f"{DEV_SET}_pearson"]}

    def final_metrics(self) -> dict:
        if self.member == "student":
            latest = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
            self.model.load_state_dict(self.best_weights)
        scores = self._scores(self.data.suite)
        if self.member == "student" and self.eval_layers != 1:  # what the saved folder (last layer) scores
            folder = self._scores(self.data.suite, layers=1)
            scores.update(
                {f"folder_{k}": v for k, v in folder.items() if k.endswith("_spearman") and k.count("_") == 1}
            )
        if self.member == "student":
            self.model.load_state_dict(latest)
        return {
            **scores,
            **({"test_spearman_at_best_dev": scores["stsb_spearman"]} if "stsb_spearman" in scores else {}),
        }

    def parameter_count(self) -> int:
        return getattr(self, "params", 0)

    def trained_parameters(self) -> list:
        return list(self.model.parameters()) if self.member == "student" else []

    def remember_best(self) -> None:
        if self.member == "student":
            self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def save_best(self, target: Path) -> None:
        from trainables.encoders.st_folder import write_sentence_transformer
        from trainables.training.pair_training import copy_tokenizer_files

        if self.member != "student" or self.best_weights is None:
            return
        self.model.save_pretrained(str(target), state_dict=self.best_weights)
        copy_tokenizer_files(self.trial_config["_student_path"], target)
        write_sentence_transformer(target, "mean")

    def load_best(self, source: Path) -> None:
        from safetensors.torch import load_file

        if self.member == "student":
            self.best_weights = load_file(str(source / "model.safetensors"))

    def method_state(self, checkpoint_dir: Path) -> dict:
        if self.member != "student":
            return {}
        self.model.save_pretrained(str(checkpoint_dir / "encoder"))
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_method_state(self, state: dict, checkpoint_dir: Path) -> None:
        from safetensors.torch import load_file

        if self.member != "student":
            return
        self.model.load_state_dict(load_file(str(checkpoint_dir / "encoder" / "model.safetensors")))
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
