"""Sentence meta-embeddings of frozen sources (the unsupervised attention-based meta-embedding
paper; METHODS.md M4): UNSUP, trained without labels on the STS-B train sentences, and the
baselines SSE, CONC, AVG, SVD, GCCA and SUP.

Inputs: `--sources` (two or more encoders, of any sizes), `--methods`, `--variants`, `--seeds`,
`--sets`. Each source's word vectors come from the `token-embeddings` stage
(trainables/methods/meta_embeddings/token_embeddings.py), encoded once per (source, sentences) into the stage store;
trials read them memory-mapped and never load an encoder. Grid: methods x variants x seeds.

Methods (`meta`) and their variants (`variant`):
- `unsup` `paper` / `authors_code`: the attention model trained on the four criteria (below);
- `sup` `mse`: the paper's model trained on STS-B train scores, squared error between the
  cosine and the score, both mapped to [0, 1] ((cos + 1) / 2, y / 5); `signed`: the authors'
  model and loss, mean(||m(s1) - m(s2)|| - y / 5) at lr 1e-4;
- `sse` (variant = the source): each source alone;
- `conc`: the sources' sentence vectors concatenated;
- `avg` `zero-pad`: averaged after zero-padding to the largest size; `projected`: averaged after
  a random isometry of each source into the largest size (seeded by the trial's seed);
- `svd` `train`: per-source centring, concatenation, the top d = min(--width, rank) right
  singular vectors, fitted on the STS-B train sentences only; `full`: the authors' fit, all
  components, on every cached sentence (evaluation sentences included; METHODS.md ambiguity 7:
  a rotation of centred CONC, so it scores as centred CONC);
- `gcca`: MAXVAR generalised CCA (cca-zoo's `GCCA`; each view's covariance plus the authors' ridge
  0.1 x its mean feature std, `gcca_shrinkage`) fitted on the STS-B train
  sentences, d = min(--width, smallest source size); a sentence is the mean of its views' scores.
The baselines use mean pooling of each source's word vectors (the paper finds mean better for
them), l2-normalised per source (`sentence_vectors`): what SBERT sources with a `Normalize` module
(the default all-MiniLM-L6-v2 and all-mpnet-base-v2) output, and what keeps one source's scale
from deciding CONC, AVG and SVD (all-MiniLM-L6-v2's word vectors are ~2.4x longer than
all-mpnet-base-v2's; unnormalised, CONC scored below mpnet alone: STS-B test 82.67 vs 83.04,
normalised 83.43). The authors' sources had no `Normalize`, so their CONC was unnormalised; SSE
is unaffected (cosine). UNSUP and SUP use `--pooling` (max, the authors' default and the
paper's best); note that the sources above were trained with mean pooling, and max-pooling their
own word vectors costs them 3-7 points (mpnet STS-B test 80.28 max vs 83.04 mean), so compare
UNSUP/SUP with SSE at `--pooling mean` too.

Model (both variants): per source a projection P_i (width x d_i, no bias, torch's default
initialisation) and a scalar weight a_i ~ U(-1, 1); word vectors w_{i,t} = a_i P_i x_{i,t}.
- `authors_code` (M4): a_i used as they are (no softmax, may be negative); the sentence vector
  is the concatenation of each source's pooled w_i. Loss, with plain Euclidean distances over
  the sides of the pairs (each side zero-padded to its longest sentence; pads take part, also in
  the pooling) and the source pairs i < j, each mean taken over all of them at once:
  mean ||w_it - w_jt|| + |mean_{t != t'} (-alpha ||w_it - w_jt'||)|
  + |mean(-beta ||m(s1) - m(s2)||)| + |lambda mean_i ||P_i^T P_i - I||_F|, with alpha, beta,
  lambda trainable scalars, U(-1, 1) at start (the code's Linear(1, 1) weights). Not reproduced:
  the code encodes its sources in train mode, so its word vectors carry dropout noise, in
  training and evaluation; the cache holds deterministic (eval-mode) vectors.
- `paper`: attention weights normalised over the sources (softmax of the a_i); the word
  meta-vector is sum_i softmax(a)_i P_i x_it and the sentence vector its pooling over the
  sentence's words (pads excluded). Choices where the paper is vague (its formulas are lost in
  the text we have):
  * the criteria compare the weighted projections softmax(a)_i P_i x (on P_i x alone the weights
    would get no gradient from any term);
  * criterion 1 (same word, same sentence, sources i != j) is the squared distance, pulled in;
  * criteria 2-4 (different words of one sentence; the same word of two sentences; different
    words of two sentences; always across sources) are "dissimilar" terms: a hinge
    max(0, margin - squared distance) (`--margin`, default 1), which pushes apart and is
    bounded below by 0, unlike the code's abs(-alpha d) that shrinks alpha to 0 (ambiguity 3);
  * "the same word of two sentences": the cache keeps no word identities, so it is the word at
    the same position (as the code aligns positions);
  * the orthogonality term is the paper's cross-correlation sum_{i<j} ||P_i^T P_j||_F
    (not the code's per-source ||P_i^T P_i - I||_F, ambiguity 2);
  * the coefficients of the terms are fixed at 1: trained, as the paper says, a minimised loss
    drives them to 0 (or to minus infinity for the hinge terms);
  * only positions holding words count (masks); the training pairs are the STS-B train pairs
    (the paper allows any two training sentences).
Training (both): AdamW lr 1e-2 (SUP signed 1e-4), weight decay 1e-4, 512 pairs a batch, an epoch
per step, early stopping on STS-B dev Pearson of the cosine (patience 5, cap 20 epochs), the
best epoch's weights scored on the suite. Evaluation pools each sentence's own words (no padding;
the per-pair path, ambiguity 6).

Metrics: `dev_pearson` per epoch, `best_dev_pearson`, and at the end every set's
`<set>_spearman`, `mean_spearman` and `test_spearman_at_best_dev` (STS-B test). The contract's
`reference` is the `sse` rows: the report puts every method beside the best single source.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from trainables.core.errors import SweepInputError
from trainables.core.method import (
    Method,
    MethodPlan,
    MetricContract,
    TrialCost,
    add_seeds_argument,
    parse_int_list,
    parse_names,
    register_method,
)
from trainables.methods.meta_embeddings import token_embeddings
from trainables.training.precision import adamw
from trainables.training.trainable import EpochTrainable

VARIANTS = {
    "unsup": ("paper", "authors_code"),
    "sup": ("mse", "signed"),
    "sse": (),
    "conc": ("-",),
    "avg": ("zero-pad", "projected"),
    "svd": ("train", "full"),
    "gcca": ("-",),
}
TRAINED = ("unsup", "sup")
POOLINGS = ("max", "mean")
DEFAULT_SOURCES = "sentence-transformers/all-MiniLM-L6-v2,sentence-transformers/all-mpnet-base-v2"
GCCA_RIDGE = 0.1  # the authors': C_ii + 0.1 x mean(std_i) x I


# --- word vectors from the stage ----------------------------------------------------------------
def padded(source, rows, length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(float32 [B, T, d] word vectors zero-padded, bool [B, T] mask) of stage rows `rows`."""
    words, starts = source
    spans = [(int(starts[r]), int(starts[r + 1])) for r in rows]
    length = max(1, max(end - begin for begin, end in spans)) if length is None else length
    out = np.zeros((len(rows), length, words.shape[1]), dtype=np.float32)
    mask = np.zeros((len(rows), length), dtype=bool)
    for i, (begin, end) in enumerate(spans):
        n = min(end - begin, length)
        out[i, :n] = words[begin : begin + n]
        mask[i, :n] = True
    return torch.from_numpy(out), torch.from_numpy(mask)


