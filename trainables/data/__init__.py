"""Dataset loaders. Each returns plain Python structures (lists of examples per split) and
rejects malformed files with a `DataFormatError` naming the file and line."""

from trainables.data.mrpc import load_mrpc, mrpc_checksums
from trainables.data.sentences import DAPT_SOURCES, DEFAULT_DAPT_SOURCES, dapt_corpus, dapt_corpus_checksum
from trainables.data.sick import LabelledPair, load_sick, sick_checksums
from trainables.data.stsb import PairExample, file_checksum, load_stsb
from trainables.data.word_similarity import build_ws_dataset, load_word_pairs, ws_checksum, ws_pairs

__all__ = [
    "PairExample",
    "load_stsb",
    "file_checksum",
    "load_mrpc",
    "mrpc_checksums",
    "LabelledPair",
    "load_sick",
    "sick_checksums",
    "build_ws_dataset",
    "load_word_pairs",
    "ws_checksum",
    "ws_pairs",
    "DAPT_SOURCES",
    "DEFAULT_DAPT_SOURCES",
    "dapt_corpus",
    "dapt_corpus_checksum",
]
