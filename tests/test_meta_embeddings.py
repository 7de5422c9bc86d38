"""Meta-embeddings (trainables/methods/meta_embeddings/method.py) and their token-embeddings stage
(trainables/methods/meta_embeddings/token_embeddings.py): word merging, each loss term against a numpy reference, the
baselines against reference computations, a reused actor, and the sweep script end to end on two
tiny sources of different sizes with each source encoded once across two sweeps."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from trainables.methods.meta_embeddings import models as me
from trainables.methods.meta_embeddings import token_embeddings as te
from trainables.methods.meta_embeddings import trainable as mt
from trainables.methods.meta_embeddings import variants


# --- word merging -----------------------------------------------------------------------------------
def test_merge_words_averages_touching_subwords_and_drops_specials():
    # [CLS] un ##believ ##able ! it [SEP] [PAD]  for "unbelievable! it"
    offsets = [(0, 0), (0, 2), (2, 8), (8, 12), (12, 13), (14, 16), (0, 0), (0, 0)]
    vectors = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
    words = te.merge_words(offsets, vectors)
    expected = np.stack([vectors[1:5].mean(axis=0), vectors[5]])
    np.testing.assert_allclose(words, expected)


def test_encode_merges_a_real_tokenizer_into_whitespace_words(tiny_models):
    from transformers import AutoModel, AutoTokenizer

    path = tiny_models["bert"]
    model, tokenizer = AutoModel.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    sentences = ["A man is playing a flute.", "Unbelievably, zyx-qw runs!"]
    words = te.encode(model, tokenizer, sentences, 64, 2, "cpu")
    for sentence, vectors in zip(sentences, words):
        assert len(vectors) == len(sentence.split())
        encoded = tokenizer(sentence, return_offsets_mapping=True, return_tensors="pt")
        offsets = encoded.pop("offset_mapping")[0].tolist()
        with torch.no_grad():
            hidden = model(**encoded).last_hidden_state[0].numpy()
        # by hand: the tokens inside each whitespace word's character span, averaged
        position = 0
        for index, word in enumerate(sentence.split()):
            begin = sentence.index(word, position)
            end = position = begin + len(word)
            inside = [i for i, (s, e) in enumerate(offsets) if e > s and s >= begin and e <= end]
            np.testing.assert_allclose(vectors[index], hidden[inside].mean(axis=0), rtol=1e-5, atol=1e-5)


# --- losses against numpy -----------------------------------------------------------------------------
def _sides(seed=0, batch=2, length=4, width=5):
    rng = np.random.default_rng(seed)
    sides = [[rng.standard_normal((batch, length, width)).astype(np.float32) for _ in range(2)] for _ in range(2)]
    masks = [
        [np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool), np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)],  # s1: per source
        [np.array([[1, 1, 0, 0], [1, 1, 1, 1]], bool), np.array([[1, 0, 0, 0], [1, 1, 1, 0]], bool)],
    ]  # s2
    matrices = [rng.standard_normal((width, 3)).astype(np.float32), rng.standard_normal((width, 6)).astype(np.float32)]
    return sides, masks, matrices


def _t(arrays):
    return [torch.from_numpy(a) for a in arrays]


def test_authors_code_loss_matches_the_codes_loops():
    """Reference: the released code's loops, per side, source pair and position pair, every
    per-batch vector gathered in one list per term and averaged once; three sources, and sides
    padded to different lengths (as each side of the code's batches is)."""
    rng = np.random.default_rng(0)
    batch, width, lengths = 2, 5, (3, 5)
    sides = [[rng.standard_normal((batch, length, width)).astype(np.float32) for _ in range(3)] for length in lengths]
    matrices = [rng.standard_normal((width, d)).astype(np.float32) for d in (3, 6, 4)]
    alpha, beta, lam = 0.7, -0.3, 0.5
    m1, m2 = sides[0][0].max(axis=1), sides[1][1].max(axis=1)
    same, other, sentence = [], [], []
    for w in sides:
        for i, j in ((0, 1), (0, 2), (1, 2)):
            length = w[i].shape[1]
            for t in range(length):
                for u in range(length):
                    d = np.linalg.norm(w[i][:, t] - w[j][:, u], axis=1)
                    (same if t == u else other).append(d if t == u else -alpha * d)
            sentence.append(-beta * np.linalg.norm(m1 - m2, axis=1))
    ortho = [lam * np.linalg.norm(p.T @ p - np.eye(p.shape[1])) for p in matrices]
    expected = np.mean(same) + abs(np.mean(other)) + abs(np.mean(sentence)) + abs(np.mean(ortho))
    got = me.authors_code_loss(
        [_t(sides[0]), _t(sides[1])],
        torch.from_numpy(m1),
        torch.from_numpy(m2),
        _t(matrices),
        torch.tensor(alpha),
        torch.tensor(beta),
        torch.tensor(lam),
    )
    assert float(got) == pytest.approx(expected, rel=1e-5)


def test_paper_terms_match_numpy():
    sides, masks, matrices = _sides(seed=1)
    margin = 30.0  # large enough that some hinges are active and some are not
    got = me.paper_terms(
        [_t(s) for s in sides], [[torch.from_numpy(m) for m in ms] for ms in masks], _t(matrices), margin
    )

    def sq(a, b):
        return float(((a - b) ** 2).sum())

    def hinge(d):
        return max(0.0, margin - d)

    c1 = c2 = c3 = c4 = 0.0
    for w, m in zip(sides, masks):
        same = [sq(w[0][x, t], w[1][x, t]) for x in range(2) for t in range(4) if m[0][x, t] and m[1][x, t]]
        other = [
            hinge(sq(w[0][x, t], w[1][x, u]))
            for x in range(2)
            for t in range(4)
            for u in range(4)
            if t != u and m[0][x, t] and m[1][x, u]
        ]
        c1, c2 = c1 + np.mean(same), c2 + np.mean(other)
    (w1, w2), (k1, k2) = sides, masks
    for i, j in ((0, 1), (1, 0)):
        c3 += np.mean(
            [hinge(sq(w1[i][x, t], w2[j][x, t])) for x in range(2) for t in range(4) if k1[i][x, t] and k2[j][x, t]]
        )
        c4 += np.mean(
            [
                hinge(sq(w1[i][x, t], w2[j][x, u]))
                for x in range(2)
                for t in range(4)
                for u in range(4)
                if t != u and k1[i][x, t] and k2[j][x, u]
            ]
        )
    ortho = np.linalg.norm(matrices[0].T @ matrices[1])
    for name, value in (("c1", c1), ("c2", c2), ("c3", c3), ("c4", c4), ("ortho", ortho)):
        assert float(got[name]) == pytest.approx(value, rel=1e-4), name
    assert 0 < c2 < 2 * margin  # the hinge is active but bounded


def test_sup_losses_match_numpy():
    rng = np.random.default_rng(2)
    m1, m2, gold = rng.standard_normal((4, 6)), rng.standard_normal((4, 6)), np.array([0.0, 1.5, 3.2, 5.0])
    cos = np.sum(m1 * m2, 1) / np.linalg.norm(m1, axis=1) / np.linalg.norm(m2, axis=1)
    args = [torch.tensor(a, dtype=torch.float32) for a in (m1, m2, gold)]
    assert float(me.sup_mse_loss(*args)) == pytest.approx(np.mean(((cos + 1) / 2 - gold / 5) ** 2), rel=1e-5)
    assert float(me.sup_signed_loss(*args)) == pytest.approx(
        np.mean(np.linalg.norm(m1 - m2, axis=1) - gold / 5), rel=1e-5
    )


def test_models_weights_and_pooling():
    torch.manual_seed(0)
    xs = [torch.randn(3, 5, 4), torch.randn(3, 5, 7)]
    masks = [torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)] * 2
    paper = me.MetaModel([4, 7], 6, "paper", "max")
    authors = me.MetaModel([4, 7], 6, "authors_code", "max")
    authors.weights.data = torch.tensor([-0.4, 0.9])
    assert float(paper.source_weights().detach().sum()) == pytest.approx(1.0)
    assert authors.source_weights().tolist() == pytest.approx([-0.4, 0.9])  # no softmax: negative weights stay
    with torch.no_grad():
        batched = paper.sentence(paper.words(xs), masks)
        for row in range(3):  # each sentence pooled alone, without padding
            n = int(masks[0][row].sum())
            alone = paper.sentence(paper.words([x[row : row + 1, :n] for x in xs]), None)
            torch.testing.assert_close(batched[row : row + 1], alone)
        concatenated = authors.sentence(authors.words(xs), masks)
    assert concatenated.shape == (3, 12)
    padded = [x * masks[0].unsqueeze(-1) for x in xs]  # zero pads, as the stage gives them
    for model in (paper, authors):  # projecting only the words: the same word vectors, pads 0
        for full, packed in zip(model.words(padded), model.words(padded, masks)):
            torch.testing.assert_close(packed, full)


