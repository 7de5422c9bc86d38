"""The best-dev encoder of a pair fine-tuning trial (TMFT, adaptive layers), kept in its checkpoint's
`best/` folder as a sentence-transformers model and read back on restore.

A trial that mixes `KeepsBestEncoder` in holds `best_weights` (a CPU state dict of the best dev epoch,
or None), `best_weights_epoch`, `pooling`, `task` and `save_encoder`, and, where it saves its latest
encoder to `encoder/` beside `best/`, `saved_epoch` (then a best epoch that is the saved one is linked,
not written again)."""

from __future__ import annotations

import os
from pathlib import Path


class KeepsBestEncoder:
    saved_epoch = None

    def save_best(self, target: Path) -> None:
        """`best/`: a sentence-transformers folder of the best-dev weights (hard links to `encoder/`
        when the best epoch is the one just saved)."""
        from trainables.encoders.st_folder import write_sentence_transformer
        from trainables.evaluation.zero_shot import default_max_length

        if self.best_weights is None:
            return
        encoder_dir = target.parent / "encoder"
        if self.saved_epoch is not None and self.best_weights_epoch == self.saved_epoch and encoder_dir.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            for file in encoder_dir.iterdir():
                os.link(file, target / file.name)
        else:
            self.save_encoder(target, state_dict=self.best_weights)
        write_sentence_transformer(target, self.pooling, default_max_length(self.task.model_path))

    def load_best(self, source: Path) -> None:
        from safetensors.torch import load_file

        self.best_weights = load_file(str(source / "model.safetensors"))
        self.best_weights_epoch = self.tracker.best_epoch
