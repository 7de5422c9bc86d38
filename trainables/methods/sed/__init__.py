"""SED: sentence ensemble distillation."""

from trainables.methods.sed import method  # noqa: F401  (registration)