# --- baselines against references ------------------------------------------------------------------------
def _views(seed=3, n=300):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, 3))
    return [z @ rng.standard_normal((3, d)) + 0.5 * rng.standard_normal((n, d)) for d in (6, 9, 5)]


def test_gcca_two_views_recovers_the_canonical_correlations():
    x, y = _views()[:2]
    model = me.gcca_fit([x, y], 3, ridge=0.0)
    scores = model.transform([x, y])
    # reference: canonical correlations = singular values of Cxx^-1/2 Cxy Cyy^-1/2
    xc, yc = x - x.mean(0), y - y.mean(0)

    def inv_sqrt(c):
        values, vectors = np.linalg.eigh(c)
        return vectors @ np.diag(values**-0.5) @ vectors.T

    rho = np.linalg.svd(inv_sqrt(xc.T @ xc) @ xc.T @ yc @ inv_sqrt(yc.T @ yc), compute_uv=False)[:3]
    got = [abs(np.corrcoef(scores[0][:, k], scores[1][:, k])[0, 1]) for k in range(3)]
    np.testing.assert_allclose(got, rho, rtol=1e-6)


def test_gcca_regularises_each_view_as_the_authors_ridge():
    """cca-zoo's (1 - c) C + c I equals (1 - c)(C + r I), r = 0.1 x the view's mean feature std."""
    views = [v * scale for v, scale in zip(_views(), (1.0, 64.0, 0.01))]
    for view, c in zip(views, me.gcca_shrinkage(views)):
        ridge = 0.1 * view.std(axis=0).mean()
        covariance = np.cov(view, rowvar=False)
        identity = np.eye(view.shape[1])
        np.testing.assert_allclose(
            (1 - c) * covariance + c * identity, (1 - c) * (covariance + ridge * identity), rtol=1e-10, atol=1e-14
        )
    assert len(set(np.round(me.gcca_shrinkage(views), 8))) == 3


