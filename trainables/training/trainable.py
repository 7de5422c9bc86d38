"""What every trial does the same way: seeding, device choice, epoch bookkeeping, the result
dict, and checkpoints that let a retried or resumed trial continue from its last epoch.

A method's Trainable subclasses `EpochTrainable` and implements `build(config, data)`,
`train_epoch(epoch)` (returns a dict with `train_loss`), `evaluate()` (returns dev_*/test_*
metrics), `parameter_count()` and the state hooks. Checkpoints hold `state.pt` (optimiser,
best-dev bookkeeping, RNG states, elapsed time), `trial.json` (the whole config) and `best/`: the
weights of the best-dev epoch as a loadable model folder (what evaluation, CKA and distillation
teachers read), beside the latest state that resume needs. Every epoch is safe to repeat. When the
last epoch is done, the trial's `keep_checkpoints` (trainables/training/retention.py) decides what its
final checkpoint keeps: by default only `best/`, with a small state.pt that lets a restored finished
trial report its result again instead of training on. Training that
diverges (a non-finite mean loss, or non-finite `trained_parameters()`) raises a `TrialFailure` after the
epoch, for every method (trainables/training/divergence.py). A `TrialFailure` (or bad input met on the
worker) ends the trial with a last result holding `trial_failed` (the reason) instead of an error Tune
would retry.
When the last epoch is done, `final_metrics()` may add scores of the best-dev weights (e.g. the
evaluation suite, `--eval-sets`) to the trial's last result, and the final `best/` gets
sentence-transformers' own files and a model card with those scores (trainables/encoders/model_card.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
from ray import tune

from trainables.core import schema
from trainables.core.errors import SweepInputError, TrialFailure
from trainables.core.faults import maybe_hold
from trainables.evaluation.metrics import BestTracker
from trainables.training.device import pick_device, seed_everything
from trainables.training.divergence import CAUSES, check_converging
from trainables.training.newest_checkpoint import RestoresNewest
from trainables.training.retention import LEGACY, LEGACY_BEST_DTYPE, keeps_best, keeps_training_state, store_half

BEST_DIR = "best"  # the best-dev model folder inside every checkpoint
BEST_FILES = schema.BEST_FILES


def _assigned_cpus() -> int:
    import ray

    if not _in_ray_worker():  # run outside a Ray worker (benchmarks, tests): use the whole machine
        return max(1, os.cpu_count() or 1)
    return max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1)))


def _in_ray_worker() -> bool:
    import ray

    return ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE


def _runtime_info() -> dict:
    import ray

    if not _in_ray_worker():
        return {"node_id": "", "gpu_ids": ""}
    return {"node_id": ray.get_runtime_context().get_node_id(), "gpu_ids": ",".join(str(g) for g in ray.get_gpu_ids())}


def _list_best(checkpoint_dir: Path) -> None:
    """Write `best.files.json` beside `best/`: what a `runs:/` reader on another node checks its copy against."""
    from trainables.core.verified_copies import file_manifest

    if (checkpoint_dir / BEST_DIR).is_dir():
        listing = file_manifest(checkpoint_dir / BEST_DIR)
        (checkpoint_dir / BEST_FILES).write_text(json.dumps(listing, indent=1, sort_keys=True))


def _plain(value):
    """numpy scalars and other non-JSON values of a result, as JSON can hold them."""
    return value.item() if hasattr(value, "item") else str(value)


class EpochTrainable(RestoresNewest, tune.Trainable):
    """One `step()` = one epoch of training then dev/test evaluation (epoch 0 = no training); restored
    from its newest checkpoint when the one Tune recorded is gone (newest_checkpoint.py)."""

    primary_metric = "spearman"

    def setup(self, config: dict, data=None):
        self._data = data
        self._guarded_setup(config)

    def _guarded_setup(self, config: dict) -> None:
        self._failure = None
        self._final_result = None  # the last result of a finished trial (what its final checkpoint keeps)
        try:
            self._start_setup(config)
        except (TrialFailure, SweepInputError) as failure:
            self._failure = failure

    def _start_setup(self, config: dict):
        setup_started = time.perf_counter()
        self.trial_config = dict(config)
        self.epochs = int(config["epochs"])
        self.epoch = 0
        self.elapsed = 0.0
        self.train_elapsed = 0.0  # the part of `elapsed` spent in train_epoch (no evaluation, no setup)
        self.tracker = BestTracker(self.primary_for(config))
        self.device = pick_device()
        torch.set_num_threads(_assigned_cpus())
        seed_everything(int(config["seed"]))
        self.build(config, self._data)
        self.elapsed += time.perf_counter() - setup_started

    def reset_config(self, new_config: dict) -> bool:
        """Reuse this actor (and its in-memory caches) for the next trial."""
        self._guarded_setup(new_config)
        return True

    def step(self) -> dict:
        try:
            if self._failure is not None:
                raise self._failure
            if self._final_result is not None:  # restored from a finished trial's checkpoint: report it again
                return {**self._final_result, "done": True}
            result = self._step()
            if result["done"]:
                self._final_result = json.loads(json.dumps(result, default=_plain))
            return result
        except (TrialFailure, SweepInputError) as failure:  # deterministic: end the trial, do not retry it
            self._failure = failure
            return {
                "trial_failed": f"{type(failure).__name__}: {failure}",
                "epoch": getattr(self, "epoch", 0),
                "done": True,
                "progress": 1.0,
            }

    def _step(self) -> dict:
        started = time.perf_counter()
        maybe_hold(self.trial_config)
        if self.epochs == 0:
            metrics = {"train_loss": float("nan")}
        else:
            self.epoch += 1
            train_started = time.perf_counter()
            metrics = self.train_epoch(self.epoch)
            self.train_elapsed += time.perf_counter() - train_started
            # every method's divergence ends its trial here, before a NaN is evaluated or kept as best
            causes = {k: self.trial_config[k] for k in CAUSES if k in self.trial_config}
            check_converging(self.epoch, metrics["train_loss"], self.trained_parameters(), settings=causes)
        metrics.update(self.evaluate())
        if self.tracker.update(self.epoch, metrics):
            self.remember_best()
        done = self.epoch >= self.epochs
        if done:
            metrics.update(self.final_metrics())
        self.elapsed += time.perf_counter() - started
        return {
            **metrics,
            **self.tracker.summary(),
            "epoch": self.epoch,
            "params_truncated": self.parameter_count(),
            "params_paper": self.paper_parameter_count(),
            "wall_time_s": self.elapsed,
            "train_time_s": self.train_elapsed,
            "device": str(self.device),
            "precision_used": self.precision.name if hasattr(self, "precision") else "fp32",
            **({"forward_chunk_used": self.forward_chunk} if hasattr(self, "forward_chunk") else {}),
            **_runtime_info(),
            "progress": self.epoch / self.epochs if self.epochs else 1.0,
            "done": done,
        }

    def save_checkpoint(self, checkpoint_dir: str):
        if self._failure is not None:  # nothing to resume from: the trial failed for good
            (Path(checkpoint_dir) / "failed.txt").write_text(str(self._failure))
            return None
        keep = self.trial_config.get("keep_checkpoints", LEGACY)
        finished = self._final_result is not None
        state = {
            "epoch": self.epoch,
            "elapsed": self.elapsed,
            "train_elapsed": self.train_elapsed,
            "tracker": self.tracker.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }
        if finished:
            state["final_result"] = json.dumps(self._final_result)
        if not finished or keeps_training_state(keep):
            state["method"] = self.method_state(Path(checkpoint_dir))
        tmp = Path(checkpoint_dir) / ".state.pt.tmp"
        torch.save(state, tmp)
        os.replace(tmp, Path(checkpoint_dir) / "state.pt")  # a state.pt is always whole
        if not finished or keeps_best(keep):
            self.save_best(Path(checkpoint_dir) / BEST_DIR)
            if finished and self.trial_config.get("best_dtype", LEGACY_BEST_DTYPE) == "float16":
                store_half(Path(checkpoint_dir) / BEST_DIR)
            if finished and (Path(checkpoint_dir) / BEST_DIR / "modules.json").is_file():
                from sweeps.engine.ray_internals import experiment_dir_name
                from trainables.encoders.model_card import write_model_card

                sweep = experiment_dir_name(self)
                write_model_card(Path(checkpoint_dir) / BEST_DIR, self.trial_config, self._final_result, sweep)
            _list_best(Path(checkpoint_dir))
        (Path(checkpoint_dir) / "trial.json").write_text(json.dumps(self.trial_config, indent=2, default=str))
        return None

    def load_checkpoint(self, checkpoint_dir: str):
        path = Path(checkpoint_dir) / "state.pt"
        try:  # weights_only: a tampered checkpoint on shared storage cannot run code here
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # damaged (truncated, overwritten): start the trial again rather than fail for ever
            print(
                f"warning: checkpoint {path} cannot be read ({type(error).__name__}: "
                f"{str(error).splitlines()[0][:200]}); "
                "this trial starts again from its first epoch",
                file=sys.stderr,
                flush=True,
            )
            self._guarded_setup(self.trial_config)
            return
        self.epoch, self.elapsed = state["epoch"], state["elapsed"]
        self.train_elapsed = state.get("train_elapsed", 0.0)
        self.tracker.load_state_dict(state["tracker"])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        if "final_result" in state:
            self._final_result = json.loads(state["final_result"])
        if "method" not in state:  # a finished trial's checkpoint that kept no training state
            return
        self.load_method_state(state["method"], Path(checkpoint_dir))
        if (Path(checkpoint_dir) / BEST_DIR).is_dir():
            self.load_best(Path(checkpoint_dir) / BEST_DIR)

    # --- what a method provides -------------------------------------------------------------
    def primary_for(self, config: dict) -> str:
        """The dev metric that picks the best epoch (default: the class's `primary_metric`)."""
        return self.primary_metric

    def build(self, config: dict, data) -> None:
        raise NotImplementedError

    def train_epoch(self, epoch: int) -> dict:
        raise NotImplementedError

    def evaluate(self) -> dict:
        raise NotImplementedError

    def parameter_count(self) -> int:
        raise NotImplementedError

    def trained_parameters(self) -> list:
        """The weights that training updates, checked to be finite after every epoch (default: none)."""
        return []

    def paper_parameter_count(self) -> int:
        """The count the paper's tables use (default: `parameter_count`)."""
        return self.parameter_count()

    def method_state(self, checkpoint_dir: Path) -> dict:
        """State to pickle into state.pt; may also write files (e.g. weights) into checkpoint_dir."""
        raise NotImplementedError

    def load_method_state(self, state: dict, checkpoint_dir: Path) -> None:
        raise NotImplementedError

    def remember_best(self) -> None:
        """Called when the epoch just evaluated is the best so far: keep its weights."""

    def save_best(self, target: Path) -> None:
        """Write the best-dev weights as a loadable model folder into `target` (default: none)."""

    def load_best(self, source: Path) -> None:
        """Read back what `save_best` wrote (a resumed trial)."""

    def final_metrics(self) -> dict:
        """Metrics of the best-dev weights added to the last result (default: none)."""
        return {}
