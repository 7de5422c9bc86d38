"""A finished trial's best-dev folder made a sentence-transformers model by sentence-transformers' own
save, with a model card: `write_model_card(folder, config, result, sweep)`.

The folder is loaded as a `SentenceTransformer` (the classic files trainables/encoders/st_folder.py
wrote make it one) and saved by `SentenceTransformer.save` into a temporary folder beside it; its
sentence-transformers files (`modules.json`, `config_sentence_transformers.json`,
`sentence_bert_config.json`, the pooling module's folder and the card `README.md`) replace the
folder's. The weights, `config.json` and tokenizer files stay the ones the trial wrote, so the
half-precision storage rule (trainables/training/retention.py) and hard links keep holding; the
maximum length the trial set (`max_seq_length`, which sentence-transformers 6 would move into the
tokenizer's files) is kept in `sentence_bert_config.json`, which both it and the project read.

The card is sentence-transformers' own (its YAML header names the base model and tags, which its
card tools and the hub read): model name, base model, training settings as hyperparameters, the
method's paper as BibTeX under Citation; and a section naming the method, the layer, the dev and
test scores of the trial's last result, its sweep and the MLflow run (tag `embsweep.config_hash`).
A card the folder already has is replaced (written again, the card is the same). A folder
sentence-transformers cannot load (DeBERTa-v2 truncated to 0 layers) keeps its classic files and
gets no card (a warning line says so).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from trainables.core.schema import config_hash

TMFT_PAPER = (
    "Are ELECTRA's Sentence Embeddings Beyond Repair? The Case of Semantic Textual Similarity",
    """@inproceedings{rep-etal-2024-electra,
    title = "Are {ELECTRA}'s Sentence Embeddings Beyond Repair? The Case of Semantic Textual Similarity",
    author = "Rep, Ivan and Duki{\\'c}, David and {\\v{S}}najder, Jan",
    booktitle = "Findings of the Association for Computational Linguistics: EMNLP 2024",
    year = "2024",
    publisher = "Association for Computational Linguistics",
}""",
)
PAPERS = {
    "tmft": TMFT_PAPER,
    "ws+tmft": TMFT_PAPER,
    "dapt+tmft": TMFT_PAPER,
    "tsdae+tmft": TMFT_PAPER,
    "tsdae": (
        "TSDAE: Using Transformer-based Sequential Denoising Auto-Encoder for Unsupervised Sentence Embedding Learning",
        """@inproceedings{wang-etal-2021-tsdae-using,
    title = "{TSDAE}: Using Transformer-based Sequential Denoising Auto-Encoder
             for Unsupervised Sentence Embedding Learning",
    author = "Wang, Kexin and Reimers, Nils and Gurevych, Iryna",
    booktitle = "Findings of the Association for Computational Linguistics: EMNLP 2021",
    year = "2021",
    publisher = "Association for Computational Linguistics",
}""",
    ),
    "sed": (
        "Sentence Embeddings by Ensemble Distillation",
        """@article{carlsson2021sentence,
    title = "Sentence Embeddings by Ensemble Distillation",
    author = "Carlsson, Fredrik and Sahlgren, Magnus",
    journal = "arXiv preprint arXiv:2104.06719",
    year = "2021",
}""",
    ),
}
ST_FILES = ("modules.json", "config_sentence_transformers.json", "sentence_bert_config.json", "README.md")
SETTINGS_SKIPPED = ("model", "student", "layer", "method")
SUITE_SUFFIXES = ("_spearman", "_pearson", "_ap", "_map", "_ndcg_at_10")
EPOCH_PREFIXES = ("dev_", "test_", "train_")  # the last epoch's scores, not the kept weights' (unless _at_best_dev)


def _settings(config: dict) -> dict:
    """The trial's own settings: config keys not starting with `_` (driver-side paths), plain values."""
    return {
        k: v
        for k, v in sorted(config.items())
        if not k.startswith("_") and k not in SETTINGS_SKIPPED and isinstance(v, (str, int, float, bool))
    }


def _scores(result: dict) -> dict:
    """The kept weights' scores in the result: `best_dev_*`, `*_at_best_dev`, the suite's `<set>_<metric>`."""
    keep = {}
    for name, value in sorted(result.items()):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        selected = name.startswith("best_dev_") or name.endswith("_at_best_dev")
        suite = not name.startswith(EPOCH_PREFIXES) and name.endswith(SUITE_SUFFIXES)
        if selected or suite:
            keep[name] = float(value)
    return keep


def _section(config: dict, result: dict, sweep: str | None) -> str:
    method, base = str(config.get("method", "")), str(config.get("model") or config.get("student") or "")
    title, _ = PAPERS.get(method, ("", ""))
    lines = [
        "",
        "## embsweep trial",
        "",
        f"- **Method:** {method}" + (f" ({title})" if title else ""),
        f"- **Base model:** {base}",
        f"- **Layer:** {config.get('layer', 'last')} (the encoder truncated to its first layers; 0 = embeddings)",
        f"- **Sweep:** {sweep or 'unknown'}",
        f"- **MLflow run:** the trial run of that sweep with tag `embsweep.config_hash` = `{config_hash(config)}`",
        "",
        "| score (x100) | value |",
        "|---|---|",
        *(f"| {name} | {value:.2f} |" for name, value in _scores(result).items()),
        "",
    ]
    return "\n".join(lines)


def write_model_card(folder, config: dict, result: dict, sweep: str | None = None) -> bool:
    """Rewrite `folder`'s sentence-transformers files through sentence-transformers' save, with the
    card; False (and a warning) when sentence-transformers cannot load the folder."""
    from sentence_transformers import SentenceTransformer

    folder = Path(folder)
    # sentence-transformers would keep a card the folder has (TSDAE's save writes one; so does a card already made)
    (folder / "README.md").unlink(missing_ok=True)
    try:
        model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    except Exception as error:  # a model transformers itself cannot run (see the module docstring)
        print(f"warning: no model card for {folder}: sentence-transformers cannot load it ({error})", file=sys.stderr)
        return False
    method, base = str(config.get("method", "")), config.get("model") or config.get("student")
    card = model.model_card_data
    card.model_name = f"{base} {method}, layer {config.get('layer', 'last')} (embsweep)"
    if base and not str(base).startswith(("/", ".", "~", "runs:/")):
        card.base_model = str(base)
    card.add_tags(["embsweep", method])
    if method in PAPERS:
        card.citations = {PAPERS[method][0]: PAPERS[method][1]}
    settings = _settings(config)
    card.all_hyperparameters, card.non_default_hyperparameters = settings, settings
    classic = folder / "sentence_bert_config.json"
    length = json.loads(classic.read_text()).get("max_seq_length") if classic.is_file() else None
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".st-save-") as scratch:
        model.save(scratch)
        saved = Path(scratch)
        for name in ST_FILES:
            (folder / name).unlink(missing_ok=True)  # never write through a hard link into another folder
            shutil.copyfile(saved / name, folder / name)
        for module in (p for p in saved.iterdir() if p.is_dir() and p.name[:1].isdigit()):
            shutil.rmtree(folder / module.name, ignore_errors=True)
            shutil.copytree(module, folder / module.name)
    if length:  # sentence-transformers 6 keeps it in the tokenizer's files, which stay the trial's
        saved_config = json.loads(classic.read_text())
        classic.write_text(json.dumps({**saved_config, "max_seq_length": int(length)}, indent=2))
    with (folder / "README.md").open("a", encoding="utf-8") as readme:
        readme.write(_section(config, result, sweep))
    return True
