"""`--keep-checkpoints`: what a finished trial's checkpoint keeps, and that a finished trial
restored from it reports its result again without training (trainables/training/retention.py)."""

import json
from pathlib import Path

import pytest
import torch

from trainables.core.verified_copies import file_manifest
from trainables.training import retention
from trainables.training.trainable import BEST_DIR, BEST_FILES, EpochTrainable


class Counting(EpochTrainable):
    """A toy method: one weight; `encoder/` holds its last value, `best/` its best-dev value."""

    def build(self, config, data):
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.optimizer = torch.optim.Adam([self.weight], lr=0.1)
        self.trained_epochs = 0
        self.best = None

    def train_epoch(self, epoch):
        self.trained_epochs += 1
        self.weight.data += 1
        return {"train_loss": 1.0 / epoch}

    def evaluate(self):
        return {"dev_spearman": float(self.weight.detach()) * 10}

    def parameter_count(self):
        return 1

    def remember_best(self):
        self.best = float(self.weight.detach())

    def save_best(self, target: Path):
        target.mkdir(parents=True, exist_ok=True)
        (target / "weight.txt").write_text(str(self.best))

    def method_state(self, checkpoint_dir: Path):
        (checkpoint_dir / "encoder").mkdir(exist_ok=True)
        (checkpoint_dir / "encoder" / "weight.txt").write_text(str(float(self.weight.detach())))
        return {"optimizer": self.optimizer.state_dict(), "weight": self.weight.detach().clone()}

    def load_method_state(self, state, checkpoint_dir):
        self.optimizer.load_state_dict(state["optimizer"])
        self.weight.data.copy_(state["weight"])


def _config(keep):
    return {"epochs": 2, "seed": 0, "lr": 0.1, "keep_checkpoints": keep}


def _finish(trial):
    results = [trial.step()]
    while not results[-1]["done"]:
        results.append(trial.step())
    return results


@pytest.mark.parametrize("keep", retention.KEEP_CHECKPOINTS)
def test_a_finished_trial_keeps_what_its_flag_says(tmp_path, keep):
    trial = Counting(_config(keep))
    running = tmp_path / "running"
    running.mkdir()
    trial.step()
    trial.save_checkpoint(str(running))  # mid-trial: everything a retry needs, whatever the flag
    assert {p.name for p in running.iterdir()} == {"state.pt", "trial.json", "encoder", BEST_DIR, BEST_FILES}
    assert "method" in torch.load(running / "state.pt", weights_only=True)

    results = _finish(trial)
    final = tmp_path / "final"
    final.mkdir()
    trial.save_checkpoint(str(final))
    expected = {"state.pt", "trial.json"}
    if keep != "none":
        expected |= {BEST_DIR, BEST_FILES}
    if keep in ("last", "all"):
        expected.add("encoder")
    assert {p.name for p in final.iterdir()} == expected
    state = torch.load(final / "state.pt", weights_only=True)
    assert ("method" in state) == (keep in ("last", "all"))
    if keep != "none":
        assert (final / BEST_DIR / "weight.txt").read_text() == "2.0"
        # the list a reader on another node checks its copy against: the float16 rewrite included
        assert json.loads((final / BEST_FILES).read_text()) == file_manifest(final / BEST_DIR)

    restored = Counting(_config(keep))
    restored.load_checkpoint(str(final))
    again = restored.step()
    assert restored.trained_epochs == 0, "a restored finished trial trained again"
    assert again["done"] and again["epoch"] == 2
    assert again["best_dev_spearman"] == pytest.approx(results[-1]["best_dev_spearman"])


def test_a_trial_planned_before_the_flag_existed_keeps_its_last_whole_checkpoint(tmp_path):
    config = _config("best")
    del config["keep_checkpoints"]
    trial = Counting(config)
    _finish(trial)
    trial.save_checkpoint(str(tmp_path))
    assert {p.name for p in tmp_path.iterdir()} == {"state.pt", "trial.json", "encoder", BEST_DIR, BEST_FILES}


def test_the_disk_figures_follow_the_flag():
    weights = 100e6
    assert retention.kept_bytes("none", weights) == 0
    assert retention.kept_bytes("best", weights) == weights / 2  # float16 by default
    assert retention.kept_bytes("best", weights, best_dtype="float32") == weights
    assert retention.kept_bytes("last", weights, best_dtype="float32") == 4 * weights
    assert retention.kept_bytes("all", weights, epochs=3, best_dtype="float32") == 12 * weights
    assert retention.checkpoints_to_keep("all") is None and retention.checkpoints_to_keep("best") == 1


