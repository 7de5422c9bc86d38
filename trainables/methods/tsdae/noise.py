"""TSDAE's input noise (paper §3.2 and Appendix A Tables 5-6): the five noise types the appendix compares,
each influencing a share `ratio` of a sentence's words (its "noise ratio": "30% tokens are influenced").

`delete` is sentence-transformers' `DenoisingAutoEncoderDataset.delete` (`noisy`, tested identical to
theirs); `keep` is the sentence-transformers v3 examples' variant (each word kept with probability 0.6:
deletion at 0.4). The paper names the other types without defining them; the project's rules, on the
same NLTK words, each word chosen independently with probability `ratio`:
- `swap`: the chosen words trade places, each moving to the next chosen word's place (a lone chosen word
  trades places with a random other word);
- `mask`: each chosen word becomes the model's mask token;
- `replace`: each chosen word becomes a random word of the model's vocabulary (its whole-word entries);
- `add`: a random word of the vocabulary is inserted after each chosen word.
Draws come from a per-trial seeded `numpy.random.RandomState`.
"""

from __future__ import annotations

import numpy as np

NOISES = ("delete", "swap", "mask", "replace", "add", "keep")
# Each type's ratio when none is given: deletion's 0.6 (§3.2, Table 6's best), keep's 0.4 (deletion at 0.4,
# keeping 0.6), and 0.3 for the others (the ratio Table 5 compares every type at).
DEFAULT_RATIOS = {"delete": 0.6, "keep": 0.4, "swap": 0.3, "mask": 0.3, "replace": 0.3, "add": 0.3}
DELETE_RATIOS = {k: DEFAULT_RATIOS[k] for k in ("delete", "keep")}
RATIOS = tuple(round(0.1 * k, 1) for k in range(1, 10))  # Table 6's ratios, 0.1 to 0.9


def _words(sentence: str) -> list[str]:
    from nltk import word_tokenize

    return word_tokenize(sentence, preserve_line=True)


def _sentence(words) -> str:
    from nltk.tokenize.treebank import TreebankWordDetokenizer

    return TreebankWordDetokenizer().detokenize(list(words))


def noisy(sentence: str, del_ratio: float, rng: np.random.RandomState) -> str:
    """`DenoisingAutoEncoderDataset.delete` (NLTK words, each dropped with `del_ratio`, one kept if
    none is, Treebank detokenised), drawing from `rng` where theirs draws from numpy's global state.
    Words come from NLTK's Treebank tokenizer without its punkt sentence splitter (`preserve_line`),
    whose data cannot be installed offline; on one sentence the two agree (tests/test_tsdae.py)."""
    words = _words(sentence)
    n = len(words)
    if n == 0:
        return sentence
    keep = rng.rand(n) > del_ratio
    if sum(keep) == 0:
        keep[rng.choice(n)] = True
    return _sentence(np.array(words)[keep])


def vocabulary_words(tokenizer) -> list[str]:
    """The whole-word entries of a tokenizer's vocabulary (alphabetic, not a word piece, not special):
    what `replace` and `add` draw from."""
    special = set(tokenizer.all_special_tokens)
    out = []
    for token in tokenizer.get_vocab():
        word = token.lstrip("Ġ▁")
        if token in special or token.startswith("##") or not word.isalpha():
            continue
        out.append(word)
    return sorted(set(out))


class Noise:
    """One trial's noise: `kind` (one of `NOISES`) at `ratio`, the mask token and the vocabulary words
    its types need."""

    def __init__(self, kind: str, ratio: float, rng: np.random.RandomState, mask_token: str, words: list[str]):
        self.kind, self.ratio, self.rng, self.mask_token, self.words = kind, float(ratio), rng, mask_token, words

    def __call__(self, sentence: str) -> str:
        if self.kind in ("delete", "keep"):
            return noisy(sentence, self.ratio, self.rng)
        words = _words(sentence)
        n = len(words)
        if n == 0:
            return sentence
        chosen = np.flatnonzero(self.rng.rand(n) < self.ratio)
        if self.kind == "swap":
            if len(chosen) == 1 and n > 1:
                chosen = np.array([chosen[0], self.rng.choice([i for i in range(n) if i != chosen[0]])])
            moved = list(words)
            for place, word in zip(np.roll(chosen, 1), (words[i] for i in chosen)):
                moved[place] = word
            return _sentence(moved)
        if self.kind == "mask":
            masked = set(chosen.tolist())
            return _sentence(self.mask_token if i in masked else w for i, w in enumerate(words))
        picks = [self.words[j] for j in self.rng.randint(len(self.words), size=len(chosen))]
        if self.kind == "replace":
            out = list(words)
            for i, word in zip(chosen, picks):
                out[i] = word
            return _sentence(out)
        added = dict(zip(chosen.tolist(), picks))  # add: a random word after each chosen one
        return _sentence(w for i, word in enumerate(words) for w in ((word, added[i]) if i in added else (word,)))
