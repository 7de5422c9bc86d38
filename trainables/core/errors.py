"""Errors that mean "the user's input is wrong", raised before any compute starts, and failures
inside a trial that a retry would only repeat.

Each message names the problem and what to do about it; the sweep scripts print the message
alone (no traceback) and exit with status 2 for bad input. A `TrialFailure` (or bad input found
only on a worker) ends its trial at once, marked failed with the message, without retries
(trainables/training/trainable.py); the sweep then exits with status 1 and lists it.
"""


class SweepInputError(ValueError):
    """Bad sweep input: flags, models, data or resume paths."""


class DataFormatError(SweepInputError):
    """A data file is missing or malformed; the message names the file and line."""

    def __init__(self, path, message, line=None):
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


class TrialFailure(RuntimeError):
    """A trial cannot succeed and retrying would fail the same way (e.g. its loss became NaN)."""
