"""The Ray Tune trial of the adaptive-layer method: one epoch of AdaptiveLayerLoss training
(`AdaptiveLayerFineTuning`, the Ray-free loop), then the dev scores of every layer; at the end, the
test scores of every layer with the best-dev weights (best by the mean dev score over the layers),
which are kept as one sentence-transformers folder (`best/`, mean pooling, every layer)."""

from __future__ import annotations

from pathlib import Path

from trainables.encoders.loading import count_parameters, paper_parameter_count
from trainables.methods.adaptive_layer.training import AdaptiveLayerFineTuning
from trainables.training.best_encoder import KeepsBestEncoder
from trainables.training.trainable import EpochTrainable


class AdaptiveLayerTrainable(KeepsBestEncoder, AdaptiveLayerFineTuning, EpochTrainable):
    primary_metric = "spearman"
    pooling = "mean"

    def build(self, config: dict, data) -> None:
        self.best_weights, self.best_weights_epoch = None, None
        self.init_adaptive(data.tasks[config["model"]], config, self.device, self.epochs)

    def evaluate(self) -> dict:
        return self.layer_metrics(("dev",))

    def remember_best(self) -> None:
        self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        self.best_weights_epoch = self.epoch

    def final_metrics(self) -> dict:
        """Dev and test of every layer with the best-dev weights (`..._at_best_dev`); the latest weights
        are put back afterwards."""
        latest = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        if self.best_weights is not None:
            self.model.load_state_dict(self.best_weights)
        scores = self.layer_metrics(("dev", "test"))
        self.model.load_state_dict(latest)
        return {f"{name}_at_best_dev": value for name, value in scores.items()}

    def parameter_count(self) -> int:
        return count_parameters(self.model)

    def paper_parameter_count(self) -> int:
        return paper_parameter_count(self.model)

    def method_state(self, checkpoint_dir: Path) -> dict:
        self.save_encoder(checkpoint_dir / "encoder")
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "head": self.head.state_dict() if self.head is not None else None,
        }

    def load_method_state(self, state: dict, checkpoint_dir: Path) -> None:
        from safetensors.torch import load_file

        self.model.load_state_dict(load_file(str(checkpoint_dir / "encoder" / "model.safetensors")))
        if self.head is not None and state.get("head") is not None:
            self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