def test_gcca_is_maxvar_for_three_views():
    views = _views()
    meta = me.gcca_apply(me.gcca_fit(views, 2, ridge=0.0), views)
    centred = [v - v.mean(0) for v in views]
    projector = sum(v @ np.linalg.solve(v.T @ v, v.T) for v in centred)  # sum of the views' hat matrices
    _, vectors = np.linalg.eigh(projector)
    top = vectors[:, ::-1][:, :2]
    for k in range(2):
        cosine = meta[:, k] @ top[:, k] / np.linalg.norm(meta[:, k])
        assert abs(cosine) == pytest.approx(1.0, abs=1e-6)


def test_svd_truncated_is_pca_and_full_is_centred_conc():
    from sklearn.decomposition import PCA

    views = _views()
    means, components = me.svd_fit(views, 4)
    reduced = me.svd_apply(views, means, components)
    reference = PCA(n_components=4, svd_solver="full").fit_transform(np.concatenate(views, axis=1))
    np.testing.assert_allclose(np.abs(reduced), np.abs(reference), atol=1e-8)
    full = me.svd_apply(views, *me.svd_fit(views, None))
    conc = np.concatenate(views, axis=1) - np.concatenate(views, axis=1).mean(0)
    np.testing.assert_allclose(full @ full.T, conc @ conc.T, atol=1e-8)  # a rotation: same cosines


def test_avg_zero_pad_and_projected():
    a, b = np.array([[1.0, 2.0]]), np.array([[3.0, 4.0, 5.0]])
    got = me.baseline_vectors("avg", "zero-pad", [], [a, b], None, 8, 0)
    np.testing.assert_allclose(got, [[2.0, 3.0, 2.5]])
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((5, 3)), rng.standard_normal((5, 7))
    projected = me.baseline_vectors("avg", "projected", [], [x, y], None, 8, 0)
    assert projected.shape == (5, 7)
    q = me.isometry(3, 7, 1)
    np.testing.assert_allclose(q @ q.T, np.eye(3), atol=1e-12)  # an isometry: a source's geometry is kept


