"""Sentence meta-embeddings of frozen sources (METHODS.md M4): UNSUP (attention meta-embedding
trained without labels on STS-B train sentences, early stopping on STS-B dev Pearson) and the
baselines SSE (each source alone), CONC, AVG, AVG-projected, SVD (top components; `svd_full`: the
authors' full-rank variant), GCCA and SUP (the same model trained on the STS-B scores).

Inputs: `--sources` (two or more models), `--meta` (the methods), `--variant` (UNSUP's loss:
`paper` or `authors_code`, METHODS.md M4), `--seeds`, `--sets`. Grid: methods x seeds.
Each source's word vectors come from the `token-embeddings` stage (trainables/token_embeddings.py),
encoded once per (source, sentences); trials only read them. Metrics: STS-B dev Pearson per epoch
(`dev_pearson`), `best_dev_pearson`, and the suite's `<set>_spearman`, scored once at the end.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.linalg
from ray import tune

from trainables import token_embeddings
from trainables.errors import SweepInputError
from trainables.method import Method, MethodPlan, MetricContract, TrialCost, parse_int_list, parse_names, register_method
from trainables.tmft import add_seeds_argument

TRAINED = ("unsup", "sup")
BASELINES = ("conc", "avg", "avg_proj", "svd", "svd_full", "gcca")
METAS = TRAINED + BASELINES + ("sse",)
VARIANTS = ("paper", "authors_code")


@dataclass
class MetaData:
    """What every trial reads: the stage's sentence order, the suite, STS-B train/dev pairs (rows)."""

    suite: object
    rows: dict            # sentence -> row in the stages
    train: tuple          # (rows of s1, rows of s2, gold 0-5)
    dev: tuple


def pooled(words, starts, rows) -> np.ndarray:
    """Mean of each sentence's word vectors (float32)."""
    return np.stack([np.asarray(words[starts[r]:starts[r + 1]], dtype=np.float32).mean(axis=0) for r in rows])


def svd_embed(views: list[np.ndarray], full: bool) -> np.ndarray:
    """Per-view centring, concatenation, SVD; the top min(d_i) components (all with `full`)."""
    x = np.concatenate([v - v.mean(axis=0) for v in views], axis=1)
    _, _, vt = scipy.linalg.svd(x, full_matrices=False)
    k = vt.shape[0] if full else min(v.shape[1] for v in views)
    return x @ vt[:k].T


def gcca_embed(views: list[np.ndarray], dims: int, reg: float = 0.1) -> np.ndarray:
    """MAXVAR GCCA: the top `dims` solutions of C v = r D v, C the covariance of the concatenated
    centred views, D its block diagonal (each block ridge-regularised by reg * mean std)."""
    centred = [v - v.mean(axis=0) for v in views]
    x = np.concatenate(centred, axis=1)
    c = x.T @ x / (len(x) - 1)
    d = np.zeros_like(c)
    at = 0
    for v in centred:
        n = v.shape[1]
        d[at:at + n, at:at + n] = c[at:at + n, at:at + n] + reg * v.std(axis=0).mean() * np.eye(n)
        at += n
    _, vectors = scipy.linalg.eigh(c, d)
    return x @ vectors[:, ::-1][:, :dims]


def baseline_embed(name: str, views: list[np.ndarray], seed: int) -> np.ndarray:
    dims = min(v.shape[1] for v in views)
    if name == "conc":
        return np.concatenate(views, axis=1)
    if name == "avg":
        width = max(v.shape[1] for v in views)
        return np.mean([np.pad(v, ((0, 0), (0, width - v.shape[1]))) for v in views], axis=0)
    if name == "avg_proj":
        rng = np.random.default_rng(seed)
        return np.mean([v @ scipy.linalg.qr(rng.standard_normal((v.shape[1], v.shape[1])))[0][:, :dims] for v in views], axis=0)
    if name in ("svd", "svd_full"):
        return svd_embed(views, name == "svd_full")
    return gcca_embed(views, dims)