@pytest.mark.parametrize("keep, kept_gb", [("best", 0.6), ("last", 4.2), ("none", 0.0)])
def test_the_plan_gives_the_disk_the_sweep_will_use(keep, kept_gb):
    from types import SimpleNamespace

    from sweeps.engine.runner import TrialResources
    from trainables.core.method import TrialCost

    costs = {("m", layer): TrialCost(1e9, 10.0, weight_bytes=layer * 100e6) for layer in (1, 2, 3)}
    configs = [{"model": "m", "layer": layer, "seed": seed, "epochs": 1} for layer in (1, 2, 3) for seed in (0, 1)]
    resources = TrialResources(1.0, 0.0, costs, ("model", "layer"))
    plan = SimpleNamespace(name="s", sweep_dir="d", configs=configs, args={"search": "grid", "keep_checkpoints": keep})
    line = resources.describe(plan).splitlines()[-1]
    assert f"about {kept_gb:.2f} GB of checkpoints kept (--keep-checkpoints {keep}, --best-dtype float16)" in line
    assert "up to 2.40 GB more for each trial while it runs" in line  # the largest trial's 8 x 300 MB


def test_a_checkpoint_tune_deleted_is_replaced_by_the_trials_newest(tmp_path, capsys):
    """A driver killed after its last experiment-state snapshot leaves Tune pointing at a checkpoint it
    has since deleted (it keeps one): the trial continues from its newest checkpoint instead."""
    trial = Counting({**_config("best"), "epochs": 3})
    trial.step()
    trial.step()
    newest = tmp_path / "checkpoint_000001"
    newest.mkdir()
    trial.save_checkpoint(str(newest))
    (tmp_path / "checkpoint_000002").mkdir()  # being written when the driver died: no state.pt yet

    restored = Counting({**_config("best"), "epochs": 3})
    restored.restore(str(tmp_path / "checkpoint_000000"))
    assert "continues from" in capsys.readouterr().err
    assert restored.epoch == 2 and restored.training_iteration == 2
    result = restored.step()
    assert result["epoch"] == 3 and result["done"] and restored.trained_epochs == 1

    fresh = Counting({**_config("best"), "epochs": 3})
    fresh.restore(str(tmp_path / "elsewhere" / "checkpoint_000000"))
    assert "its first epoch" in capsys.readouterr().err
    assert fresh.step()["epoch"] == 1


class Saving(Counting):
    """Counting whose best-dev folder is a safetensors file, as a model folder's is."""

    def save_best(self, target: Path):
        from safetensors.torch import save_file

        target.mkdir(parents=True, exist_ok=True)
        save_file(
            {"weight": torch.full((4,), self.best / 3), "steps": torch.tensor([7])}, str(target / "model.safetensors")
        )


@pytest.mark.parametrize("dtype", retention.BEST_DTYPES)
def test_a_finished_trial_stores_its_best_weights_in_the_dtype_asked_for(tmp_path, dtype):
    from safetensors.torch import load_file

    trial = Saving({**_config("best"), "best_dtype": dtype})
    (tmp_path / "running").mkdir()
    (tmp_path / "final").mkdir()
    trial.step()
    trial.save_checkpoint(str(tmp_path / "running"))
    assert load_file(str(tmp_path / "running" / BEST_DIR / "model.safetensors"))["weight"].dtype == torch.float32
    _finish(trial)
    trial.save_checkpoint(str(tmp_path / "final"))
    stored = load_file(str(tmp_path / "final" / BEST_DIR / "model.safetensors"))
    assert stored["weight"].dtype == getattr(torch, dtype) and stored["steps"].dtype == torch.int64
    assert stored["weight"].float() == pytest.approx(torch.full((4,), 2.0 / 3), abs=1e-3)


def test_half_precision_best_folders_load_as_float32_and_score_as_the_trial_did(tiny_models, tmp_path):
    """A model folder stored by `store_half`: transformers reads it back as float32, and its
    embeddings' cosines are those of the float32 weights to well within 0.05 Spearman x100."""
    import shutil

    from scipy.stats import spearmanr
    from transformers import AutoModel, AutoTokenizer

    from trainables.evaluation.zero_shot import encode_sentences

    folder = tmp_path / "best"
    shutil.copytree(tiny_models["bert"], folder)
    sentences = [f"sentence number {i} about {w}" for i, w in enumerate("abcdefghijklmnopqrstuvwxyz")]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    before = encode_sentences(AutoModel.from_pretrained(folder).eval(), tokenizer, sentences, "mean")
    size = (folder / "model.safetensors").stat().st_size
    retention.store_half(folder)
    assert (folder / "model.safetensors").stat().st_size < 0.6 * size
    model = AutoModel.from_pretrained(folder).eval()
    assert next(model.parameters()).dtype == torch.float32
    after = encode_sentences(model, tokenizer, sentences, "mean")

    def cosines(e):
        unit = e / (e**2).sum(1, keepdims=True) ** 0.5
        return (unit[:-1] * unit[1:]).sum(1)

    gold = range(len(sentences) - 1)
    assert abs(spearmanr(cosines(before), gold).statistic - spearmanr(cosines(after), gold).statistic) * 100 < 0.05