# --- the trial, in one reused actor -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_stages(tmp_path_factory, data_dir):
    """Two tiny BERT sources of widths 32 and 48 and their stages over a few STS-B sentences, with
    the MetaData a sweep would ship: 64 train pairs, 60 dev pairs, a suite of 60 STS-B test pairs."""
    from transformers import AutoModel, AutoTokenizer

    from trainables.data.stsb import load_stsb
    from trainables.encoders.tiny import build_tiny_model
    from trainables.evaluation.sets import EvalData, EvalSuite
    from trainables.evaluation.task_kinds import Pairs

    root = tmp_path_factory.mktemp("meta")
    splits = load_stsb(data_dir)
    train, dev, test = splits["train"][:64], splits["dev"][:60], splits["test"][:60]
    suite = EvalSuite(
        {
            "stsb": EvalData(
                "stsb",
                {
                    "all": Pairs(
                        [e.sentence1 for e in test], [e.sentence2 for e in test], np.array([e.score for e in test])
                    )
                },
                "x",
            )
        }
    )
    sentences = list(dict.fromkeys([s for e in train + dev for s in (e.sentence1, e.sentence2)] + suite.sentences))
    row = {s: i for i, s in enumerate(sentences)}
    paths, models = [], []
    for width in (32, 48):
        model_dir = build_tiny_model(
            "bert",
            root / f"bert{width}",
            layers=2,
            hidden=width,
            sentences=[e.sentence1 for e in splits["train"][:500]],
            seed=width,
        )
        model, tokenizer = AutoModel.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
        (root / f"stage{width}").mkdir()
        te.save(root / f"stage{width}", te.encode(model, tokenizer, sentences, 64, 32, "cpu"))
        paths.append(str(root / f"stage{width}"))
        models.append((model, tokenizer))

    def pairs(examples):
        return (
            np.array([row[e.sentence1] for e in examples]),
            np.array([row[e.sentence2] for e in examples]),
            np.array([e.score for e in examples], dtype=np.float32),
        )

    data = mt.MetaData(pairs(train), pairs(dev), np.array([row[s] for s in suite.sentences]), suite, len(sentences))
    return {"paths": paths, "data": data, "models": models, "sentences": sentences}


def _trainable(config, data):
    """The Trainable with its shared data, as tune.with_parameters gives it (no Ray needed)."""

    class Bound(mt.MetaEmbeddingTrainable):
        def setup(self, config):
            super().setup(config, data)

    return Bound(config=config)


def _config(small_stages, **extra):
    return {
        "epochs": 3,
        "patience": 5,
        "batch_size": 32,
        "lr": 1e-2,
        "weight_decay": 1e-4,
        "width": 8,
        "pooling": "max",
        "margin": 1.0,
        "seed": 0,
        "source_index": -1,
        "_source_paths": small_stages["paths"],
        **extra,
    }


def test_a_reused_actor_gives_each_method_its_own_result(small_stages):
    data = small_stages["data"]
    gcca = _config(small_stages, meta="gcca", variant="-")
    sse = _config(small_stages, meta="sse", variant="bert32", source_index=0, pooling="mean")
    actor = _trainable(gcca, data)
    gcca_result = actor.train()
    assert actor.reset_config(sse)
    sse_result = actor.train()
    fresh = _trainable(sse, data).train()
    assert sse_result["stsb_spearman"] == pytest.approx(fresh["stsb_spearman"], abs=1e-9)
    assert sse_result["stsb_spearman"] != pytest.approx(gcca_result["stsb_spearman"], abs=1e-3)
    # the source's own score computed directly: encoder -> merged words -> mean -> cosine
    model, tokenizer = small_stages["models"][0]
    direct = np.stack([w.mean(axis=0) for w in te.encode(model, tokenizer, data.suite.sentences, 64, 32, "cpu")])
    assert sse_result["stsb_spearman"] == pytest.approx(
        data.suite.score(direct)["stsb_spearman"], abs=0.5
    )  # fp16 cache
    actor.reset_config(_config(small_stages, meta="unsup", variant="authors_code"))
    trained = actor.train()
    assert trained["epoch"] == 1 and "stsb_spearman" not in trained and trained["source_weight_0"] != 0
    actor.stop()


