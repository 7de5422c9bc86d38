"""TMFT: truncated-model fine-tuning at every layer (the ELECTRA sentence-embedding paper), with
its variants that start from an upstream stage (WS+TMFT, DAPT+TMFT, TSDAE+TMFT) and the stage kinds
it owns (`ws`, `dapt`)."""
