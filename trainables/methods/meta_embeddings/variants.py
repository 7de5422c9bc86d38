"""The meta-embedding methods' declared choices (variants, ablations, poolings, optimisers, losses), their
defaults, and the check of what SVD and GCCA fit: what the method's settings declare and check before any
work, without torch (models.py computes with them)."""

from __future__ import annotations

import math

from trainables.core.errors import SweepInputError

# UNSUP's ablations (paper Table 2's "w/o" weights; one term of the paper's loss left out): run with
# `--variants all` or by name, not by default (`--variants main`).
ABLATIONS = ("no-weights", "no-c1", "no-c2", "no-c3", "no-c4", "no-ortho")

VARIANTS = {
    "unsup": ("paper", "authors_code", *ABLATIONS),
    "sup": ("mse", "signed"),
    "sse": (),
    "conc": ("-",),
    "avg": ("zero-pad", "projected"),
    "svd": ("train", "full"),
    "gcca": ("-",),
}

TRAINED = ("unsup", "sup")

BASELINES = ("conc", "avg", "svd", "gcca")  # what `--baseline-inputs` changes (SSE scores by the cosine: unchanged)

POOLINGS = ("max", "mean")

OPTIMIZERS = ("sgd", "adamw")

PAPER_LOSSES = ("literal", "hinge")

TERMS = ("c1", "c2", "c3", "c4", "ortho")


def default_optimizer(variant: str) -> str:
    """The paper's SGD (§4.4) for the paper's model and its ablations and SUP `mse`; the released
    code's AdamW for `authors_code` and SUP `signed`."""
    return "adamw" if variant in ("authors_code", "signed") else "sgd"


GCCA_RIDGE = 0.1  # the authors': C_ii + 0.1 x mean(std_i) x I

BASELINE_INPUTS = ("raw", "l2")  # the paper's eq. 11-14 pool the raw word vectors; l2: each sentence normalised


def fit_components(meta: str, variant: str, width: int, dims: list[int]) -> int | None:
    """The components SVD (`train`) and GCCA fit on the STS-B train sentences: min(--width, the
    sources' summed size) and min(--width, the smallest source's size); None for the others."""
    if meta == "svd" and variant == "train":
        return min(width, sum(dims))
    if meta == "gcca":
        return min(width, min(dims))
    return None


def check_fit_sentences(meta: str, variant: str, sentences: int, width: int, dims: list[int]) -> None:
    """SweepInputError when SVD (`train`) or GCCA would fit d components on fewer than d + 1 train
    sentences: centred, n sentences span at most n - 1 directions, so the other components (and
    GCCA's canonical directions) would be arbitrary, not learnt from the data."""
    needed = fit_components(meta, variant, width, dims)
    if needed is None or sentences > needed:
        return
    sizes = " + ".join(map(str, dims)) if meta == "svd" else f"min({', '.join(map(str, dims))})"
    name = "SVD (train)" if meta == "svd" else "GCCA"
    raise SweepInputError(
        f"{name} fits {needed} components (the smaller of --width {width} and the sources' sizes {sizes}) on "
        f"the STS-B train sentences and needs at least {needed + 1} different ones, but gets {sentences}; raise "
        f"--max-train-samples (a pair gives at most two sentences: {math.ceil((needed + 1) / 2)} pairs or more), "
        "lower --width, or leave this method out of --methods"
    )
