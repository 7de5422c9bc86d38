"""What a TSDAE sweep knows and refuses before any work, without torch: its objectives and CT variants,
its corpus (`read_corpus`, `check_corpus`) and a model without a decoder for TSDAE (`check_decoder`).
training.py trains with them; method.py and stage.py declare and check with them."""

from __future__ import annotations

from pathlib import Path

from trainables.core.errors import SweepInputError

OBJECTIVES = ("none", "tsdae", "mlm", "simcse", "ct")

CT_VARIANTS = ("official", "in-batch")

CT_KEEP = ("second", "better")  # official CT: the copy scored and kept (method.py --ct-keep)


def check_decoder(model_path, model: str) -> None:
    """Refuse an architecture that transformers has no causal LM (with cross-attention) for."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config = AutoConfig.from_pretrained(str(model_path))
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise SweepInputError(
            f"TSDAE: {model} is a {config.model_type!r} model, and transformers has no causal-LM decoder "
            f"with cross-attention for {config.model_type!r}; use a BERT/RoBERTa/ELECTRA-family model "
            "for --objective tsdae, or --objective mlm,simcse,ct for this one"
        )


def read_corpus(corpus: str, data_dir, max_sentences: int | None, flag: str = "--corpus") -> tuple[list[str], str, str]:
    """(sentences, corpus name, checksum) of --corpus: a named source of trainables/data/sentences.py
    (`wiki`, the Wikipedia sample; the domain sets' unlabelled sentences where registered there) or a
    text file (UTF-8, one sentence a line, blank lines dropped; refused when it holds none)."""
    from trainables.data import sentences as corpora
    from trainables.data._io import file_checksum
    from trainables.training.tokenized import subset

    if corpus in corpora.DAPT_SOURCES:
        sentences, name = corpora.dapt_corpus(data_dir, (corpus,))
        checksum = corpora.dapt_corpus_checksum(data_dir, (corpus,))
    else:
        sentences = corpora.read_text_corpus(corpus, flag)
        name, checksum = Path(corpus).name, file_checksum(Path(corpus))
    return subset(sentences, max_sentences), name, checksum


def check_corpus(corpus: str, flag: str = "--corpus") -> None:
    from trainables.data.sentences import DAPT_SOURCES

    if corpus not in DAPT_SOURCES and not Path(corpus).is_file():
        raise SweepInputError(
            f"{flag} {corpus}: no such file and no corpus of that name; pass a text file (one sentence a line) "
            f"or one of {', '.join(DAPT_SOURCES)}"
        )
