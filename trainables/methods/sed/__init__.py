"""SED: sentence ensemble distillation, and the `sed-targets` stage kind."""