def test_l2_baselines_do_not_depend_on_a_sources_scale_and_raw_ones_do(small_stages, tmp_path):
    # all-MiniLM-L6-v2's word vectors are ~2.4x longer than all-mpnet-base-v2's: raw (the paper's
    # eq. 11-14), the longer source decides CONC; `l2` normalises each source's sentence vectors first
    words, starts = te.load(small_stages["paths"][0])
    scaled = tmp_path / "scaled"
    scaled.mkdir()
    te.save(scaled, [np.asarray(words[starts[i] : starts[i + 1]], np.float32) * 64 for i in range(len(starts) - 1)])
    data = small_stages["data"]
    for meta, variant in (("conc", "-"), ("avg", "zero-pad"), ("svd", "full")):
        scores = {}
        for inputs in ("l2", "raw"):
            plain = _config(small_stages, meta=meta, variant=variant, baseline_inputs=inputs)
            big = {**plain, "_source_paths": [str(scaled), small_stages["paths"][1]]}
            scores[inputs] = [_trainable(c, data).train()["stsb_spearman"] for c in (plain, big)]
        assert scores["l2"][0] == pytest.approx(scores["l2"][1], abs=1e-6), meta
        assert scores["raw"][0] != pytest.approx(scores["raw"][1], abs=1e-4), meta


def test_raw_conc_is_the_concatenation_of_each_sources_pooled_vectors(small_stages):
    from trainables.methods.meta_embeddings.models import mean_pooled, sentence_vectors

    sources = [te.load(path) for path in small_stages["paths"]]
    rows = np.arange(5)
    raw = [sentence_vectors(s, rows, "mean", "raw") for s in sources]
    assert all(np.array_equal(r, mean_pooled(s, rows)) for r, s in zip(raw, sources))
    normalised = sentence_vectors(sources[0], rows, "mean", "l2")
    assert np.allclose(np.linalg.norm(normalised, axis=1), 1.0, atol=1e-5)
    assert np.allclose(normalised * np.linalg.norm(raw[0], axis=1, keepdims=True), raw[0], atol=1e-5)


def test_model_vectors_are_each_sentence_pooled_alone_in_the_order_asked(small_stages):
    data = small_stages["data"]
    for variant in ("paper", "authors_code"):
        trainable = _trainable(_config(small_stages, meta="unsup", variant=variant), data)
        rows = np.concatenate([data.dev[0][:30][::-1], data.train[1][:30]])  # mixed lengths, batched by length inside
        got = trainable.vectors(rows)
        with torch.no_grad():
            for k, row in enumerate(rows):
                xs, _ = me.batch_words(trainable.sources, [row])
                alone = trainable.model.sentence(trainable.model.words(xs), None).numpy()[0]
                np.testing.assert_allclose(got[k], alone, rtol=1e-5, atol=1e-6)
        trainable.stop()


def test_the_authors_model_pads_each_side_alone_and_pools_over_the_pads(small_stages):
    data = small_stages["data"]
    trainable = _trainable(_config(small_stages, meta="unsup", variant="authors_code"), data)
    s1, s2, gold = (part[:16] for part in data.train)
    sides = []
    for rows in (s1, s2):  # each side padded to its own longest sentence: what the authors' batches are
        xs, masks = me.batch_words(trainable.sources, rows)
        sides.append(trainable.model.words(xs, masks))
    lengths = {w[0].shape[1] for w in sides}
    assert len(lengths) == 2  # the two sides of these pairs do pad to different lengths
    m1, m2 = (trainable.model.sentence(w, None) for w in sides)
    expected = me.authors_code_loss(sides, m1, m2, trainable.model.matrices(), *trainable.model.coefficients)
    assert float(trainable.loss(s1, s2, gold).detach()) == pytest.approx(float(expected.detach()), rel=1e-6)
    trainable.stop()


def test_unsup_trains_and_stops_early(small_stages):
    data = small_stages["data"]
    for variant in ("paper", "authors_code"):
        trainable = _trainable(_config(small_stages, meta="unsup", variant=variant, epochs=20, patience=2), data)
        losses = []
        while True:
            result = trainable.train()
            losses.append(result["train_loss"])
            if result.get("done"):
                break
        assert result["epoch"] < 20 and result["epoch"] - result["best_epoch"] == 2  # patience 2
        assert np.isfinite(result["stsb_spearman"]) and losses[-1] < losses[0]
        if variant == "paper":
            assert result["source_weight_0"] + result["source_weight_1"] == pytest.approx(1.0)
        trainable.stop()


def test_a_collapsed_epoch_is_neither_kept_as_best_nor_stops_training(small_stages):
    trainable = _trainable(
        _config(small_stages, meta="unsup", variant="paper", epochs=3, patience=1), small_stages["data"]
    )
    real = trainable.vectors
    trainable.vectors = lambda rows: np.ones((len(rows), 8), np.float32)  # collapsed: every dev cosine is 1
    with pytest.warns(Warning):  # scipy: the correlation of a constant input is not defined
        first = trainable.train()
    assert np.isnan(first["dev_pearson"])
    trainable.vectors = real
    second = trainable.train()
    assert np.isfinite(second["dev_pearson"]) and second["best_epoch"] == 2 and not second["done"]  # patience 1
    assert trainable.best_dev == second["dev_pearson"]
    trainable.stop()


