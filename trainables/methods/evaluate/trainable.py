"""The Ray Tune trial of zero-shot evaluation: one model, pooling and layer scored on the suite
from the `embeddings` stage's cached pooled embeddings."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from ray import tune

from trainables.evaluation import layer_embeddings


@dataclass
class EvaluateData:
    """What every evaluation trial reads: the loaded suite (its sentences and gold scores)."""

    suite: object


class EvaluateTrainable(tune.Trainable):
    """One step: read this (layer, pooling)'s embeddings from the stage, score them, done."""

    def setup(self, config: dict, data: EvaluateData = None):
        self.suite = data.suite
        self.trial_config = dict(config)

    def reset_config(self, new_config: dict) -> bool:
        self.trial_config = dict(new_config)
        return True

    def step(self) -> dict:
        started = time.perf_counter()
        config = self.trial_config
        embeddings, params = layer_embeddings.load(config["_upstream_path"], config["layer"], config["pooling"])
        return {
            **self.suite.score(embeddings),
            "epoch": 0,
            "params_truncated": params,
            "wall_time_s": time.perf_counter() - started,
            "device": "cpu",
            "done": True,
        }

    def save_checkpoint(self, checkpoint_dir: str):
        (Path(checkpoint_dir) / "trial.json").write_text(json.dumps(self.trial_config, indent=2, default=str))

    def load_checkpoint(self, checkpoint_dir: str):
        """Nothing to restore: a trial is one deterministic step."""
