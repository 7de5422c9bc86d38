"""Zero-shot evaluation of any encoder, layer or finished trial on the evaluation suite."""

from trainables.methods.evaluate import method  # noqa: F401  (registration)