def test_a_non_finite_loss_ends_the_trial_at_its_step_naming_the_weight_decay(small_stages):
    """--weight-decay 1e20 (issue 56): the trial ends at the first step whose loss is not finite, with no
    optimiser step taken on it and no further step of the epoch, and the message names --weight-decay first."""
    trainable = _trainable(
        _config(small_stages, meta="unsup", variant="paper", epochs=5, batch_size=8, weight_decay=1e20),
        small_stages["data"],
    )
    losses, steps = [], []
    real_loss, real_step = trainable.loss, trainable.optimizer.step
    trainable.loss = lambda *a: losses.append(real_loss(*a)) or losses[-1]
    trainable.optimizer.step = lambda: steps.append(1) or real_step()
    for _ in range(5):
        result = trainable.train()
        if result.get("done"):
            break
    assert "trial_failed" in result, result
    first = next(i for i, loss in enumerate(losses) if not torch.isfinite(loss))
    assert len(losses) == first + 1 and len(steps) == first  # nothing trained on or after the non-finite loss
    reason = result["trial_failed"]
    assert f"the loss of step {first + 1} of epoch 1 is" in reason and "--weight-decay 1e+20" in reason, reason
    assert "lower --weight-decay or --lr" in reason, reason
    trainable.stop()


# --- the sweep script -----------------------------------------------------------------------------------------
def _sweep_flags(sweep_env, tiny_models, tmp_path, stsb_sentences, data_dir, train_pairs: int) -> tuple[list[str], str]:
    """Flags of a sweep over two tiny sources of different sizes (BERT 32-d and 48-d)."""
    from trainables.encoders.tiny import build_tiny_model

    wide = build_tiny_model("bert", tmp_path / "bert48", layers=2, hidden=48, sentences=stsb_sentences, seed=7)
    store = ["--storage-path", str(sweep_env["storage"]), "--mlflow-uri", sweep_env["uri"], "--data-dir", str(data_dir)]
    settings = "--experiment meta --gpus-per-trial 0 --cpus-per-trial 0.5 --sets stsb --epochs 1 --width 8 --seeds 0"
    sources = ["--sources", f"{tiny_models['bert']},{wide}", "--max-train-samples", str(train_pairs)]
    return [*store, *settings.split(), *sources], str(wide)


def _stage_runs_of_trials(uri: str) -> set[str]:
    from ast import literal_eval

    from mlflow_helpers import runs_by_role

    return {json.dumps(literal_eval(r.data.params["upstream_run_id"])) for r in runs_by_role(uri, "meta")[1]}


@pytest.mark.slow
def test_sources_are_encoded_once_across_sweeps(sweep_env, tiny_models, tmp_path, stsb_sentences, data_dir):
    from sweeps.meta_embeddings import main
    from trainables.stages.upstream import read_executions

    flags, wide = _sweep_flags(sweep_env, tiny_models, tmp_path, stsb_sentences, data_dir, 16)
    assert main(flags + ["--name", "first", "--methods", "sse"]) == 0
    assert main(flags + ["--name", "second", "--methods", "conc"]) == 0
    executions = read_executions(sweep_env["storage"] / "stages")
    assert sorted(e["model"] for e in executions) == sorted([tiny_models["bert"], wide])
    assert len(_stage_runs_of_trials(sweep_env["uri"])) == 1  # the three trials name the same two stage runs


