"""The word-similarity stage of WS+TMFT (ELECTRA paper; docs/methods/electra.md M2).

Inputs: a model, a layer l, the combined word-pair set (RG-65 / 4, SimLex-999 / 10,
SimVerb-3500 / 10, WordSim-353-sim / 10; unordered duplicates dropped; a seeded 70/15/15 split,
trainables/data/word_similarity.py). Each word is tokenised like a sentence ([CLS] subwords [SEP])
and mean-pooled over all its tokens at layer l (the encoder physically truncated to l layers).
Loss: MSE(cos(u, v), score). AdamW lr 2e-5, weight decay 0.01, batch 128, 50 epochs, 10% warm-up
then linear decay, clipping 1.0, seed 0 only. Dev after every epoch; the best epoch's weights are
kept. Selection (`selection` in the stage config, `--ws-selection`): "cosine" (dev Spearman of the
cosine, the project default, as the paper describes) or "max4" (the authors' code: the max of the
dev Spearman over cosine, Euclidean, Manhattan and dot product). The authors also evaluated every
1000 steps; with ~25 steps per epoch here, per-epoch evaluation is what this stage does.

Output (in the stage directory): `encoder/`, the layer-l encoder at its best dev epoch (a model
folder; the TMFT trial loads it with `strict=False`, as the authors did), and the per-epoch history
returned to the stage store's manifest. Progress for the driver: optimiser steps done of
`epochs x ceil(train pairs / batch size)` (trainables/stages/progress.py).
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path

from trainables.core import settings as shared
from trainables.core.settings import Choice, Setting
from trainables.data.word_similarity import SPLIT_METHODS
from trainables.stages.upstream import STAGES, StageKind, stage_settings

STAGE_DEFAULTS = {
    "epochs": 50,
    "batch_size": 128,
    "lr": 2e-5,
    "weight_decay": 0.01,
    "warmup_ratio": 0.1,
    "eval_batch_size": 64,
    "selection": "cosine",
    "seed": 0,
    "split_seed": 0,
    "split_method": "numpy",
}
SELECTIONS = ("cosine", "max4")
PAPER = "ELECTRA paper §4 (word-similarity fine-tuning)"
SETTINGS = stage_settings(
    "ws",
    (
        shared.EPOCHS.but(help="word-similarity stage epochs (best dev epoch kept)", source=PAPER),
        shared.BATCH_SIZE.but(help="word-similarity stage batch size", source=PAPER),
        shared.LR.but(help="word-similarity stage learning rate", source=PAPER),
        Setting(
            "selection",
            Choice(SELECTIONS),
            help="best-epoch rule: dev Spearman of the cosine (the paper), or the authors' max over cosine, "
            "Euclidean, Manhattan and dot",
        ),
        shared.MAX_TRAIN_SAMPLES.but(help="train the WS stage on a deterministic subset of word pairs"),
        Setting(
            "split",
            Choice(SPLIT_METHODS),
            STAGE_DEFAULTS["split_method"],
            "word-pair split: numpy (seeded, this project's), sklearn-compat (the authors' train_test_split with "
            "np.random.seed(0))",
        ),
    ),
    STAGE_DEFAULTS,
)


def stage_config(
    layer: int,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    selection: str,
    random_init: bool,
    max_train_samples: int | None,
    max_eval_samples: int | None,
    split_method: str = "numpy",
    split_seed: int = 0,
) -> dict:
    """The stage config that, with the model and the data checksum, keys a WS stage."""
    if selection not in SELECTIONS:
        raise ValueError(f"unknown word-similarity selection {selection!r}; valid: {', '.join(SELECTIONS)}")
    return {
        **STAGE_DEFAULTS,
        "stage": "ws",
        "layer": int(layer),
        "epochs": int(epochs),
        "batch_size": int(batch_size),
        "lr": float(lr),
        "selection": selection,
        "random_init": bool(random_init),
        "max_train_samples": max_train_samples,
        "max_eval_samples": max_eval_samples,
        "split_method": split_method,
        "split_seed": int(split_seed),
    }


def compute(spec: dict, out_dir: Path) -> dict:
    """Train the WS stage of `spec` (model_path, data_dir, config) and write `out_dir/encoder/`."""
    from trainables.encoders.loading import count_parameters
    from trainables.evaluation.metrics import BestTracker
    from trainables.methods.tmft.encoder import build_encoder
    from trainables.stages.progress import StageProgress
    from trainables.training.device import pick_device, seed_everything
    from trainables.training.divergence import check_converging
    from trainables.training.pair_tasks import get_task
    from trainables.training.pair_training import PairFineTuning
    from trainables.training.tokenized import subset, tokenize_task

    started = time.perf_counter()
    config = spec["config"]
    seed = int(config["seed"])
    seed_everything(seed)
    task = get_task("wordsim")
    examples, checksums = task.load(
        spec["data_dir"], seed=int(config["split_seed"]), split_method=config["split_method"]
    )
    if config.get("max_eval_samples"):
        examples = {
            s: (rows if s == "train" else subset(rows, config["max_eval_samples"])) for s, rows in examples.items()
        }
    data = tokenize_task("wordsim", spec["model_path"], examples, checksums, config.get("max_train_samples"))
    device = pick_device()
    encoder = build_encoder(spec["model_path"], int(config["layer"]), seed, bool(config.get("random_init")))

    tuner = PairFineTuning()  # the TMFT loop, outside Ray
    epochs = int(config["epochs"])
    tuner.init_fine_tuning(encoder, data, config, device, epochs)
    progress = StageProgress(spec, epochs * math.ceil(len(data.splits["train"]) / tuner.batch_size))
    tuner.on_train_step = lambda step, epoch: progress.step()
    tracker = BestTracker(task.primary_for({"ws_selection": config["selection"]}))
    history, best_state = [], None
    for epoch in range(1, epochs + 1) if epochs else [0]:
        metrics = tuner.train_epoch(epoch) if epoch else {}
        if epoch:
            check_converging(epoch, metrics["train_loss"], tuner.trained_parameters(), config["lr"], "lower --ws-lr")
        metrics.update(tuner.evaluate())
        if tracker.update(epoch, metrics):
            best_state = copy.deepcopy({k: v.detach().cpu() for k, v in tuner.model.state_dict().items()})
        history.append({"epoch": epoch, **metrics})
    progress.finish()
    tuner.model.load_state_dict(best_state)
    tuner.save_encoder(Path(out_dir) / "encoder")
    return {
        "history": history,
        "final": {**tracker.summary(), "wall_time_s": time.perf_counter() - started},
        "params_truncated": count_parameters(tuner.model),
        "train_pairs": len(data.splits["train"]),
        "device": str(device),
        "precision": tuner.precision.name,
    }


@STAGES.register("ws")
class WordSimilarityStage(StageKind):
    downstream, task = "ws+tmft", "wordsim"
    compute = staticmethod(compute)
    recorded = {"layer": "layer", "ws_selection": "selection"}
    settings = SETTINGS

    @staticmethod
    def label(config: dict) -> str:
        return f"L{config['layer']}"
