"""Make a saved encoder folder (config, weights, tokenizer files) a sentence-transformers model:
`SentenceTransformer(folder)` then loads it offline and gives the project's own pooled embeddings
(`mean`: masked mean over every non-pad token, [CLS]/[SEP] included; `cls`: the first token; no
normalisation, the project scores cosines).

The files are sentence-transformers' classic layout (`modules.json` naming
`sentence_transformers.models.Transformer` and `.Pooling`, `sentence_bert_config.json`,
`1_Pooling/config.json`), which releases from 2.x to 6.2 load.
"""

from __future__ import annotations

import json
from pathlib import Path

MODES = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token"}
ALL_MODES = (
    "pooling_mode_cls_token",
    "pooling_mode_mean_tokens",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
)


def write_sentence_transformer(folder, pooling: str, max_seq_length: int | None = None) -> None:
    if pooling not in MODES:
        raise ValueError(f"unknown pooling {pooling!r}; known: {', '.join(MODES)}")
    folder = Path(folder)
    hidden = json.loads((folder / "config.json").read_text())["hidden_size"]
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False}, indent=2)
    )
    (folder / "1_Pooling").mkdir(exist_ok=True)
    config = {"word_embedding_dimension": int(hidden), **{mode: mode == MODES[pooling] for mode in ALL_MODES}}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(config, indent=2))


def read_pooling(folder) -> str | None:
    """The pooling of a sentence-transformers folder (`mean` or `cls`), or None when it has none
    of those (or no pooling config). Reads the classic flags and sentence-transformers 6's
    `pooling_mode` (what its own save writes: trainables/encoders/model_card.py)."""
    config = Path(folder) / "1_Pooling" / "config.json"
    if not config.is_file():
        return None
    modes = json.loads(config.read_text())
    if "pooling_mode" in modes:
        mode = modes["pooling_mode"]
        return mode if mode in MODES else None
    found = [name for name, key in MODES.items() if modes.get(key)]
    return found[0] if len(found) == 1 and sum(bool(modes.get(k)) for k in ALL_MODES) == 1 else None