@pytest.mark.slow
def test_every_method_runs_and_each_source_is_encoded_once(sweep_env, tiny_models, tmp_path, stsb_sentences, data_dir):
    from mlflow_helpers import runs_by_role

    from sweeps.meta_embeddings import main
    from trainables.stages.upstream import read_executions

    flags, wide = _sweep_flags(sweep_env, tiny_models, tmp_path, stsb_sentences, data_dir, 64)
    assert main(flags + ["--name", "first"]) == 0
    _, runs = runs_by_role(sweep_env["uri"], "meta")
    got = {(r.data.params["meta"], r.data.params["variant"]) for r in runs if r.info.status == "FINISHED"}
    assert got == {
        ("unsup", "paper"),
        ("unsup", "authors_code"),
        ("sup", "mse"),
        ("sup", "signed"),
        ("sse", "bert"),
        ("sse", "bert48"),
        ("conc", "-"),
        ("avg", "zero-pad"),
        ("avg", "projected"),
        ("svd", "train"),
        ("svd", "full"),
        ("gcca", "-"),
    }
    score = {(r.data.params["meta"], r.data.params["variant"]): r.data.metrics["stsb_spearman"] for r in runs}
    assert score[("sse", "bert")] != score[("sse", "bert48")] != score[("gcca", "-")]
    assert main(flags + ["--name", "second", "--methods", "conc"]) == 0
    executions = read_executions(sweep_env["storage"] / "stages")
    assert sorted(e["model"] for e in executions) == sorted([tiny_models["bert"], wide])
    assert len(_stage_runs_of_trials(sweep_env["uri"])) == 1  # every trial of both sweeps names the same two stage runs


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--sources", "SOURCE_A"], "--sources needs two or more different encoders"),
        (["--sources", "SOURCE_A,SOURCE_A"], "--sources needs two or more different encoders"),
        # one folder spelled twice: compared as resolved paths, both spellings named
        (["--sources", "SOURCE_A,SOURCE_A/"], "'SOURCE_A' and 'SOURCE_A/' are both SOURCE_A"),
        (["--sources", "SOURCE_A,SOURCE_B,SOURCE_A/../bert/"], "'SOURCE_A' and 'SOURCE_A/../bert/' are both"),
        (["--methods", "unsup,pca"], "--methods unknown 'pca'"),
        (["--pooling", "max,min"], "--pooling unknown 'min'"),
        (["--lr", "0"], "--lr must be positive, got 0"),
        (["--variants", "paper", "--methods", "unsup,sup"], "leaves no variant of 'sup'"),
        (["--sources", "SOURCE_A,MISSING"], "Model directory 'MISSING' does not exist"),
        # fitted on one pair (two sentences): the tiny sources' 32 + 32 components need 65 sentences, GCCA's 32 need 33
        (["--methods", "svd", "--variants", "train", "--max-train-samples", "1"], "needs at least 65 different"),
        (["--methods", "gcca", "--max-train-samples", "1"], "GCCA fits 32 components"),
        (["--methods", "gcca", "--max-train-samples", "1", "--width", "4"], "needs at least 5 different ones"),
    ],
)
def test_bad_input_is_refused_before_any_work(flags, message, tiny_models, tmp_path, data_dir, capsys):
    import time

    from sweeps.meta_embeddings import main

    storage = tmp_path / "runs"
    names = {"SOURCE_A": tiny_models["bert"], "SOURCE_B": tiny_models["mpnet"], "MISSING": str(tmp_path / "nope")}

    def named(text):
        for key, value in names.items():
            text = text.replace(key, value)
        return text

    flags = [named(f) for f in flags]
    sources = [] if "--sources" in flags else ["--sources", f"{tiny_models['bert']},{tiny_models['mpnet']}"]
    started = time.perf_counter()
    code = main(["--storage-path", str(storage), "--data-dir", str(data_dir), "--seeds", "0", *sources, *flags])
    err = capsys.readouterr().err
    print(f"refused in {time.perf_counter() - started:.2f} s: {err.strip()}")
    assert code == 2 and named(message) in err
    assert not storage.exists()  # nothing written: no storage folder, so no stages and no mlflow.db


def test_sources_sharing_a_folder_name_are_told_apart(tiny_models, tmp_path, data_dir):
    """models/a/tiny (32-d) and models/b/tiny (48-d): two SSE rows labelled by the shortest path
    suffix that tells them apart, not one "tiny" row averaging both as two seeds."""
    import shutil

    import sweeps.engine.runner as runner
    from trainables.methods.meta_embeddings.method import source_labels

    a = shutil.copytree(tiny_models["bert"], tmp_path / "models" / "a" / "tiny")
    b = shutil.copytree(tiny_models["mpnet"], tmp_path / "models" / "b" / "tiny")
    flags = ["--sources", f"{a},{b}/", "--methods", "sse,conc", "--sets", "stsb", "--seeds", "0,1", "--pooling", "mean"]
    args = runner.parser_for("meta-embeddings").parse_args(
        [*flags, "--max-train-samples", "8", "--storage-path", str(tmp_path / "runs"), "--data-dir", str(data_dir)]
    )
    plan = runner.plan_sweep(args, method="meta-embeddings")
    rows = {(c["meta"], c["variant"], c["source_index"]) for c in plan.configs}
    assert rows == {("sse", "a/tiny", 0), ("sse", "b/tiny", 1), ("conc", "-", -1)}
    assert len(plan.configs) == 6 and {c["sources"] for c in plan.configs} == {"a/tiny,b/tiny"}
    assert {c["meta"]: c["baseline_inputs"] for c in plan.configs} == {"sse": None, "conc": "raw"}  # eq. 11-14
    # unique names keep their folder name (the labels of earlier sweeps); a hub id its model name
    assert source_labels([tiny_models["bert"], tiny_models["mpnet"]]) == ["bert", "mpnet"]
    assert source_labels(["org/tiny", str(a), "sentence-transformers/all-MiniLM-L6-v2"]) == [
        "org/tiny",
        "a/tiny",
        "all-MiniLM-L6-v2",
    ]


