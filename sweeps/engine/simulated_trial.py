"""The trial of a `--simulate` sweep (sweeps/engine/simulate.py says what it does): it waits its
predicted seconds and reports synthetic scores, epoch by epoch. It resumes as a real trial does: from
its newest checkpoint when the one Tune recorded is gone (trainables/training/newest_checkpoint.py),
and a finished trial restored from its last checkpoint reports its last result again rather than an
epoch past its last. This module and Ray Tune are all a simulated trial's process imports: no torch,
no transformers, no data."""

from __future__ import annotations

import json
import os
import time

from ray import tune

from sweeps.engine.simulate import Simulation, synthetic_score
from trainables.training.newest_checkpoint import RestoresNewest

STATE_FILE = "simulated.json"


def _runtime_info() -> dict:
    import ray

    context = ray.get_runtime_context()
    assigned = context.get_assigned_resources()  # in a placement group: "GPU_group_<bundle>_<id>" and the like
    return {
        "node_id": context.get_node_id(),
        "gpu_ids": ",".join(map(str, ray.get_gpu_ids())),
        "gpu_share": max((v for k, v in assigned.items() if k == "GPU" or k.startswith("GPU_group_")), default=0.0),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }


class SimulatedTrainable(RestoresNewest, tune.Trainable):
    """A trial that waits its predicted time and reports synthetic scores, epoch by epoch."""

    STATE_FILE = STATE_FILE

    def setup(self, config: dict, simulation: Simulation):
        self.simulation = simulation
        self._start(config)

    def _start(self, config: dict):
        self.trial_config = dict(config)
        self.epochs = max(0, int(config.get("epochs", 1) or 0))
        self.epoch = 0
        self.elapsed = 0.0
        self.best = None
        self.final = None  # the last result of a finished trial (what its final checkpoint keeps)

    def reset_config(self, new_config: dict) -> bool:
        self._start(new_config)
        return True

    def step(self) -> dict:
        if self.final is not None:  # restored from a finished trial's checkpoint: report it again
            return {**self.final, "done": True}
        started, began = time.perf_counter(), time.time()
        sim = self.simulation
        time.sleep(sim.wait(self.trial_config) / max(1, self.epochs))
        if self.epochs:
            self.epoch += 1
        score = synthetic_score(self.trial_config, sim.epoch_metric, self.epoch)
        better = self.best is None or (score > self.best if sim.mode == "max" else score < self.best)
        self.best = score if better else self.best
        done = self.epoch >= self.epochs
        self.elapsed += time.perf_counter() - started
        result = {
            sim.epoch_metric: score,
            sim.primary: self.best,
            "train_loss": 0.5**self.epoch,
            "epoch": self.epoch,
            "wall_time_s": self.elapsed,
            "train_time_s": self.elapsed,
            "device": "simulated",
            "simulated": True,
            **_runtime_info(),
            # where and when this epoch ran, as text (not a metric): the fault tests' placement check
            "epoch_span": f"{began:.3f}-{time.time():.3f}",
            "progress": self.epoch / self.epochs if self.epochs else 1.0,
            "done": done,
        }
        if done:
            result.update({name: synthetic_score(self.trial_config, name, self.epoch) for name in sim.finals})
            self.final = dict(result)  # Tune adds its own keys to the result it is given
        return result

    def save_checkpoint(self, checkpoint_dir: str):
        state = {"epoch": self.epoch, "elapsed": self.elapsed, "best": self.best, "final": self.final}
        path = os.path.join(checkpoint_dir, STATE_FILE)
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)
        with open(os.path.join(checkpoint_dir, "trial.json"), "w") as f:
            json.dump(self.trial_config, f, default=str)

    def load_checkpoint(self, checkpoint_dir: str):
        with open(os.path.join(checkpoint_dir, STATE_FILE)) as f:
            state = json.load(f)
        self.epoch, self.elapsed, self.best = state["epoch"], state["elapsed"], state["best"]
        self.final = state.get("final")
