"""A finished trial's best-dev folder goes through sentence-transformers' own save with a model card
(trainables/encoders/model_card.py): it loads offline in sentence-transformers with the project's
own embeddings, keeps its half-precision weights and maximum length, its card names base model,
method, paper (BibTeX), settings, scores, sweep and run, and every reader reads it as it reads a
folder written before (classic files, no card)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from trainables.core.verified_copies import file_manifest
from trainables.training.trainable import BEST_DIR, BEST_FILES, EpochTrainable

SENTENCES = ["A man is playing a guitar.", "Two dogs run on the beach.", "A woman slices an onion."]
CONFIG = {
    **{"method": "tmft", "model": "sentence-transformers/all-MiniLM-L6-v2", "layer": 2, "seed": 0, "lr": 2e-5},
    **{"epochs": 1, "keep_checkpoints": "best", "best_dtype": "float16", "_upstream_path": "/not/in/the/card"},
}


class TinyTmft(EpochTrainable):
    """One epoch that changes nothing; its best-dev folder is the tiny BERT truncated to layer 2,
    written as the TMFT trial writes it (weights, tokenizer, classic sentence-transformers files)."""

    source = ""

    def build(self, config, data):
        self.optimizer = None

    def train_epoch(self, epoch):
        return {"train_loss": 0.5}

    def evaluate(self):
        return {"dev_spearman": 80.5, "test_spearman": 78.25}

    def parameter_count(self):
        return 1

    def remember_best(self):
        pass

    def save_best(self, target: Path):
        from transformers import AutoModel

        from trainables.encoders.loading import truncate
        from trainables.encoders.st_folder import write_sentence_transformer
        from trainables.training.pair_training import copy_tokenizer_files

        truncate(AutoModel.from_pretrained(self.source), 2).save_pretrained(target)
        copy_tokenizer_files(self.source, target)
        write_sentence_transformer(target, "mean", max_seq_length=40)

    def method_state(self, checkpoint_dir: Path):
        return {}


@pytest.fixture(scope="module")
def finished(tiny_models, tmp_path_factory):
    """(old, new): the classic folder of the running trial and the final one with its card."""
    TinyTmft.source = tiny_models["bert"]
    trial = TinyTmft(dict(CONFIG))
    root = tmp_path_factory.mktemp("card")
    (root / "running").mkdir()
    (root / "final").mkdir()
    trial.step()  # one epoch: done
    trial.save_checkpoint(str(root / "final"))
    running = TinyTmft(dict(CONFIG))
    running.save_best(root / "running" / BEST_DIR)  # what a checkpoint before this change holds
    return root / "running" / BEST_DIR, root / "final"


def project_embeddings(folder) -> np.ndarray:
    from transformers import AutoTokenizer

    from trainables.encoders.loading import load_pretrained
    from trainables.evaluation.zero_shot import encode_sentences

    return encode_sentences(load_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder), SENTENCES, "mean")


def test_the_final_best_folder_is_sentence_transformers_saved_and_loads_offline_as_the_project_encodes(finished):
    from safetensors import safe_open
    from sentence_transformers import SentenceTransformer

    _, final = finished
    best = final / BEST_DIR
    assert {"config_sentence_transformers.json", "README.md", "modules.json"} <= {p.name for p in best.iterdir()}
    with safe_open(str(best / "model.safetensors"), "pt") as weights:
        assert {weights.get_slice(k).get_dtype() for k in weights.keys()} == {"F16"}  # the storage rule held
    loaded = SentenceTransformer(str(best), device="cpu", local_files_only=True)
    assert loaded.max_seq_length == 40
    np.testing.assert_allclose(loaded.encode(SENTENCES), project_embeddings(best), atol=1e-5)
    assert json.loads((final / BEST_FILES).read_text()) == file_manifest(best)  # the card is in the listing


def test_the_card_names_base_model_method_paper_settings_scores_sweep_and_run(finished):
    from huggingface_hub import ModelCard

    from trainables.core.schema import config_hash

    _, final = finished
    card = ModelCard.load(final / BEST_DIR / "README.md")  # what sentence-transformers' and the hub's card tools read
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert {"sentence-transformers", "embsweep", "tmft"} <= set(card.data.tags)
    text = card.text
    assert "@inproceedings{rep-etal-2024-electra" in text and "Beyond Repair" in text
    assert "- `lr`: 2e-05" in text and "/not/in/the/card" not in text
    assert "| best_dev_spearman | 80.50 |" in text and "| test_spearman_at_best_dev | 78.25 |" in text
    assert "| dev_spearman |" not in text  # the last epoch's, not the kept weights'
    assert "- **Layer:** 2" in text and f"`{config_hash(CONFIG)}`" in text


def test_a_card_written_again_replaces_the_one_there(finished, tmp_path):
    from trainables.encoders.model_card import write_model_card

    _, final = finished
    again = shutil.copytree(final / BEST_DIR, tmp_path / "again")
    assert write_model_card(again, CONFIG, {"test_spearman_at_best_dev": 70.0}, "sweep-b")
    text = (again / "README.md").read_text()
    assert text.count("## embsweep trial") == 1 and "| test_spearman_at_best_dev | 70.00 |" in text
    assert (again / "README.md").read_text().count("```bibtex") == 1


def test_readers_read_old_and_new_folders_alike(finished, tmp_path):
    from trainables.encoders.loading import resolve_model
    from trainables.encoders.st_folder import read_pooling
    from trainables.evaluation.zero_shot import default_max_length

    old, final = finished
    new = final / BEST_DIR
    assert "config_sentence_transformers.json" not in {p.name for p in old.iterdir()}
    for folder in (old, new):  # runs:/, sweep: and SED teachers resolve the folder; CKA and SED encode it
        assert resolve_model(str(folder)) == folder.resolve()
        assert read_pooling(folder) == "mean" and default_max_length(folder) == 40
    np.testing.assert_allclose(project_embeddings(new), project_embeddings(old), atol=2e-3)  # fp16 against fp32
    cls = shutil.copytree(new, tmp_path / "cls")
    config = json.loads((cls / "1_Pooling" / "config.json").read_text())
    (cls / "1_Pooling" / "config.json").write_text(json.dumps({**config, "pooling_mode": "cls"}))
    assert read_pooling(cls) == "cls"


def test_a_folder_sentence_transformers_cannot_load_keeps_its_files_and_gets_no_card(tmp_path, capsys):
    from trainables.encoders.model_card import write_model_card

    folder = tmp_path / "broken"
    folder.mkdir()
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    (folder / "modules.json").write_text(json.dumps(modules))  # and no model files
    assert write_model_card(folder, CONFIG, {}) is False
    assert "no model card" in capsys.readouterr().err
    assert [p.name for p in folder.iterdir()] == ["modules.json"]