def smoke_sources(storage_path: str, data_dir) -> list[str]:
    """`--smoke-test` sources: a tiny BERT (32-d) and a tiny MPNet (48-d), built once beside the storage."""
    from trainables.data.stsb import load_stsb
    from trainables.tiny import build_tiny_model

    folders = []
    for kind, hidden in (("bert", 32), ("mpnet", 48)):
        target = Path(storage_path, "_smoke_models", f"tiny-{kind}-{hidden}")
        if not (target / "config.json").is_file():
            sentences = [e.sentence1 for e in load_stsb(data_dir, ("train",))["train"][:2000]]
            build_tiny_model(kind, target, layers=2, hidden=hidden, sentences=sentences)
        folders.append(str(target))
    return folders


class MetaEmbeddingTrainable(tune.Trainable):
    """A baseline: one step. UNSUP/SUP: one epoch per step, dev Pearson each epoch, early
    stopping (patience, cap), the suite scored once with the best-dev state."""

    def setup(self, config: dict, data: MetaData = None):
        self.data = data
        self._start(config)

    def reset_config(self, new_config: dict) -> bool:
        self._start(new_config)
        return True

    def _start(self, config: dict):
        self.config = dict(config)
        self.sources = [token_embeddings.load(p) for p in json.loads(config["_source_paths"])]
        self.epoch, self.best, self.best_state, self.bad = 0, None, None, 0
        if config["meta"] in TRAINED:
            self._build()

    def _words(self, rows):
        import torch

        out = []
        for words, starts in self.sources:
            seqs = [torch.from_numpy(np.asarray(words[starts[r]:starts[r + 1]], dtype=np.float32)) for r in rows]
            out.append(torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True))
        return out

    def _build(self):
        import torch

        torch.manual_seed(int(self.config["seed"]))
        dims, width = [w.shape[1] for w, _ in self.sources], int(self.config["width"])
        self.proj = torch.nn.ModuleList([torch.nn.Linear(d, width, bias=False) for d in dims])
        self.scale = torch.nn.Parameter(torch.empty(len(dims)).uniform_(-1, 1))
        self.coef = torch.nn.Parameter(torch.ones(3))  # alpha, beta, lambda (trainable, METHODS.md M4)
        params = list(self.proj.parameters()) + [self.scale, self.coef]
        lr = 1e-4 if self.config["meta"] == "sup" else float(self.config["lr"])
        self.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=1e-4)

    def _meta(self, rows):
        """(per-source word meta-vectors, sentence vectors: concatenation, max over words)."""
        import torch

        w = [self.scale[i] * self.proj[i](x) for i, x in enumerate(self._words(rows))]
        return w, torch.cat([v.max(dim=1).values for v in w], dim=1)

    def _loss(self, s1, s2, gold):
        import torch

        if self.config["meta"] == "sup":
            _, m1 = self._meta(s1)
            _, m2 = self._meta(s2)
            return ((m1 - m2).norm(dim=1) - torch.as_tensor(gold, dtype=torch.float32) / 5).mean()
        alpha, beta, lam = self.coef
        total = 0.0
        (w1, m1), (w2, m2) = self._meta(s1), self._meta(s2)
        for w in (w1, w2):
            for i in range(len(w)):
                for j in range(i + 1, len(w)):
                    total = total + (w[i] - w[j]).norm(dim=-1).mean()
                    if self.config["variant"] == "authors_code":
                        total = total + (alpha * torch.cdist(w[i], w[j])).mean().abs()
        if self.config["variant"] == "authors_code":
            total = total + (beta * (m1 - m2).norm(dim=1)).mean().abs()
        ortho = torch.stack([(p.weight @ p.weight.T - torch.eye(p.weight.shape[0])).norm() for p in self.proj]).mean()
        return total + (lam * ortho).abs()

    def _sentence_vectors(self, rows) -> np.ndarray:
        import torch

        with torch.no_grad():
            return np.concatenate([self._meta(rows[b:b + 512])[1].numpy() for b in range(0, len(rows), 512)])

    def _dev_pearson(self, vectors) -> float:
        from scipy.stats import pearsonr

        s1, s2, gold = self.data.dev
        n = len(s1)
        a, b = vectors[:n], vectors[n:]
        cos = np.sum(a * b, 1) / np.clip(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12, None)
        return float(pearsonr(cos, gold)[0] * 100)

    def _suite_rows(self):
        return [self.data.rows[s] for s in self.data.suite.sentences]

    def step(self) -> dict:
        started = time.perf_counter()
        meta = self.config["meta"]
        if meta not in TRAINED:
            rows = self._suite_rows() + list(self.data.dev[0]) + list(self.data.dev[1])
            views = [pooled(w, s, rows) for w, s in self.sources]
            if meta == "sse":
                vectors = views[int(self.config["source_index"])]
            else:
                vectors = baseline_embed(meta, views, int(self.config["seed"]))
            n = len(self.data.suite.sentences)
            dev = self._dev_pearson(vectors[n:])
            return {**self.data.suite.score(vectors[:n]), "dev_pearson": dev, "best_dev_pearson": dev, "epoch": 0,
                    "wall_time_s": time.perf_counter() - started, "done": True}
        s1, s2, gold = self.data.train
        order = np.random.default_rng(int(self.config["seed"]) * 1000 + self.epoch).permutation(len(s1))
        batch = int(self.config["batch_size"])
        for b in range(0, len(order), batch):
            pick = order[b:b + batch]
            loss = self._loss([s1[i] for i in pick], [s2[i] for i in pick], gold[pick])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        self.epoch += 1
        dev = self._dev_pearson(self._sentence_vectors(list(self.data.dev[0]) + list(self.data.dev[1])))
        if self.best is None or dev > self.best:
            self.best, self.bad = dev, 0
            self.best_state = [p.detach().clone() for p in self._params()]
        else:
            self.bad += 1
        result = {"dev_pearson": dev, "best_dev_pearson": self.best, "epoch": self.epoch, "loss": float(loss),
                  "wall_time_s": time.perf_counter() - started}
        if self.bad >= int(self.config["patience"]) or self.epoch >= int(self.config["epochs"]):
            for p, saved in zip(self._params(), self.best_state):
                p.data.copy_(saved)
            result.update(self.data.suite.score(self._sentence_vectors(self._suite_rows())), done=True)
        return result

    def _params(self):
        return list(self.proj.parameters()) + [self.scale, self.coef]

    def save_checkpoint(self, checkpoint_dir: str):
        (Path(checkpoint_dir) / "trial.json").write_text(json.dumps({"epoch": self.epoch, "best": self.best}))

    def load_checkpoint(self, checkpoint_dir: str):
        """Trials restart from scratch: an epoch is seconds."""


