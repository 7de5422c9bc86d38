"""Make a saved encoder folder (config, weights, tokenizer files) a sentence-transformers model:
`SentenceTransformer(folder)` then loads it offline and gives the project's own pooled embeddings
(`mean`: masked mean over every non-pad token, [CLS]/[SEP] included; `cls`: the first token; `max`: the
masked maximum; no normalisation, the project scores cosines).

`own_pipeline(folder)` reads back what a sentence-transformers folder (a hub model's, a trial's) encodes
with: its pooling and the modules after it (a Dense layer such as SimCSE's MLP kept at test time), so a
re-scoring encodes as the model does (`Pipeline`).

The files are sentence-transformers' classic layout (`modules.json` naming
`sentence_transformers.models.Transformer` and `.Pooling`, `sentence_bert_config.json`,
`1_Pooling/config.json`), which releases from 2.x to 6.2 load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trainables.core.errors import SweepInputError

MODES = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens"}
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
    """The pooling of a sentence-transformers folder (`mean`, `cls` or `max`), or None when it has none
    of those (or no pooling config)."""
    return _pooling_of(Path(folder) / "1_Pooling")


def _pooling_of(pooling_folder) -> str | None:
    """The pooling a Pooling module's folder configures, or None (see `read_pooling`). Reads the classic
    flags and sentence-transformers 6's `pooling_mode` (what its own save writes:
    trainables/encoders/model_card.py)."""
    config = Path(pooling_folder) / "config.json"
    if not config.is_file():
        return None
    modes = json.loads(config.read_text())
    if "pooling_mode" in modes:
        mode = modes["pooling_mode"]
        return mode if mode in MODES else None
    found = [name for name, key in MODES.items() if modes.get(key)]
    return found[0] if len(found) == 1 and sum(bool(modes.get(k)) for k in ALL_MODES) == 1 else None


HEAD = "dense"  # a pipeline's name suffix when modules after the pooling change its embeddings
ADD_NOTHING = "Normalize"  # a module after the pooling that leaves every cosine as it is
CHANGES = "Dense"  # the one kind of module after the pooling that the head applies


@dataclass(frozen=True)
class Pipeline:
    """How an encoder's token vectors become its sentence vector: `pooling` (mean, cls, max), then `head`
    (the folders of the modules after the pooling, e.g. `2_Dense`; empty when none changes a cosine), and
    `source`: `model` (its own sentence-transformers config), `asked` (a pooling asked for) or `default`
    (a folder with no sentence-transformers config: mean pooling)."""

    pooling: str
    head: tuple[str, ...] = ()
    source: str = "asked"

    @property
    def name(self) -> str:
        """`mean`, `cls`, `max`, or e.g. `cls+dense`: the pooling, then the model's own Dense layer(s)."""
        return f"{self.pooling}+{HEAD}" if self.head else self.pooling

    def says(self) -> str:
        """One phrase saying which pipeline scores and why."""
        if self.source == "model":
            then = f" then its {', '.join(self.head)}" if self.head else ""
            return f"its own pooling {self.pooling}{then} (from its sentence-transformers config)"
        if self.source == "default":
            return f"{self.pooling} pooling (it has no sentence-transformers config)"
        return f"{self.pooling} pooling, as asked"


def own_pipeline(folder, name: str | None = None) -> Pipeline:
    """The pipeline a model folder encodes with (see `Pipeline`). Modules after the pooling: a Normalize
    at the end is left out (a cosine does not change), Dense layers and whatever follows one form the head;
    anything else, or a pooling the project does not compute, is refused (ask for a pooling then)."""
    folder, name = Path(folder), name or str(folder)
    listing = folder / "modules.json"
    if not listing.is_file():
        return Pipeline("mean", (), "default")
    modules = json.loads(listing.read_text())
    kinds = [_kind(m) for m in modules]  # the class name: releases write it under different module paths
    pools = [i for i, kind in enumerate(kinds) if kind == "Pooling"]

    def refuse(what: str) -> SweepInputError:
        return SweepInputError(
            f"model {name}: its sentence-transformers pipeline {what}, which this project does not compute; "
            "score it with a pooling asked for (--pooling mean, cls or max)"
        )

    if len(pools) != 1:
        raise refuse(f"has {len(pools)} pooling modules")
    pooling = _pooling_of(folder / str(modules[pools[0]].get("path", "")))
    if pooling is None:
        raise refuse("pools in a way other than mean, cls or max")
    after = modules[pools[0] + 1 :]
    while after and _kind(after[-1]) == ADD_NOTHING:
        after = after[:-1]
    unknown = [_kind(m) for m in after if _kind(m) not in (CHANGES, ADD_NOTHING)]
    if unknown:
        raise refuse(f"ends with {', '.join(unknown)}")
    return Pipeline(pooling, tuple(str(m["path"]) for m in after), "model")


def _kind(module: dict) -> str:
    return str(module.get("type", "")).rsplit(".", 1)[-1]
