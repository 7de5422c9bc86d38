"""Dataset loaders. Each returns plain Python structures (lists of examples per split) and
rejects malformed files with a `DataFormatError` naming the file and line."""
from trainables.data.stsb import PairExample, load_stsb, file_checksum

__all__ = ["PairExample", "load_stsb", "file_checksum"]