def batch_words(sources, rows) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Every source's padded word vectors of `rows`, padded to one length (the longest over sources)."""
    length = max(1, max(int(s[1][r + 1] - s[1][r]) for s in sources for r in rows))
    pairs = [padded(source, rows, length) for source in sources]
    return [x for x, _ in pairs], [m for _, m in pairs]


def mean_pooled(source, rows, chunk: int = 4096) -> np.ndarray:
    """float32 [n, d]: the mean of each sentence's word vectors (zeros for a sentence without words)."""
    words, starts = source
    out = np.zeros((len(rows), words.shape[1]), dtype=np.float32)
    for i, r in enumerate(rows):
        begin, end = int(starts[r]), int(starts[r + 1])
        if end > begin:
            out[i] = np.asarray(words[begin:end], dtype=np.float32).mean(axis=0)
    return out


def sentence_vectors(source, rows) -> np.ndarray:
    """The baselines' view of a source: `mean_pooled`, each row l2-normalised (zeros stay zeros)."""
    vectors = mean_pooled(source, rows)
    return vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)


# --- the model and its losses ---------------------------------------------------------------------
def pool(vectors: torch.Tensor, mask: torch.Tensor | None, how: str) -> torch.Tensor:
    """[B, T, d] -> [B, d]: max or mean over the positions of `mask` (all positions when None)."""
    if mask is None:
        return vectors.max(dim=1).values if how == "max" else vectors.mean(dim=1)
    m = mask.unsqueeze(-1)
    if how == "max":
        return vectors.masked_fill(~m, float("-inf")).max(dim=1).values.nan_to_num(neginf=0.0)
    return (vectors * m).sum(dim=1) / m.sum(dim=1).clamp(min=1)


