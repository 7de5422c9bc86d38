"""Errors that mean "the user's input is wrong", raised before any compute starts, and failures
inside a trial that a retry would only repeat.

Each message names the problem and what to do about it; the sweep scripts print the message
alone (no traceback) and exit with status 2 for bad input. A `TrialFailure` (or bad input found
only on a worker) ends its trial at once, marked failed with the message, without retries
(trainables/training/trainable.py); the sweep then exits with status 1 and lists it.

`redact(text)` is the one rule by which every message, log line and record the project writes shows a
URI: the user info of `scheme://user:secret@host` and the values of secret query keys
(`?secret_key=...`, `password=`, `token=`, a presigned URL's signature) become `***`. A
`SweepInputError`'s message is redacted when it is made, so no refusal can print a secret.
"""

import re

SECRET_QUERY_KEY = re.compile(
    r"(?i)(?<=[?&])([A-Za-z0-9_.-]*(?:secret|password|passwd|token|access_key|access_key_id|credential|signature|"
    r"sessiontoken)[A-Za-z0-9_.-]*)=([^&\s'\"#]*)"
)
USER_INFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/@\s?#'\"]*:[^/@\s?#'\"]*)@")


def redact(text) -> str:
    """`text` with every URI's user info (`user:password@`) and secret query values replaced by `***`."""
    text = USER_INFO.sub(r"\1***@", str(text))
    return SECRET_QUERY_KEY.sub(lambda m: f"{m.group(1)}=***" if m.group(2) else m.group(0), text)


class SweepInputError(ValueError):
    """Bad sweep input: flags, models, data or resume paths (its message redacted: `redact`)."""

    def __init__(self, *args):
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


class DataFormatError(SweepInputError):
    """A data file is missing or malformed; the message names the file and line."""

    def __init__(self, path, message, line=None):
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


class TrialFailure(RuntimeError):
    """A trial cannot succeed and retrying would fail the same way (e.g. its loss became NaN)."""
