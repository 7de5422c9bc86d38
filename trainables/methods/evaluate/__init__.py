"""Zero-shot evaluation of any encoder, layer or finished trial on the evaluation suite."""