class MetaModel(torch.nn.Module):
    """Per-source projections and weights (see the module docstring); `variant` is the weighting
    and combination: `paper` (softmax, weighted sum) or `authors_code` (raw scalars, concatenation)."""

    def __init__(self, dims: list[int], width: int, variant: str, pooling: str):
        super().__init__()
        self.variant, self.pooling = variant, pooling
        self.projections = torch.nn.ModuleList(torch.nn.Linear(d, width, bias=False) for d in dims)
        self.weights = torch.nn.Parameter(torch.empty(len(dims)).uniform_(-1, 1))
        # alpha, beta, lambda (authors_code only): the code's Linear(1, 1) weights, U(-1, 1) at start
        self.coefficients = torch.nn.Parameter(torch.empty(3).uniform_(-1, 1))

    def source_weights(self) -> torch.Tensor:
        return torch.softmax(self.weights, dim=0) if self.variant == "paper" else self.weights

    def words(self, xs: list[torch.Tensor], masks: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """w_i = a_i P_i x_i for every source. With `masks`, only the words are projected and pads
        are left 0: the same result (a pad is a zero vector and P_i has no bias), without
        projecting the batch padding (most of a batch: STS sentences average ~10 words, a batch
        pads to its longest)."""
        a = self.source_weights()
        if masks is None:
            return [a[i] * projection(x) for i, (projection, x) in enumerate(zip(self.projections, xs))]
        out = []
        for i, (projection, x, mask) in enumerate(zip(self.projections, xs, masks)):
            w = x.new_zeros(*x.shape[:-1], projection.out_features)
            out.append(a[i] * w.index_put((mask,), projection(x[mask])))
        return out

    def sentence(self, w: list[torch.Tensor], masks: list[torch.Tensor] | None) -> torch.Tensor:
        """The sentence vectors; `masks` None pools over every (padded) position."""
        if self.variant == "paper":
            mask = None if masks is None else torch.stack(masks).any(dim=0)
            return pool(torch.stack(w).sum(dim=0), mask, self.pooling)
        return torch.cat(
            [
                pool(v, None if masks is None else m, self.pooling)
                for v, m in zip(w, masks if masks is not None else [None] * len(w))
            ],
            dim=1,
        )

    def matrices(self) -> list[torch.Tensor]:
        """P_i, each [width, d_i]."""
        return [p.weight for p in self.projections]


def _off_diagonal(length: int, device) -> torch.Tensor:
    return ~torch.eye(length, dtype=torch.bool, device=device)


def authors_code_loss(
    sides: list[list[torch.Tensor]], m1: torch.Tensor, m2: torch.Tensor, matrices: list[torch.Tensor], alpha, beta, lam
) -> torch.Tensor:
    """The released code's loss (METHODS.md M4); `sides` = [w of s1, w of s2], each a list over
    sources of [B, T, width] (zero pads included; each side padded to its own longest sentence).
    As the code does, each word term is one mean over both sides, every source pair, every
    position (pair) and every pair of the batch at once, not a sum of per-side means."""
    same, other = [], []
    for w in sides:
        off = _off_diagonal(w[0].shape[1], m1.device)
        for i, j in itertools.combinations(range(len(w)), 2):
            same.append((w[i] - w[j]).norm(dim=-1).flatten())
            other.append(torch.cdist(w[i], w[j])[:, off].flatten())
    total = torch.cat(same).mean() + (-alpha * torch.cat(other)).mean().abs()
    total = total + (-beta * (m1 - m2).norm(dim=1)).mean().abs()
    ortho = torch.stack([(p.T @ p - torch.eye(p.shape[1], device=p.device)).norm() for p in matrices]).mean()
    return total + (lam * ortho).abs()


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1)