@register_method("meta-embeddings")
class MetaEmbeddings(Method):
    trainable = MetaEmbeddingTrainable
    description = "sentence meta-embeddings (UNSUP, SUP) and baselines (SSE, CONC, AVG, SVD, GCCA) of frozen sources"
    smoke = {"sets": "stsb", "epochs": 2, "seeds": "0", "max_train_samples": 256, "width": 16}
    cost_axes = ("meta",)

    @classmethod
    def add_arguments(cls, parser, defaults: dict) -> None:
        d = {"sources": "sentence-transformers/all-MiniLM-L6-v2,sentence-transformers/all-mpnet-base-v2", "sets": "papers", **defaults}
        what = parser.add_argument_group("meta-embeddings")
        what.add_argument("--sources", default=d["sources"], help="two or more comma-separated source models")
        what.add_argument("--meta", default=",".join(METAS), help=f"comma-separated: {', '.join(METAS)}")
        what.add_argument("--variant", default="paper,authors_code", help="UNSUP's loss: paper, authors_code, or both")
        what.add_argument("--sets", default=d["sets"], help="'papers' or comma-separated evaluation sets")
        what.add_argument("--epochs", type=int, default=20, help="cap on UNSUP/SUP epochs")
        what.add_argument("--patience", type=int, default=5, help="epochs without a better dev Pearson before stopping")
        what.add_argument("--meta-batch-size", dest="batch_size", type=int, default=512, help="pairs per update")
        what.add_argument("--meta-lr", dest="lr", type=float, default=1e-2, help="UNSUP learning rate (SUP: 1e-4)")
        what.add_argument("--width", type=int, default=1024, help="meta-embedding width per source")
        what.add_argument("--max-length", type=int, default=128, help="tokens per sentence when encoding sources")
        what.add_argument("--max-train-samples", type=int, default=None, help="STS-B train pairs used (default: all)")
        add_seeds_argument(what, "0,1,2")

    @classmethod
    def check(cls, args) -> None:
        sources = [s.strip() for s in str(args.sources).split(",") if s.strip()]
        if len(sources) < 2:
            raise SweepInputError(f"--sources needs two or more models to combine, got {len(sources)}; e.g. --sources A,B")
        parse_names(args.meta, "--meta", list(METAS))
        parse_names(args.variant, "--variant", list(VARIANTS))
        parse_int_list(args.seeds, "--seeds")
        for flag in ("epochs", "patience", "batch_size", "width", "max_length", "max_train_samples"):
            if getattr(args, flag) is not None and getattr(args, flag) <= 0:
                raise SweepInputError(f"--{flag.replace('_', '-')} must be a positive integer, got {getattr(args, flag)}")

    @classmethod
    def metrics(cls, args) -> MetricContract:
        from trainables.evaluate import PAPER_SETS

        text = str(args.sets)
        sets = PAPER_SETS if text.strip().lower() == "papers" else [n.strip() for n in text.split(",") if n.strip()]
        return MetricContract(primary="best_dev_pearson", report="stsb_spearman" if "stsb" in sets else "mean_spearman",
                              epoch="dev_pearson", mode="max", axes=("meta", "variant", "seed"), select=None, seed="seed",
                              columns=tuple(f"{name}_spearman" for name in sets), short={"seed": "s", "meta": "", "variant": ""})

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.data.stsb import load_stsb, stsb_checksums
        from trainables.encoders import resolve_model
        from trainables.evaluate import suite_sets
        from trainables.eval_sets import load_suite
        from trainables.stages import stage_root

        sets, _ = suite_sets(args.sets, args.data_dir)
        args.sets = ",".join(sets)
        sources = [s.strip() for s in str(args.sources).split(",") if s.strip()]
        root = stage_root(None, context.storage_path)
        if context.smoke_test:
            sources = smoke_sources(context.storage_path, args.data_dir)
        paths = []
        for source in sources:
            try:
                paths.append(resolve_model(source, context.mlflow_uri))
            except Exception as exc:
                raise SweepInputError(f"--sources: {source!r} cannot be loaded ({exc}); pass a hub id installed locally or a model folder") from None
        suite = load_suite(sets, args.data_dir)
        checksum = ",".join(f"{k}={v}" for k, v in sorted({**stsb_checksums(args.data_dir), **suite.checksums}.items()))
        specs = [token_embeddings.stage_spec(s, p, sets, checksum, args.max_length, 64, root, args.data_dir) for s, p in zip(sources, paths)]
        sentences = token_embeddings.stage_sentences({"sets": sets}, args.data_dir)
        rows = {s: i for i, s in enumerate(sentences)}
        splits = load_stsb(args.data_dir, ("train", "dev"))
        splits["train"] = splits["train"][:args.max_train_samples]
        train_dev = {k: ([rows[e.sentence1] for e in v], [rows[e.sentence2] for e in v], np.asarray([e.score for e in v]))
                     for k, v in splits.items()}
        metas = parse_names(args.meta, "--meta", list(METAS))
        variants = parse_names(args.variant, "--variant", list(VARIANTS))
        common = {"method": cls.name, "sources": ",".join(sources), "sets": ",".join(sets), "epochs": args.epochs,
                  "patience": args.patience, "batch_size": args.batch_size, "lr": args.lr, "width": args.width,
                  "stage_key": ",".join(spec["key"] for spec in specs), "upstream_run_id": None,
                  "_source_paths": json.dumps([str(root / spec["key"]) for spec in specs])}
        configs = []
        for seed in parse_int_list(args.seeds, "--seeds"):
            for meta in metas:
                if meta == "sse":
                    configs += [{**common, "meta": f"sse:{Path(s).name}", "source_index": i, "variant": "-", "seed": seed}
                                for i, s in enumerate(sources)]
                elif meta == "unsup":
                    configs += [{**common, "meta": meta, "variant": v, "seed": seed} for v in variants]
                else:
                    configs.append({**common, "meta": meta, "variant": "-", "seed": seed})
        costs = {(c["meta"],): TrialCost(memory_bytes=0.0, seconds=1.0, gpu=False) for c in configs}
        return MethodPlan(configs=configs, data=MetaData(suite, rows, train_dev["train"], train_dev["dev"]), costs=costs,
                          stages={spec["key"]: spec for spec in specs}, static_params={"stage_dir": str(root)},
                          checksums={"data": checksum})
