"""TSDAE (METHODS.md M6) and its unsupervised baselines on an unlabelled corpus: one method whose
grid is models x objectives (`--method tsdae,mlm,simcse,ct`) x seeds.

Objectives (sentence-transformers 6.2 losses on a `SentenceTransformer` of Transformer + Pooling):
- `tsdae`: `DenoisingAutoEncoderLoss` with tied decoder weights; deletion noise p = 0.6 by
  `DenoisingAutoEncoderDataset.delete`'s rule, drawn again every time a sentence is drawn (`--noise
  keep`: the v3 examples' variant, each word kept with probability 0.6);
- `simcse`: `MultipleNegativesRankingLoss`, scale 20 (temperature 0.05), a sentence paired with
  itself (dropout positives, in-batch negatives);
- `ct`: `ContrastiveTensionLossInBatchNegatives` (M5's in-batch variant);
- `mlm`: the DAPT stage's masking (15 %, 80/10/10) and MLM model (trainables/dapt.py).
Training: AdamW lr 3e-5 constant, weight decay 0, batch 8, clipping 1, `--steps` optimiser steps;
one trial "epoch" = `--eval-steps` steps followed by STS-B dev Spearman (best kept as `best/`, a
sentence-transformers folder); the evaluation suite (`--eval-sets`) is scored with the best weights
at the end.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from trainables.base import EpochTrainable
from trainables.errors import SweepInputError
from trainables.method import (Method, MethodPlan, MetricContract, TrialCost, model_list, parse_int_list, parse_names,
                               register_method)

OBJECTIVES = ("tsdae", "mlm", "simcse", "ct")
NOISES = ("delete", "keep")


def check_decoder(model_path, model: str) -> None:
    """Refuse an architecture that transformers has no causal LM (with cross-attention) for."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config = AutoConfig.from_pretrained(str(model_path))
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise SweepInputError(f"TSDAE: {model} is a {config.model_type!r} model, and transformers has no causal-LM decoder "
                              f"with cross-attention for {config.model_type!r}; use a BERT/RoBERTa/ELECTRA-family model "
                              "for --method tsdae, or --method mlm,simcse,ct for this one")


def sentence_model(model_path: str, pooling: str, max_length: int):
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(str(model_path), max_seq_length=max_length)
    pool = models.Pooling(transformer.get_embedding_dimension(), pooling)
    return SentenceTransformer(modules=[transformer, pool])


DELETE_RATIOS = {"delete": 0.6, "keep": 0.4}


def noisy(sentence: str, del_ratio: float, rng: np.random.RandomState) -> str:
    """`DenoisingAutoEncoderDataset.delete` (NLTK words, each dropped with `del_ratio`, one kept if
    none is, Treebank detokenised), drawing from `rng` where theirs draws from numpy's global state.
    Words come from NLTK's Treebank tokenizer without its punkt sentence splitter (`preserve_line`),
    whose data cannot be installed offline; on one sentence the two agree (tests/test_tsdae.py)."""
    from nltk import word_tokenize
    from nltk.tokenize.treebank import TreebankWordDetokenizer

    words = word_tokenize(sentence, preserve_line=True)
    n = len(words)
    if n == 0:
        return sentence
    keep = rng.rand(n) > del_ratio
    if sum(keep) == 0:
        keep[rng.choice(n)] = True
    return TreebankWordDetokenizer().detokenize(np.array(words)[keep])


def _rng_state(rng: np.random.RandomState) -> list:
    """The state as plain lists (a checkpoint is read back with torch.load(weights_only=True))."""
    name, keys, pos, has_gauss, gauss = rng.get_state()
    return [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)]


def _rng_state_back(state: list) -> tuple:
    name, keys, pos, has_gauss, gauss = state
    return name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss


class TSDAETrainable(EpochTrainable):
    def build(self, config: dict, data) -> None:
        from sentence_transformers import losses

        self.sentences, self.dev = data.sentences, data.dev
        self.suite = data.suite
        objective = config["objective"]
        self.st = sentence_model(config["_model_path"], config["pooling"], int(config["max_length"]))
        self.st.to(self.device)
        if objective == "tsdae":
            self.loss = losses.DenoisingAutoEncoderLoss(self.st, tie_encoder_decoder=True)
        elif objective == "simcse":
            self.loss = losses.MultipleNegativesRankingLoss(self.st, scale=20.0)
        elif objective == "ct":
            self.loss = losses.ContrastiveTensionLossInBatchNegatives(self.st)
        else:
            self.loss = _MLMLoss(self.st, config["_model_path"], int(config["seed"]))
        self.loss.to(self.device)
        self.optimizer = torch.optim.AdamW(self.loss.parameters(), lr=float(config["lr"]), weight_decay=0.0)
        self.generator = torch.Generator().manual_seed(int(config["seed"]))
        self.best_weights = None
        self.del_ratio = DELETE_RATIOS[config["noise"]]
        self.noise_rng = np.random.RandomState(int(config["seed"]))

    def _batch(self) -> list[str]:
        rows = torch.randint(len(self.sentences), (int(self.trial_config["batch_size"]),), generator=self.generator)
        return [self.sentences[i] for i in rows.tolist()]

    def train_epoch(self, epoch: int) -> dict:
        config = self.trial_config
        steps = min(int(config["eval_steps"]), int(config["steps"]) - (epoch - 1) * int(config["eval_steps"]))
        self.st.train()
        total = 0.0
        for _ in range(steps):
            batch = self._batch()
            if config["objective"] == "tsdae":
                features = [self._tokenize([noisy(s, self.del_ratio, self.noise_rng) for s in batch]), self._tokenize(batch)]
            elif config["objective"] in ("simcse", "ct"):
                features = [self._tokenize(batch), self._tokenize(batch)]
            else:
                features = [self._tokenize(batch)]
            loss = self.loss(features, None)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.loss.parameters(), 1.0)
            self.optimizer.step()
            total += float(loss.detach())
        return {"train_loss": total / max(1, steps)}

    def _tokenize(self, texts: list[str]) -> dict:
        return {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in self.st.tokenize(texts).items()}

    def _scores(self, suite) -> dict:
        self.st.eval()
        embeddings = self.st.encode(suite.sentences, batch_size=64, convert_to_numpy=True)
        return suite.score(embeddings)

    def evaluate(self) -> dict:
        scores = self._scores(self.dev)
        return {"dev_spearman": scores["stsb_dev_spearman"], "dev_pearson": scores["stsb_dev_pearson"]}

    def remember_best(self) -> None:
        self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in self.st.state_dict().items()}

    def save_best(self, target: Path) -> None:
        if self.best_weights is None:
            return
        latest = self.st.state_dict()
        latest = {k: v.detach().to("cpu", copy=True) for k, v in latest.items()}
        self.st.load_state_dict(self.best_weights)
        self.st.save(str(target))
        self.st.load_state_dict(latest)

    def load_best(self, source: Path) -> None:
        from sentence_transformers import SentenceTransformer

        self.best_weights = SentenceTransformer(str(source), device="cpu").state_dict()

    def final_metrics(self) -> dict:
        if self.suite is None or self.best_weights is None:
            return {}
        latest = {k: v.detach().to("cpu", copy=True) for k, v in self.st.state_dict().items()}
        self.st.load_state_dict(self.best_weights)
        out = self._scores(self.suite)
        self.st.load_state_dict(latest)
        return out

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.st.parameters())

    def method_state(self, checkpoint_dir: Path) -> dict:
        return {"model": self.loss.state_dict(), "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state(), "noise_rng": _rng_state(self.noise_rng)}

    def load_method_state(self, state: dict, checkpoint_dir: Path) -> None:
        self.loss.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.noise_rng.set_state(_rng_state_back(state["noise_rng"]))


class _MLMLoss(torch.nn.Module):
    """The DAPT objective on the trial's encoder: an MLM model sharing the encoder's weights."""

    def __init__(self, st, model_path: str, seed: int):
        super().__init__()
        from transformers import DataCollatorForLanguageModeling

        from trainables.dapt import STAGE_DEFAULTS, mlm_model

        self.mlm, _ = mlm_model(model_path, "auto", False, seed)
        encoder = st[0].auto_model
        setattr(self.mlm, self.mlm.base_model_prefix, encoder)
        self.mlm.tie_weights()
        self.collator = DataCollatorForLanguageModeling(
            st.tokenizer, mlm=True, mlm_probability=STAGE_DEFAULTS["mlm_probability"], seed=seed)

    def forward(self, features: list[dict], labels=None):
        ids = features[0]["input_ids"]
        batch = self.collator([{"input_ids": row[mask.bool()].tolist()} for row, mask
                               in zip(ids.cpu(), features[0]["attention_mask"].cpu())])
        batch = {k: v.to(ids.device) for k, v in batch.items() if k in ("input_ids", "attention_mask", "labels")}
        return self.mlm(**batch).loss


class TSDAEData:
    def __init__(self, sentences, dev, suite):
        self.sentences, self.dev, self.suite = sentences, dev, suite


@register_method("tsdae")
class TSDAE(Method):
    trainable = TSDAETrainable
    description = "TSDAE and its unsupervised baselines (MLM, SimCSE, CT) on an unlabelled corpus"
    smoke = {"steps": 4, "eval_steps": 2, "method": "tsdae,mlm,simcse,ct", "seeds": "0", "eval_sets": "none",
             "max_sentences": 64}
    cost_axes = ("model", "objective")

    @classmethod
    def add_arguments(cls, parser, defaults: dict) -> None:
        d = {"models": "sentence-transformers/all-MiniLM-L6-v2", **defaults}
        what = parser.add_argument_group("what to sweep")
        what.add_argument("--models", default=d["models"], help="comma-separated hub ids or local model directories")
        what.add_argument("--method", default="tsdae", help=f"comma-separated objectives: {', '.join(OBJECTIVES)}")
        what.add_argument("--seeds", default="0", help="comma-separated seeds, or a range like 0-2")
        what.add_argument("--corpus", default="wiki", help="'wiki' (the Wikipedia sample) or a text file, one sentence per line")
        what.add_argument("--max-sentences", type=int, default=None, help="use the first N sentences of the corpus")
        train = parser.add_argument_group("training")
        train.add_argument("--steps", type=int, default=10_000, help="optimiser steps (batch 8)")
        train.add_argument("--eval-steps", type=int, default=1_000, help="STS-B dev evaluation every N steps (best kept)")
        train.add_argument("--batch-size", type=int, default=8)
        train.add_argument("--lr", type=float, default=3e-5, help="AdamW, constant, weight decay 0, clipping 1")
        train.add_argument("--pooling", default="cls", choices=("cls", "mean"))
        train.add_argument("--noise", default="delete", choices=NOISES,
                           help="delete: the paper's deletion p=0.6 drawn every time; keep: the ST v3 examples' keep-0.6 variant")
        train.add_argument("--max-length", type=int, default=128)
        train.add_argument("--eval-sets", default="stsb,sickr", help="sets scored with the best-dev weights at the end, or 'none'")

    @classmethod
    def check(cls, args) -> None:
        parse_names(args.method, "--method", list(OBJECTIVES))
        parse_int_list(args.seeds, "--seeds")
        for flag in ("steps", "eval_steps", "batch_size", "max_length"):
            if getattr(args, flag) <= 0:
                raise SweepInputError(f"--{flag.replace('_', '-')} must be a positive integer, got {getattr(args, flag)}")
        if not args.lr > 0:
            raise SweepInputError(f"--lr must be positive, got {args.lr}")
        if args.corpus != "wiki" and not Path(args.corpus).is_file():
            raise SweepInputError(f"--corpus {args.corpus}: no such file; pass a text file (one sentence a line) or 'wiki'")

    @classmethod
    def metrics(cls, args) -> MetricContract:
        from trainables.tmft import parse_eval_sets

        return MetricContract(primary="best_dev_spearman", report="best_dev_spearman", epoch="dev_spearman",
                              axes=("model", "objective", "seed"), select=None, seed="seed", label="Spearman",
                              columns=tuple(f"{n}_spearman" for n in parse_eval_sets(args.eval_sets)),
                              short={"seed": "s", "objective": ""})

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.data.sentences import dapt_corpus, read_sentence_lines
        from trainables.encoders import resolve_model
        from trainables.eval_sets import load_suite
        from trainables.tmft import parse_eval_sets
        from trainables.tokenized import subset

        objectives = parse_names(args.method, "--method", list(OBJECTIVES))
        seeds = parse_int_list(args.seeds, "--seeds")
        models = model_list(args, context)
        paths = {m: str(resolve_model(m, context.mlflow_uri)) for m in models}
        if "tsdae" in objectives:
            for model in models:
                check_decoder(paths[model], model)
        if args.corpus == "wiki":
            sentences, corpus = dapt_corpus(args.data_dir, ("wiki",))
        else:
            sentences, corpus = read_sentence_lines(args.corpus), Path(args.corpus).name
        sentences = subset(sentences, args.max_sentences)
        sets = parse_eval_sets(args.eval_sets)
        dev = load_suite(["stsb_dev"], args.data_dir)
        suite = load_suite(sets, args.data_dir) if sets else None
        epochs = math.ceil(args.steps / args.eval_steps)
        base = {"method": cls.name, "corpus": corpus, "steps": args.steps, "eval_steps": args.eval_steps, "epochs": epochs,
                "batch_size": args.batch_size, "lr": args.lr, "weight_decay": 0.0, "clip": 1.0, "schedule": "constant",
                "pooling": args.pooling, "noise": args.noise, "delete_ratio": DELETE_RATIOS[args.noise], "tied_decoder": True,
                "max_length": args.max_length, "max_sentences": args.max_sentences}
        configs = [{**base, "model": m, "objective": o, "seed": s, "_model_path": paths[m]}
                   for m in models for o in objectives for s in seeds]
        costs = {(m, o): TrialCost(memory_bytes=2e9, seconds=0.05 * args.steps) for m in models for o in objectives}
        return MethodPlan(configs=configs, data=TSDAEData(sentences, dev, suite), costs=costs,
                          checksums={f"eval_{k}": v for k, v in dev.checksums.items()}, static_params={"corpus": corpus})