def paper_terms(
    sides: list[list[torch.Tensor]], masks: list[list[torch.Tensor]], matrices: list[torch.Tensor], margin: float
) -> dict[str, torch.Tensor]:
    """The paper variant's terms (module docstring): `sides`/`masks` = [s1, s2], each a list over
    sources of [B, T, width] / [B, T]. Criterion 1: squared distance; 2-4: hinge on it."""

    def hinge(squared):
        return F.relu(margin - squared)

    k, first = len(sides[0]), sides[0][0]
    terms = {name: first.new_zeros(()) for name in ("c1", "c2", "c3", "c4", "ortho")}
    off = _off_diagonal(first.shape[1], first.device)
    for w, m in zip(sides, masks):  # one sentence
        for i in range(k):
            for j in range(i + 1, k):
                both = m[i] & m[j]
                terms["c1"] = terms["c1"] + _masked_mean(((w[i] - w[j]) ** 2).sum(-1), both)
                pair = m[i].unsqueeze(2) & m[j].unsqueeze(1) & off
                terms["c2"] = terms["c2"] + _masked_mean(hinge(torch.cdist(w[i], w[j]) ** 2), pair)
    (w1, w2), (m1, m2) = sides, masks
    for i in range(k):  # two sentences, sources i != j in both orders
        for j in range(k):
            if i == j:
                continue
            same = m1[i] & m2[j]
            terms["c3"] = terms["c3"] + _masked_mean(hinge(((w1[i] - w2[j]) ** 2).sum(-1)), same)
            pair = m1[i].unsqueeze(2) & m2[j].unsqueeze(1) & off
            terms["c4"] = terms["c4"] + _masked_mean(hinge(torch.cdist(w1[i], w2[j]) ** 2), pair)
    for i in range(k):
        for j in range(i + 1, k):
            terms["ortho"] = terms["ortho"] + (matrices[i].T @ matrices[j]).norm()
    return terms