def test_settings_are_typed_and_the_trial_config_keeps_what_runs_recorded():
    """The parser gives typed values (`--variants main` every variant but the ablations, `all` None);
    the trial config's shared entries keep their names, values and types (MLflow params, hashes)."""
    from sweeps.engine.runner import parser_for
    from trainables.methods.meta_embeddings.method import MetaEmbeddings

    parser = parser_for("meta-embeddings")
    args = parser.parse_args([])
    assert args.sources == ["sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-mpnet-base-v2"]
    assert args.methods == ["unsup", "sup", "sse", "conc", "avg", "svd", "gcca"] and args.pooling == ["max", "mean"]
    assert args.seeds == [0, 1, 2] and args.sets == ["sts12", "sts13", "sts14", "stsb"] and args.optimizer is None
    assert set(args.variants) == {v for vs in variants.VARIANTS.values() for v in vs if v != "-"} - set(
        variants.ABLATIONS
    )
    assert parser.parse_args(["--variants", "all"]).variants is None
    assert parser.parse_args(["--sets", "papers", "--seeds", "0-3"]).sets == "papers"
    assert MetaEmbeddings.base_config(args) == {
        "method": "meta-embeddings",
        "sources": "all-MiniLM-L6-v2,all-mpnet-base-v2",
        "sets": "sts12,sts13,sts14,stsb",
        "epochs": 20,
        "patience": 5,
        "batch_size": 512,
        "lr": 0.01,
        "weight_decay": 0.0001,
        "width": 1024,
        "max_train_samples": None,
    }
    config = MetaEmbeddings.base_config(parser.parse_args(["--lr", "3e-3", "--weight-decay", "0", "--epochs", "3"]))
    assert [type(config[k]) for k in ("lr", "weight_decay", "epochs")] == [float, float, int]


def test_the_estimate_prices_every_trial_and_lists_each_sources_stage():
    from sweeps.engine.runner import parser_for
    from trainables.methods.meta_embeddings.method import MetaEmbeddings

    args = parser_for("meta-embeddings").parse_args(
        ["--methods", "unsup,sse,conc", "--variants", "paper", "--seeds", "0,1"]
    )
    estimate = MetaEmbeddings.estimate(args)
    # (unsup paper + 2 SSE + conc) x 2 poolings x 2 seeds; only UNSUP's 4 trials train, 60 s each
    assert estimate.trials == len(estimate.costs) == 16
    assert sum(c.gpu for c in estimate.costs) == 4 and estimate.gpu_hours == pytest.approx(4 * 60 / 3600)
    assert len(estimate.stages) == 2 and all("token-embeddings" in line for line in estimate.stages)


def test_svd_and_gcca_refuse_fewer_train_sentences_than_components_in_the_trial():
    """The trial's own guard (the plan refuses first): two sentences cannot give 8 components."""
    from trainables.core.errors import SweepInputError

    views = _views(n=2)
    for meta, variant, needed in (("svd", "train", 9), ("gcca", "-", 6)):
        with pytest.raises(SweepInputError, match=f"needs at least {needed} different ones, but gets 2"):
            me.baseline_vectors(meta, variant, views, _views(), None, 8, 0)
    assert me.baseline_vectors("svd", "train", _views(n=10), _views(), None, 8, 0).shape == (300, 8)


def test_the_papers_presets_run_the_raw_baselines_and_their_reports_say_so():
    from trainables.methods.meta_embeddings.paper import PRESETS

    for preset in PRESETS.values():
        assert preset.flags["baseline_inputs"] == "raw"
        assert "baseline_inputs" in dict(preset.shown)
