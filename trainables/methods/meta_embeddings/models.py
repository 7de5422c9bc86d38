"""The meta-embedding models, losses and baselines, without Ray: UNSUP's and SUP's attention model
(`MetaModel`), their losses (the paper's and the released code's), and the baselines' vectors
(SSE, CONC, AVG, SVD, GCCA) over the sources' cached word vectors."""

from __future__ import annotations

import itertools

import numpy as np
import torch
import torch.nn.functional as F

from trainables.methods.meta_embeddings.variants import GCCA_RIDGE, TERMS, check_fit_sentences


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


def max_pooled(source, rows) -> np.ndarray:
    """float32 [n, d]: the elementwise max of each sentence's word vectors (zeros for a sentence without words)."""
    words, starts = source
    out = np.zeros((len(rows), words.shape[1]), dtype=np.float32)
    for i, r in enumerate(rows):
        begin, end = int(starts[r]), int(starts[r + 1])
        if end > begin:
            out[i] = np.asarray(words[begin:end], dtype=np.float32).max(axis=0)
    return out


def sentence_vectors(source, rows, pooling: str = "mean", inputs: str = "raw") -> np.ndarray:
    """The baselines' view of a source: `mean_pooled` (or `max_pooled`) as they are (`raw`, the paper's
    eq. 11-14), or each row l2-normalised (`l2`; zeros stay zeros)."""
    vectors = max_pooled(source, rows) if pooling == "max" else mean_pooled(source, rows)
    if inputs == "raw":
        return vectors
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

    def __init__(self, dims: list[int], width: int, variant: str, pooling: str, weighted: bool = True):
        super().__init__()
        self.variant, self.pooling, self.weighted = variant, pooling, weighted
        self.projections = torch.nn.ModuleList(torch.nn.Linear(d, width, bias=False) for d in dims)
        self.weights = torch.nn.Parameter(torch.empty(len(dims)).uniform_(-1, 1), requires_grad=weighted)
        # authors_code: alpha, beta, lambda (the code's Linear(1, 1) weights); paper (literal loss): the
        # coefficients of criteria 2-4 and of the orthogonality term; U(-1, 1) at start
        self.coefficients = torch.nn.Parameter(torch.empty(3 if variant == "authors_code" else 4).uniform_(-1, 1))

    def source_weights(self) -> torch.Tensor:
        """softmax(a) (paper), a (authors_code), or 1/k each without weights (paper Table 2's "w/o")."""
        if not self.weighted:
            return torch.full_like(self.weights, 1.0 / len(self.weights))
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
    """The released code's loss (docs/methods/meta-embeddings.md M4); `sides` = [w of s1, w of s2], each a list over
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
    sides: list[list[torch.Tensor]], masks: list[list[torch.Tensor]], matrices: list[torch.Tensor], margin
) -> dict[str, torch.Tensor]:
    """The paper variant's terms (module docstring): `sides`/`masks` = [s1, s2], each a list over
    sources of [B, T, width] / [B, T]. Criterion 1: squared distance; 2-4: the squared distance as
    the paper writes it (`margin` None), or a hinge on it (`margin`: max(0, margin - squared))."""

    def hinge(squared):
        return squared if margin is None else F.relu(margin - squared)

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


def paper_loss(terms: dict[str, torch.Tensor], coefficients, how: str, dropped: str | None = None) -> torch.Tensor:
    """The paper variant's loss from `paper_terms`: `literal` (paper eq. 10: every term after C1 times a
    coefficient trained with the model, each product in |.| as the released code does, so that the
    minimised loss stays bounded: C1 + |a C2| + |b C3| + |g C4| + |l ortho|); `hinge` (the project's
    reading: unit coefficients, hinge terms). `dropped`: a term left out (an ablation)."""
    total = terms["c1"].new_zeros(())
    for k, name in enumerate(TERMS):
        if name == dropped:
            continue
        term = terms[name]
        total = total + (term if how == "hinge" or name == "c1" else (coefficients[k - 1] * term).abs())
    return total


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
    check_fit_sentences(meta, variant, len(train[0]) if train else 0, width, [v.shape[1] for v in views])
    if meta == "svd" and variant == "full":
        means, components = svd_fit(everything(), None)
        return svd_apply(views, means, components)
    if meta == "svd":
        means, components = svd_fit(train, min(width, len(train[0]), sum(v.shape[1] for v in train)))
        return svd_apply(views, means, components)
    if meta == "gcca":
        return gcca_apply(gcca_fit(train, min(width, min(v.shape[1] for v in train))), views)
    raise ValueError(f"unknown baseline {meta!r}")