def sup_mse_loss(m1: torch.Tensor, m2: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """The paper's SUP: squared error of (cos + 1) / 2 against gold / 5."""
    return (((F.cosine_similarity(m1, m2) + 1) / 2 - gold / 5) ** 2).mean()


def sup_signed_loss(m1: torch.Tensor, m2: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """The authors' SUP (`rscore`): mean(||m1 - m2|| - gold / 5), signed and unbounded."""
    return ((m1 - m2).norm(dim=1) - gold / 5).mean()


# --- the baselines ------------------------------------------------------------------------------
def isometry(rows: int, cols: int, seed: int) -> np.ndarray:
    """A random [rows, cols] matrix with orthonormal rows (rows <= cols)."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((cols, rows)))
    return q.T


def svd_fit(views: list[np.ndarray], dims: int | None):
    """(per-view means, components [k, sum d_i]) of the centred concatenation; dims None: all."""
    means = [v.mean(axis=0) for v in views]
    x = np.concatenate([v - mu for v, mu in zip(views, means)], axis=1)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    return means, vt if dims is None else vt[:dims]


def svd_apply(views: list[np.ndarray], means, components) -> np.ndarray:
    return np.concatenate([v - mu for v, mu in zip(views, means)], axis=1) @ components.T


def gcca_shrinkage(views: list[np.ndarray], ridge: float = GCCA_RIDGE) -> list[float]:
    """Per view, cca-zoo's shrinkage c_i for the authors' regulariser C_i + r_i I, r_i = `ridge` x
    the mean of the view's feature standard deviations: cca-zoo regularises (1 - c) C + c I, which
    is (1 - c_i)(C_i + r_i I) for c_i = r_i / (1 + r_i). (A fixed c is scale-dependent: c = 0.1
    adds 0.1 to variances of ~1/d for l2-normalised vectors, swamping them; STS-B test 78.49
    against 82.79 with this rule, all-MiniLM-L6-v2 + all-mpnet-base-v2, 2,000 train pairs.)"""
    r = [ridge * float(v.std(axis=0).mean()) for v in views]
    return [x / (1 + x) for x in r]


def gcca_fit(views: list[np.ndarray], dims: int, ridge: float = GCCA_RIDGE):
    """cca-zoo's MAXVAR GCCA of the views (rows: the same sentences), `dims` components, each
    view's covariance regularised as the authors do (`gcca_shrinkage`)."""
    from cca_zoo.linear import GCCA

    views = [v.astype(np.float64) for v in views]
    return GCCA(n_components=dims, shrinkage=gcca_shrinkage(views, ridge)).fit(views)


def gcca_apply(model, views: list[np.ndarray]) -> np.ndarray:
    """The mean of the views' canonical scores."""
    return np.mean(model.transform([v.astype(np.float64) for v in views]), axis=0)


def baseline_vectors(
    meta: str,
    variant: str,
    train: list[np.ndarray],
    views: list[np.ndarray],
    everything,
    width: int,
    seed: int,
    source_index: int = 0,
) -> np.ndarray:
    """Sentence vectors of `views` (per-source sentence vectors, `sentence_vectors`) under a baseline; `train`: the
    same of the STS-B train sentences (what SVD and GCCA are fitted on); `everything()`: of every
    cached sentence (the authors' full SVD)."""
    if meta == "sse":
        return views[source_index]
    if meta == "conc":
        return np.concatenate(views, axis=1)
    largest = max(v.shape[1] for v in views)
    if meta == "avg" and variant == "zero-pad":
        return np.mean([np.pad(v, ((0, 0), (0, largest - v.shape[1]))) for v in views], axis=0)
    if meta == "avg":
        return np.mean([v @ isometry(v.shape[1], largest, seed * 100 + i) for i, v in enumerate(views)], axis=0)
    if meta == "svd" and variant == "full":
        means, components = svd_fit(everything(), None)
        return svd_apply(views, means, components)
    if meta == "svd":
        means, components = svd_fit(train, min(width, len(train[0]), sum(v.shape[1] for v in train)))
        return svd_apply(views, means, components)
    if meta == "gcca":
        return gcca_apply(gcca_fit(train, min(width, min(v.shape[1] for v in train))), views)
    raise ValueError(f"unknown baseline {meta!r}")


# --- the trial ----------------------------------------------------------------------------------
@dataclass
class MetaData:
    """Shipped to every trial: rows of the stage (its sentence order) for the STS-B train and dev
    pairs and the suite's sentences, the gold scores, and the suite."""

    train: tuple  # (rows of s1, rows of s2, gold 0-5)
    dev: tuple
    suite_rows: np.ndarray
    suite: object
    sentences: int  # rows in each source's stage


class MetaEmbeddingTrainable(EpochTrainable):
    """A baseline is one step (epochs 0). UNSUP/SUP: an epoch per step, STS-B dev Pearson after
    each, early stopping (patience, cap), the suite scored with the best epoch's weights."""

    primary_metric = "pearson"

    def build(self, config: dict, data: MetaData) -> None:
        self.data, self.meta, self.variant = data, config["meta"], config["variant"]
        self.sources = [token_embeddings.load(path) for path in config["_source_paths"]]
        for path, (_, starts) in zip(config["_source_paths"], self.sources):
            if len(starts) != data.sentences + 1:
                raise SweepInputError(
                    f"stage {path} holds {len(starts) - 1} sentences, the sweep expects {data.sentences}"
                )
        self.best_state, self.best_dev, self.bad = None, None, 0
        self.model, self.cached = None, None
        if self.meta not in TRAINED:
            self.epochs = 0
            return
        architecture = "authors_code" if self.variant in ("authors_code", "signed") else "paper"
        dims = [int(words.shape[1]) for words, _ in self.sources]
        self.model = MetaModel(dims, int(config["width"]), architecture, config["pooling"]).to(self.device)
        lr = 1e-4 if self.variant == "signed" else float(config["lr"])
        self.optimizer = adamw(
            list(self.model.parameters()), lr, self.device, weight_decay=float(config["weight_decay"])
        )

    # training
    def _words(self, rows) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        xs, masks = batch_words(self.sources, rows)
        return [x.to(self.device) for x in xs], [m.to(self.device) for m in masks]

    def loss(self, rows1, rows2, gold) -> torch.Tensor:
        """The trial's loss on a batch of pairs. The authors' model (`authors_code`, SUP `signed`)
        pads each side to its own longest sentence and pools over the pads, as their code does;
        the paper's pads both sides to one length (its criteria compare positions across them)
        and pools each sentence's words."""
        authors = self.model.variant == "authors_code"
        if authors:
            (x1, k1), (x2, k2) = self._words(rows1), self._words(rows2)
        else:
            xs, masks = self._words(np.concatenate([rows1, rows2]))
            n = len(rows1)
            x1, x2, k1, k2 = [x[:n] for x in xs], [x[n:] for x in xs], [m[:n] for m in masks], [m[n:] for m in masks]
        w1, w2 = self.model.words(x1, k1), self.model.words(x2, k2)
        if self.variant == "paper":  # word-level criteria only: no sentence vectors needed
            return sum(
                paper_terms([w1, w2], [k1, k2], self.model.matrices(), float(self.trial_config["margin"])).values()
            )
        m1, m2 = (self.model.sentence(w, None if authors else k) for w, k in ((w1, k1), (w2, k2)))
        if self.meta == "sup":
            gold = torch.as_tensor(gold, dtype=torch.float32, device=self.device)
            return sup_signed_loss(m1, m2, gold) if self.variant == "signed" else sup_mse_loss(m1, m2, gold)
        return authors_code_loss([w1, w2], m1, m2, self.model.matrices(), *self.model.coefficients)

    def train_epoch(self, epoch: int) -> dict:
        s1, s2, gold = self.data.train
        order = np.random.default_rng(int(self.trial_config["seed"]) * 100_003 + epoch).permutation(len(s1))
        batch, total = int(self.trial_config["batch_size"]), 0.0
        self.model.train()
        for begin in range(0, len(order), batch):
            pick = order[begin : begin + batch]
            loss = self.loss(s1[pick], s2[pick], gold[pick])
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            total += float(loss.detach()) * len(pick)
        mean = total / len(order)
        if not math.isfinite(mean):
            from trainables.core.errors import TrialFailure

            raise TrialFailure(f"the loss of epoch {epoch} is {mean}; lower --lr")
        return {"train_loss": mean, **self._weights()}

    def _weights(self) -> dict:
        """The sources' weights (softmax-normalised in the paper variant), one metric each."""
        return {f"source_weight_{i}": a for i, a in enumerate(self.model.source_weights().tolist())}

    # scoring
    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """Sentence vectors of stage rows: the baseline's, or the model's (each sentence's own words)."""
        if self.model is None:
            position, vectors = self._baseline()
            return vectors[[position[int(r)] for r in rows]]
        self.model.eval()
        rows = np.asarray(rows)
        starts = self.sources[0][1]
        order = np.argsort(starts[rows + 1] - starts[rows], kind="stable")  # similar lengths batched: little padding
        out = []
        with torch.no_grad():
            for begin in range(0, len(rows), 512):
                xs, masks = self._words(rows[order[begin : begin + 512]])
                out.append(self.model.sentence(self.model.words(xs, masks), masks).cpu().numpy())
        return np.concatenate(out)[np.argsort(order)]  # back to the order of `rows`

    def _baseline(self) -> tuple[dict, np.ndarray]:
        """(stage row -> position, vectors) of the dev and suite sentences, fitted and computed once."""
        if self.cached is None:
            rows = np.unique(np.concatenate([*self.data.dev[:2], self.data.suite_rows]))
            train_rows = np.unique(np.concatenate(self.data.train[:2]))
            vectors = baseline_vectors(
                self.meta,
                self.variant,
                [sentence_vectors(s, train_rows) for s in self.sources],
                [sentence_vectors(s, rows) for s in self.sources],
                lambda: [sentence_vectors(s, np.arange(self.data.sentences)) for s in self.sources],
                int(self.trial_config["width"]),
                int(self.trial_config["seed"]),
                int(self.trial_config["source_index"]),
            )
            self.cached = ({int(r): i for i, r in enumerate(rows)}, vectors)
        return self.cached

    def evaluate(self) -> dict:
        from trainables.evaluation.metrics import correlations, improves

        s1, s2, gold = self.data.dev
        vectors = self.vectors(np.concatenate([s1, s2]))
        a, b = vectors[: len(s1)], vectors[len(s1) :]
        cosine = np.sum(a * b, 1) / np.clip(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12, None)
        scores = correlations(cosine, gold)
        if improves(scores["pearson"], self.best_dev):  # a NaN (collapsed) epoch is never the best
            self.best_dev, self.bad = scores["pearson"], 0
        else:
            self.bad += 1
            if self.bad >= int(self.trial_config["patience"]):
                self.epochs = self.epoch  # early stop: this epoch is the last
        return {"dev_pearson": scores["pearson"], "dev_spearman": scores["spearman"]}

    def remember_best(self) -> None:
        if self.model is not None:
            self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def final_metrics(self) -> dict:
        if self.model is not None:
            self.model.load_state_dict(self.best_state)
        scores = self.data.suite.score(self.vectors(self.data.suite_rows))
        extra = {"test_spearman_at_best_dev": scores["stsb_spearman"]} if "stsb_spearman" in scores else {}
        if self.model is not None:
            extra.update(self._weights())
        return {**scores, **extra, "stopped_epoch": self.epoch}

    def parameter_count(self) -> int:
        return 0 if self.model is None else sum(p.numel() for p in self.model.parameters())

    def method_state(self, checkpoint_dir: Path) -> dict:
        if self.model is None:
            return {}
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "best_state": self.best_state,
            "best_dev": self.best_dev,
            "bad": self.bad,
            "epochs": self.epochs,
        }

    def load_method_state(self, state: dict, checkpoint_dir: Path) -> None:
        if self.model is None:
            return
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.best_state, self.best_dev, self.bad, self.epochs = (
            state["best_state"],
            state["best_dev"],
            state["bad"],
            state["epochs"],
        )


# --- the method ---------------------------------------------------------------------------------
def trial_grid(methods: list[str], variants: list[str] | None, sources: list[str]) -> list[dict]:
    """(meta, variant[, source_index]) of every trial of one seed; `variants` None: all."""
    out = []
    for meta in methods:
        if meta == "sse":
            out += [
                {"meta": "sse", "variant": Path(s.rstrip("/")).name, "source_index": i} for i, s in enumerate(sources)
            ]
            continue
        chosen = [v for v in VARIANTS[meta] if variants is None or v in variants or v == "-"]
        if not chosen:
            raise SweepInputError(
                f"--variants {','.join(variants)} leaves no variant of {meta!r}; "
                f"its variants: {', '.join(VARIANTS[meta])}"
            )
        out += [{"meta": meta, "variant": v} for v in chosen]
    return out


def smoke_sources(storage_path: str, data_dir) -> list[str]:
    """`--smoke-test` sources: a tiny BERT (32-d) and a tiny MPNet (48-d), built once beside the storage."""
    from trainables.data.stsb import load_stsb
    from trainables.encoders.tiny import build_tiny_model

    folders = []
    for kind, hidden in (("bert", 32), ("mpnet", 48)):
        target = Path(storage_path, "_smoke_models", f"tiny-{kind}-{hidden}")
        if not (target / "config.json").is_file():
            sentences = [e.sentence1 for e in load_stsb(data_dir, ("train",))["train"][:2000]]
            build_tiny_model(kind, target, layers=2, hidden=hidden, sentences=sentences)
        folders.append(str(target))
    return folders


@register_method("meta-embeddings")
class MetaEmbeddings(Method):
    """UNSUP and the baselines over cached frozen sources (module docstring)."""

    trainable = MetaEmbeddingTrainable
    description = (
        "sentence meta-embeddings: UNSUP (paper, authors_code), SSE, CONC, AVG, SVD, GCCA, SUP of frozen sources"
    )
    smoke = {"sets": "stsb", "epochs": 2, "seeds": "0", "max_train_samples": 256, "width": 16}
    cost_axes = ("meta",)

    @classmethod
    def add_arguments(cls, parser, defaults: dict) -> None:

        what = parser.add_argument_group("meta-embeddings")
        what.add_argument(
            "--sources",
            default=defaults.get("sources", DEFAULT_SOURCES),
            help="two or more comma-separated source encoders (hub ids installed locally, folders, runs:/<id>)",
        )
        what.add_argument("--methods", default=",".join(VARIANTS), help=f"comma-separated: {', '.join(VARIANTS)}")
        what.add_argument(
            "--variants",
            default="all",
            help="'all' or the variants to run: "
            + "; ".join(f"{m}: {', '.join(v)}" for m, v in VARIANTS.items() if len(v) > 1),
        )
        add_seeds_argument(what, "0,1,2")
        what.add_argument(
            "--sets",
            default="sts12,sts13,sts14,stsb",
            help="evaluation sets scored at the end ('papers': STS12-16, STS-B, SICK-R where found)",
        )
        train = parser.add_argument_group("UNSUP and SUP training (the authors' defaults)")
        train.add_argument("--epochs", type=int, default=20, help="cap on epochs")
        train.add_argument(
            "--patience", type=int, default=5, help="epochs without a better STS-B dev Pearson before stopping"
        )
        train.add_argument("--batch-size", type=int, default=512, help="pairs per update")
        train.add_argument(
            "--lr", type=float, default=1e-2, help="AdamW learning rate (SUP signed: 1e-4, the authors')"
        )
        train.add_argument("--weight-decay", type=float, default=1e-4)
        train.add_argument(
            "--width", type=int, default=1024, help="meta-embedding size per source (also SVD's and GCCA's d, capped)"
        )
        train.add_argument(
            "--pooling", choices=POOLINGS, default="max", help="word-to-sentence pooling of UNSUP and SUP"
        )
        train.add_argument(
            "--margin", type=float, default=1.0, help="hinge margin of the paper variant's dissimilar terms"
        )
        train.add_argument(
            "--max-train-samples", type=int, default=None, help="the first N STS-B train pairs (default: all)"
        )

    @classmethod
    def check(cls, args) -> None:
        sources = [s.strip() for s in str(args.sources).split(",") if s.strip()]
        if len(set(sources)) < 2 and not args.smoke_test:
            raise SweepInputError(
                f"--sources needs two or more different encoders to combine, got {len(set(sources))} "
                f"({args.sources!r}); e.g. --sources {DEFAULT_SOURCES}"
            )
        methods = parse_names(args.methods, "--methods", list(VARIANTS))
        known = sorted({v for vs in VARIANTS.values() for v in vs if v != "-"})
        variants = None if str(args.variants).strip() == "all" else parse_names(args.variants, "--variants", known)
        trial_grid(methods, variants, sources or ["a", "b"])
        parse_int_list(args.seeds, "--seeds")
        for flag in ("epochs", "patience", "batch_size", "width", "max_train_samples"):
            value = getattr(args, flag)
            if value is not None and value <= 0:
                raise SweepInputError(f"--{flag.replace('_', '-')} must be a positive integer, got {value}")
        if not args.lr > 0 or args.weight_decay < 0 or args.margin < 0:
            raise SweepInputError("--lr must be positive, --weight-decay and --margin not negative")

    @staticmethod
    def sets(args) -> list[str]:
        from trainables.evaluation.sets import suite_sets

        return suite_sets(args.sets, args.data_dir)[0]

    @classmethod
    def metrics(cls, args) -> MetricContract:
        sets = [n.strip() for n in str(args.sets).split(",") if n.strip()]
        return MetricContract(
            primary="best_dev_pearson",
            report="test_spearman_at_best_dev" if "stsb" in sets else "mean_spearman",
            companion="dev_spearman_at_best_dev",
            epoch="dev_pearson",
            axes=("meta", "variant", "seed"),
            select=None,
            seed="seed",
            columns=(*(f"{n}_spearman" for n in sets), "mean_spearman"),
            label="Pearson",
            short={"meta": "", "variant": "", "seed": "s"},
            reference=("meta", "sse"),
        )

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.data.stsb import load_stsb, stsb_checksums
        from trainables.encoders.loading import resolve_model
        from trainables.evaluation.sets import load_suite
        from trainables.stages.store import stage_root

        sets = cls.sets(args)
        args.sets = ",".join(sets)
        names = [s.strip() for s in str(args.sources).split(",") if s.strip()]
        if context.smoke_test and args.sources == DEFAULT_SOURCES:
            names = smoke_sources(context.storage_path, args.data_dir)
        paths = [resolve_model(name, context.mlflow_uri) for name in names]
        root = stage_root(None, context.storage_path)
        suite = load_suite(sets, args.data_dir)
        checksum = ",".join(f"{k}={v}" for k, v in sorted({**stsb_checksums(args.data_dir), **suite.checksums}.items()))
        specs = [
            token_embeddings.stage_spec(n, p, sets, args.max_train_samples, checksum, root, args.data_dir)
            for n, p in zip(names, paths)
        ]
        sentences = token_embeddings.stage_sentences(sets, args.data_dir, args.max_train_samples)
        row = {s: i for i, s in enumerate(sentences)}
        splits = load_stsb(args.data_dir, ("train", "dev"))
        splits["train"] = splits["train"][: args.max_train_samples]

        def pairs(examples):
            return (
                np.asarray([row[e.sentence1] for e in examples]),
                np.asarray([row[e.sentence2] for e in examples]),
                np.asarray([e.score for e in examples], dtype=np.float32),
            )

        data = MetaData(
            pairs(splits["train"]),
            pairs(splits["dev"]),
            np.asarray([row[s] for s in suite.sentences]),
            suite,
            len(sentences),
        )
        variants = None if str(args.variants).strip() == "all" else parse_names(args.variants, "--variants")
        grid = trial_grid(parse_names(args.methods, "--methods", list(VARIANTS)), variants, names)
        base = {
            "method": cls.name,
            "sources": ",".join(Path(n.rstrip("/")).name for n in names),
            "sets": args.sets,
            "epochs": args.epochs,
            "patience": args.patience,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "weight_decay": args.weight_decay,
            "width": args.width,
            "pooling": args.pooling,
            "margin": args.margin,
            "max_train_samples": args.max_train_samples,
            "optimizer": "adamw",
            "upstream_method": "token-embeddings",
            "stage_key": [spec["key"] for spec in specs],
            "upstream_run_id": None,
            "_source_paths": [str(root / spec["key"]) for spec in specs],
        }
        configs = [
            {**base, "source_index": -1, **trial, "seed": seed}
            for seed in parse_int_list(args.seeds, "--seeds")
            for trial in grid
        ]
        identity = hashlib.sha256("\n".join(sentences).encode()).hexdigest()[:16]
        costs = {
            (meta,): TrialCost(memory_bytes=2e9, seconds=60.0 if meta in TRAINED else 5.0, gpu=meta in TRAINED)
            for meta in VARIANTS
        }
        return MethodPlan(
            configs=configs,
            data=data,
            costs=costs,
            stages={spec["key"]: spec for spec in specs},
            static_params={
                "source_paths": " | ".join(map(str, paths))[:5000],
                "stage_sentences": len(sentences),
                "stage_sentences_sha": identity,
            },
            checksums={"data": checksum},
            method_label=cls.name,
        )
