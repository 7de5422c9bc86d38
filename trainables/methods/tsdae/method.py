"""TSDAE (METHODS.md M6) and its unsupervised baselines on an unlabelled corpus: one method whose
grid is models x objectives (`--method none,tsdae,mlm,simcse,ct`) x seeds, and the `tsdae` upstream
stage of `--improvement tsdae` (trainables/methods/tmft/improvements.py), both trained by `Training` here.

Objectives (sentence-transformers 6.2 losses on a `SentenceTransformer` of Transformer + Pooling):
- `tsdae`: `DenoisingAutoEncoderLoss` with tied decoder weights; deletion noise p = 0.6 by
  `DenoisingAutoEncoderDataset.delete`'s rule (`noisy`, tested identical to theirs), drawn again
  every time a sentence is drawn (`--noise keep`: the v3 examples' variant, each word kept with
  probability 0.6);
- `simcse`: `MultipleNegativesRankingLoss`, scale 20 (temperature 0.05), a sentence paired with
  itself (dropout positives, in-batch negatives);
- `ct` (M5): `--ct-variant official` (default): `ContrastiveTensionLoss` (two independent copies,
  the dot product as logit, BCE), 16 pairs a batch in groups of 8 (the first pair of each group
  positive, as `ContrastiveTensionDataLoader`), dropout off, RMSprop (TF defaults: rho 0.9,
  epsilon 1e-7) with the piecewise lr 1e-5/8e-6/6e-6/4e-6/2e-6 at 500/1000/1500/2000 steps, no
  clipping. Left as sentence-transformers has it: the BCE is summed over the batch, not averaged;
  sentences are drawn with replacement each step rather than 1000 positives and 14000 negatives a
  500-update epoch; the second copy alone is evaluated and kept; max length is `--max-length`
  (official: 75). `--ct-variant in-batch`: `ContrastiveTensionLossInBatchNegatives` with the AdamW
  settings below;
- `mlm`: the DAPT stage's masking (15 %, 80/10/10) and MLM model (trainables/encoders/mlm.py);
- `none`: no training (zero epochs): the encoder as it is, evaluated the same way, one run per
  model; the contract's baseline (`objective=none`) that the report's gains are measured against.
Training: AdamW lr 3e-5 constant, weight decay 0, batch 8, clipping 1, `--steps` optimiser steps;
one trial "epoch" = `--eval-steps` steps followed by STS-B dev Spearman (best kept as `best/`, a
sentence-transformers folder); the evaluation suite (`--eval-sets`) is scored with the best weights
at the end. Each objective's optimizer, schedule, batch, clipping and dropout are trial params.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from trainables.core.errors import SweepInputError
from trainables.core.method import (
    Method,
    MethodPlan,
    MetricContract,
    TrialCost,
    parse_int_list,
    parse_names,
    register_method,
)
from trainables.encoders.loading import model_list
from trainables.evaluation.sets import parse_eval_sets
from trainables.stages.upstream import STAGES, StageKind
from trainables.training.precision import adamw
from trainables.training.trainable import EpochTrainable

OBJECTIVES = ("none", "tsdae", "mlm", "simcse", "ct")
CT_VARIANTS = ("official", "in-batch")
NOISES = ("delete", "keep")


def check_decoder(model_path, model: str) -> None:
    """Refuse an architecture that transformers has no causal LM (with cross-attention) for."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config = AutoConfig.from_pretrained(str(model_path))
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise SweepInputError(
            f"TSDAE: {model} is a {config.model_type!r} model, and transformers has no causal-LM decoder "
            f"with cross-attention for {config.model_type!r}; use a BERT/RoBERTa/ELECTRA-family model "
            "for --method tsdae, or --method mlm,simcse,ct for this one"
        )


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


CT_GROUP = 8  # M5: groups of 8 pairs, 1 positive and 7 negatives
CT_BATCH_PAIRS = 16  # M5: a batch is 16 pairs
CT_BOUNDARIES = (500, 1000, 1500, 2000)
CT_RATES = (1e-5, 8e-6, 6e-6, 4e-6, 2e-6)


def objective_settings(objective: str, args) -> dict:
    """What an objective trains with, recorded in every trial's params: the paper's AdamW settings,
    or for CT (official) M5's RMSprop schedule, 16 pairs a batch, no dropout and no clipping."""
    if objective == "none":
        return {"steps": 0, "epochs": 0, "optimizer": "none", "schedule": "none", "dropout": False}
    common = {
        "steps": args.steps,
        "epochs": math.ceil(args.steps / args.eval_steps),
        "batch_size": args.batch_size,
        "optimizer": "adamw",
        "schedule": "constant",
        "clip": 1.0,
        "dropout": True,
    }
    if objective == "ct" and args.ct_variant == "official":
        return {
            **common,
            "batch_size": CT_BATCH_PAIRS,
            "optimizer": "rmsprop",
            "schedule": "ct-piecewise",
            "clip": None,
            "dropout": False,
        }
    return common


def ct_rate(step: int) -> float:
    """M5's piecewise-constant learning rate at optimiser step `step` (0-based)."""
    return CT_RATES[sum(step >= b for b in CT_BOUNDARIES)]


class Training:
    """One objective's training loop on a sentence-transformers model: the trial (`TSDAETrainable`)
    and the `tsdae` upstream stage (`compute`) both run it. Sentences are drawn at random (with
    replacement, a seeded generator); `run(steps)` takes that many optimiser steps."""

    def __init__(self, config: dict, sentences: list[str], device):
        from sentence_transformers import losses

        self.config, self.sentences, self.device = config, sentences, device
        self.objective = config["objective"]
        seed = int(config["seed"])
        self.st = sentence_model(config["_model_path"], config["pooling"], int(config["max_length"])).to(device)
        self.generator = torch.Generator().manual_seed(seed)
        self.noise_rng = np.random.RandomState(seed)
        self.del_ratio = DELETE_RATIOS[config["noise"]]
        self.step_count = 0
        self.loss = self.optimizer = None
        if self.objective == "none":
            return
        if self.objective == "tsdae":
            self.loss = losses.DenoisingAutoEncoderLoss(self.st, tie_encoder_decoder=True)
        elif self.objective == "simcse":
            self.loss = losses.MultipleNegativesRankingLoss(self.st, scale=20.0)
        elif self.objective == "ct" and config["ct_variant"] == "official":
            self.loss = losses.ContrastiveTensionLoss(self.st)
        elif self.objective == "ct":
            self.loss = losses.ContrastiveTensionLossInBatchNegatives(self.st)
        else:
            self.loss = _MLMLoss(self.st, config["_model_path"], seed)
        self.loss.to(device)
        if config["optimizer"] == "rmsprop":  # TF2 Keras RMSprop defaults (rho 0.9, epsilon 1e-7), as the CT code
            self.optimizer = torch.optim.RMSprop(self.loss.parameters(), lr=CT_RATES[0], alpha=0.9, eps=1e-7)
        else:
            self.optimizer = adamw(list(self.loss.parameters()), float(config["lr"]), device, weight_decay=0.0)

    def _draw(self, n: int) -> list[str]:
        rows = torch.randint(len(self.sentences), (n,), generator=self.generator)
        return [self.sentences[i] for i in rows.tolist()]

    def features(self) -> list[dict]:
        """One batch's inputs to the loss."""
        batch = self._draw(int(self.config["batch_size"]))
        if self.objective == "tsdae":
            return [self._tokenize([noisy(s, self.del_ratio, self.noise_rng) for s in batch]), self._tokenize(batch)]
        if self.objective == "ct" and self.config["ct_variant"] == "official":
            # ContrastiveTensionDataLoader's rule: the first pair of every group of 8 is positive
            others = self._draw(len(batch))
            pairs = [s if i % CT_GROUP == 0 else o for i, (s, o) in enumerate(zip(batch, others))]
            return [self._tokenize(batch), self._tokenize(pairs)]
        if self.objective in ("simcse", "ct"):
            return [self._tokenize(batch), self._tokenize(batch)]
        return [self._tokenize(batch)]

    def _tokenize(self, texts: list[str]) -> dict:
        return {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in self.st.preprocess(texts).items()}

    def run(self, steps: int, progress=None) -> float:
        """`steps` optimiser steps; the mean training loss."""
        self.loss.train(bool(self.config["dropout"]))
        if self.objective == "tsdae":
            self.loss.decoder.eval()  # as sentence-transformers' trainer, which puts only the encoder in train mode
        clip = self.config.get("clip")
        total = torch.zeros((), device=self.device)
        for _ in range(steps):
            if self.config["schedule"] == "ct-piecewise":
                for group in self.optimizer.param_groups:
                    group["lr"] = ct_rate(self.step_count)
            loss = self.loss(self.features(), None)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(self.loss.parameters(), float(clip))
            self.optimizer.step()
            total += loss.detach()
            self.step_count += 1
            if progress is not None:
                progress.step()
        return float(total) / max(1, steps)

    def state_dict(self) -> dict:
        return {
            "model": self.loss.state_dict() if self.loss is not None else self.st.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "generator": self.generator.get_state(),
            "noise_rng": _rng_state(self.noise_rng),
            "steps": self.step_count,
        }

    def load_state_dict(self, state: dict) -> None:
        (self.loss if self.loss is not None else self.st).load_state_dict(state["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.noise_rng.set_state(_rng_state_back(state["noise_rng"]))
        self.step_count = int(state["steps"])


class TSDAETrainable(EpochTrainable):
    def build(self, config: dict, data) -> None:
        self.dev, self.suite = data.dev, data.suite
        self.training = Training(config, data.sentences, self.device)
        self.st = self.training.st
        self.best_weights = None

    def train_epoch(self, epoch: int) -> dict:
        config = self.trial_config
        steps = min(int(config["eval_steps"]), int(config["steps"]) - (epoch - 1) * int(config["eval_steps"]))
        return {"train_loss": self.training.run(steps)}

    def _scores(self, suite) -> dict:
        self.st.eval()
        embeddings = self.st.encode(suite.sentences, batch_size=64, convert_to_numpy=True)
        return suite.score(embeddings)

    def evaluate(self) -> dict:
        scores = self._scores(self.dev)
        return {"dev_spearman": scores["stsb_dev_spearman"], "dev_pearson": scores["stsb_dev_pearson"]}

    def remember_best(self) -> None:
        self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in self.st.state_dict().items()}

    def _with_best(self, action):
        latest = {k: v.detach().to("cpu", copy=True) for k, v in self.st.state_dict().items()}
        self.st.load_state_dict(self.best_weights)
        try:
            return action()
        finally:
            self.st.load_state_dict(latest)

    def save_best(self, target: Path) -> None:
        if self.best_weights is not None:
            self._with_best(lambda: self.st.save(str(target)))

    def load_best(self, source: Path) -> None:
        from sentence_transformers import SentenceTransformer

        self.best_weights = SentenceTransformer(str(source), device="cpu").state_dict()

    def final_metrics(self) -> dict:
        if self.suite is None or self.best_weights is None:
            return {}
        return self._with_best(lambda: self._scores(self.suite))

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.st.parameters())

    def method_state(self, checkpoint_dir: Path) -> dict:
        return self.training.state_dict()

    def load_method_state(self, state: dict, checkpoint_dir: Path) -> None:
        self.training.load_state_dict(state)


class _MLMLoss(torch.nn.Module):
    """The DAPT objective on the trial's encoder: an MLM model sharing the encoder's weights."""

    def __init__(self, st, model_path: str, seed: int):
        super().__init__()
        from transformers import DataCollatorForLanguageModeling

        from trainables.encoders.mlm import MLM_PROBABILITY, mlm_model

        self.mlm, _ = mlm_model(model_path, "auto", False, seed)
        encoder = st[0].auto_model
        setattr(self.mlm, self.mlm.base_model_prefix, encoder)
        self.mlm.tie_weights()
        self.collator = DataCollatorForLanguageModeling(
            st.tokenizer, mlm=True, mlm_probability=MLM_PROBABILITY, seed=seed
        )

    def forward(self, features: list[dict], labels=None):
        ids = features[0]["input_ids"]
        batch = self.collator(
            [
                {"input_ids": row[mask.bool()].tolist()}
                for row, mask in zip(ids.cpu(), features[0]["attention_mask"].cpu())
            ]
        )
        batch = {k: v.to(ids.device) for k, v in batch.items() if k in ("input_ids", "attention_mask", "labels")}
        return self.mlm(**batch).loss


class TSDAEData:
    def __init__(self, sentences, dev, suite):
        self.sentences, self.dev, self.suite = sentences, dev, suite


def read_corpus(corpus: str, data_dir, max_sentences: int | None) -> tuple[list[str], str, str]:
    """(sentences, corpus name, checksum) of --corpus: 'wiki' (the Wikipedia sample) or a text file."""
    from trainables.data._io import file_checksum
    from trainables.data.sentences import dapt_corpus, dapt_corpus_checksum, read_sentence_lines
    from trainables.training.tokenized import subset

    if corpus == "wiki":
        sentences, name = dapt_corpus(data_dir, ("wiki",))
        checksum = dapt_corpus_checksum(data_dir, ("wiki",))
    else:
        sentences, name, checksum = read_sentence_lines(corpus), Path(corpus).name, file_checksum(Path(corpus))
    return subset(sentences, max_sentences), name, checksum


def check_corpus(corpus: str, flag: str = "--corpus") -> None:
    if corpus != "wiki" and not Path(corpus).is_file():
        raise SweepInputError(f"{flag} {corpus}: no such file; pass a text file (one sentence a line) or 'wiki'")


def trial_cost(
    model_path: str, settings: dict, args, sentences: list[str], dev_pairs: int, suite_pairs: int
) -> TrialCost:
    """The encoder cost model (trainables/encoders/cost.py) of one trial: the whole encoder trained
    for `steps` batches of the corpus's mean sentence length (TSDAE: the noisy input, ~40 % of
    the words, plus a decoder pass of the clean sentence; CT official: two models), dev every
    --eval-steps, the suite once."""
    from transformers import AutoConfig

    from trainables.encoders import cost as encoder_cost

    config = AutoConfig.from_pretrained(model_path)
    sample = sentences[:2000]
    words = sum(len(s.split()) for s in sample) / max(1, len(sample))
    tokens = min(int(args.max_length), math.ceil(1.3 * words) + 2)  # ~1.3 WordPiece tokens a word, [CLS] [SEP]
    batch = int(settings.get("batch_size", args.batch_size))
    shape = encoder_cost.shape_from_config(config, config.num_hidden_layers, batch, tokens)
    passes = {"tsdae": 0.4 + 1.5, "ct": 2.0, "simcse": 2.0}.get(
        settings.get("objective", ""), 1.0
    )  # decoder: + cross-attention
    steps, epochs = int(settings["steps"]), int(settings["epochs"])
    train_tokens = int(passes * batch * tokens * steps / max(1, epochs))
    eval_tokens = 2 * tokens * (dev_pairs + suite_pairs / max(1, epochs))
    eval_batches = math.ceil(2 * (dev_pairs + suite_pairs / max(1, epochs)) / 64)
    memory = encoder_cost.trial_memory_bytes(shape) * (2 if settings.get("objective") in ("tsdae", "ct") else 1)
    seconds = encoder_cost.trial_seconds(
        shape,
        train_tokens,
        int(eval_tokens),
        epochs,
        args.gpu_tflops,
        train_steps=math.ceil(passes * steps / max(1, epochs)),
        eval_batches=eval_batches,
    )
    return TrialCost(memory_bytes=memory, seconds=seconds)


@register_method("tsdae")
class TSDAE(Method):
    trainable = TSDAETrainable
    description = "TSDAE and its unsupervised baselines (MLM, SimCSE, CT) on an unlabelled corpus"
    smoke = {
        "steps": 4,
        "eval_steps": 2,
        "method": "none,tsdae,mlm,simcse,ct",
        "seeds": "0",
        "eval_sets": "none",
        "max_sentences": 64,
    }
    cost_axes = ("model", "objective")

    @classmethod
    def add_arguments(cls, parser, defaults: dict) -> None:
        d = {"models": "sentence-transformers/all-MiniLM-L6-v2", **defaults}
        what = parser.add_argument_group("what to sweep")
        what.add_argument("--models", default=d["models"], help="comma-separated hub ids or local model directories")
        what.add_argument(
            "--method",
            default="tsdae",
            help=f"comma-separated objectives: {', '.join(OBJECTIVES)} (none: the untrained encoder, one run "
            "per model)",
        )
        what.add_argument("--seeds", default="0", help="comma-separated seeds, or a range like 0-2")
        what.add_argument(
            "--corpus", default="wiki", help="'wiki' (the Wikipedia sample) or a text file, one sentence per line"
        )
        what.add_argument("--max-sentences", type=int, default=None, help="use the first N sentences of the corpus")
        train = parser.add_argument_group("training")
        add_training_flags(train, "")
        train.add_argument(
            "--eval-steps", type=int, default=1_000, help="STS-B dev evaluation every N steps (best kept)"
        )
        train.add_argument(
            "--ct-variant",
            default="official",
            choices=CT_VARIANTS,
            help="official: M5's two copies, 16 pairs in groups of 8 (1 positive), dot-product BCE, RMSprop "
            "piecewise lr, dropout off; in-batch: ContrastiveTensionLossInBatchNegatives with the AdamW settings",
        )
        train.add_argument(
            "--eval-sets", default="stsb,sickr", help="sets scored with the best-dev weights at the end, or 'none'"
        )

    @classmethod
    def check(cls, args) -> None:
        parse_names(args.method, "--method", list(OBJECTIVES))
        parse_int_list(args.seeds, "--seeds")
        check_training_flags(vars(args), "")
        if args.eval_steps <= 0:
            raise SweepInputError(f"--eval-steps must be a positive integer, got {args.eval_steps}")
        if args.max_sentences is not None and args.max_sentences <= 0:
            raise SweepInputError(f"--max-sentences must be a positive integer, got {args.max_sentences}")
        check_corpus(args.corpus)

    @classmethod
    def metrics(cls, args) -> MetricContract:

        return MetricContract(
            primary="best_dev_spearman",
            report="best_dev_spearman",
            epoch="dev_spearman",
            axes=("corpus", "model", "objective", "seed"),
            select=None,
            seed="seed",
            label="Spearman",
            columns=tuple(f"{n}_spearman" for n in parse_eval_sets(args.eval_sets)),
            short={"seed": "s", "objective": "", "corpus": ""},
            reference=("objective", "none"),
            reference_by=("corpus", "model"),
        )

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.encoders.loading import resolve_model
        from trainables.evaluation.sets import load_suite

        objectives = parse_names(args.method, "--method", list(OBJECTIVES))
        seeds = parse_int_list(args.seeds, "--seeds")
        models = model_list(args, context)
        paths = {m: str(resolve_model(m, context.mlflow_uri)) for m in models}
        if "tsdae" in objectives:
            for model in models:
                check_decoder(paths[model], model)
        sentences, corpus, _ = read_corpus(args.corpus, args.data_dir, args.max_sentences)
        sets = parse_eval_sets(args.eval_sets)
        dev = load_suite(["stsb_dev"], args.data_dir)
        suite = load_suite(sets, args.data_dir) if sets else None
        base = {
            "method": cls.name,
            "corpus": corpus,
            "eval_steps": args.eval_steps,
            "lr": args.lr,
            "weight_decay": 0.0,
            "batch_size": args.batch_size,
            "clip": 1.0,
            "pooling": args.pooling,
            "noise": args.noise,
            "delete_ratio": DELETE_RATIOS[args.noise],
            "tied_decoder": True,
            "max_length": args.max_length,
            "max_sentences": args.max_sentences,
            "ct_variant": args.ct_variant,
        }
        configs, costs = [], {}
        for m in models:
            for o in objectives:
                settings = objective_settings(o, args)
                # the untrained encoder is the same whatever the seed: one run per model
                for s in seeds[:1] if o == "none" else seeds:
                    configs.append({**base, **settings, "model": m, "objective": o, "seed": s, "_model_path": paths[m]})
                costs[(m, o)] = trial_cost(
                    paths[m],
                    {**settings, "objective": o},
                    args,
                    sentences,
                    len(dev.sentences) // 2,
                    len(suite.sentences) // 2 if suite else 0,
                )
        return MethodPlan(
            configs=configs,
            data=TSDAEData(sentences, dev, suite),
            costs=costs,
            checksums={f"eval_{k}": v for k, v in dev.checksums.items()},
            static_params={"corpus": corpus},
        )


def add_training_flags(group, prefix: str) -> None:
    """TSDAE's training flags (the paper's defaults), as `--steps` etc. or `--tsdae-steps` etc."""
    group.add_argument(f"--{prefix}steps", type=int, default=10_000, help="optimiser steps (the step budget)")
    group.add_argument(f"--{prefix}batch-size", type=int, default=8)
    group.add_argument(f"--{prefix}lr", type=float, default=3e-5, help="AdamW, constant, weight decay 0, clipping 1")
    group.add_argument(f"--{prefix}pooling", default="cls", choices=("cls", "mean"))
    group.add_argument(
        f"--{prefix}noise",
        default="delete",
        choices=NOISES,
        help="delete: the paper's deletion p=0.6 drawn every time; keep: the ST v3 examples' keep-0.6 variant",
    )
    group.add_argument(f"--{prefix}max-length", type=int, default=128)


def check_training_flags(a: dict, prefix: str) -> None:
    key = prefix.replace("-", "_")
    for flag in ("steps", "batch_size", "max_length"):
        if a[key + flag] <= 0:
            raise SweepInputError(f"--{prefix}{flag.replace('_', '-')} must be a positive integer, got {a[key + flag]}")
    if not a[key + "lr"] > 0:
        raise SweepInputError(f"--{prefix}lr must be positive, got {a[key + 'lr']}")


# --- the `tsdae` upstream stage (trainables/stages/upstream.py): TSDAE once per model, then TMFT ----------
def stage_config(
    *,
    corpus: str,
    steps: int,
    batch_size: int,
    lr: float,
    pooling: str,
    noise: str,
    max_length: int,
    max_sentences: int | None,
) -> dict:
    """The stage config that, with the model and the corpus checksum, keys a TSDAE stage."""
    return {
        "stage": "tsdae",
        "objective": "tsdae",
        "corpus": corpus,
        "steps": int(steps),
        "batch_size": int(batch_size),
        "lr": float(lr),
        "pooling": pooling,
        "noise": noise,
        "max_length": int(max_length),
        "max_sentences": max_sentences,
        "seed": 0,
        "optimizer": "adamw",
        "schedule": "constant",
        "clip": 1.0,
        "dropout": True,
    }


def compute(spec: dict, out_dir: Path) -> dict:
    """Run the TSDAE stage of `spec` for its step budget (the last weights are kept, as for DAPT)
    and write `out_dir/encoder/` (a transformers model folder TMFT starts from)."""
    import time

    from trainables.stages.progress import StageProgress
    from trainables.training.trainable import pick_device, seed_everything

    started = time.perf_counter()
    config = spec["config"]
    seed_everything(int(config["seed"]))
    sentences, corpus, _ = read_corpus(config["corpus"], spec["data_dir"], config.get("max_sentences"))
    device = pick_device()
    training = Training({**config, "_model_path": spec["model_path"]}, sentences, device)
    progress = StageProgress(spec, int(config["steps"]))
    loss = training.run(int(config["steps"]), progress)
    progress.finish()
    encoder_dir = Path(out_dir) / "encoder"
    training.st[0].auto_model.save_pretrained(str(encoder_dir))
    training.st.tokenizer.save_pretrained(str(encoder_dir))
    return {
        "history": [{"epoch": 1, "train_loss": loss}],
        "final": {"wall_time_s": time.perf_counter() - started, "final_train_loss": loss},
        "sentences": len(sentences),
        "corpus": corpus,
        "optimizer_steps": int(config["steps"]),
        "device": str(device),
    }


@STAGES.register("tsdae")
class TsdaeStage(StageKind):
    """TSDAE once per model, for TMFT trials that start from it (`--improvement tsdae`): besides the
    stage itself, what that method asks of it, all under `--tsdae-*` flags."""

    downstream, task = "tsdae+tmft", "denoising"
    compute = staticmethod(compute)

    @staticmethod
    def params(config: dict) -> dict:
        return {"tsdae_corpus": config["corpus"], "tsdae_steps": config["steps"]}

    @staticmethod
    def add_arguments(group) -> None:
        add_training_flags(group, "tsdae-")
        group.add_argument(
            "--tsdae-corpus",
            default="wiki",
            help="TSDAE stage: 'wiki' (the Wikipedia sample) or a text file, one sentence a line",
        )
        group.add_argument(
            "--tsdae-max-sentences", type=int, default=None, help="TSDAE stage: the first N sentences of the corpus"
        )

    @staticmethod
    def check(a: dict) -> None:
        check_training_flags(a, "tsdae-")
        check_corpus(a["tsdae_corpus"], "--tsdae-corpus")

    @staticmethod
    def prepare(a: dict, paths: dict, data_dir) -> str:
        """The corpus checksum, once every model (id -> folder) is known to have a decoder."""
        _, _, checksum = read_corpus(a["tsdae_corpus"], data_dir, a["tsdae_max_sentences"])
        for model, path in paths.items():
            check_decoder(path, model)
        return checksum

    @staticmethod
    def config(a: dict) -> dict:
        return stage_config(
            corpus=a["tsdae_corpus"],
            steps=a["tsdae_steps"],
            batch_size=a["tsdae_batch_size"],
            lr=a["tsdae_lr"],
            pooling=a["tsdae_pooling"],
            noise=a["tsdae_noise"],
            max_length=a["tsdae_max_length"],
            max_sentences=a["tsdae_max_sentences"],
        )

    @staticmethod
    def downstream_params(a: dict) -> dict:
        """The stage settings recorded in every downstream trial's params."""
        return {
            f"tsdae_{k}": a[f"tsdae_{k}"]
            for k in ("corpus", "steps", "batch_size", "lr", "pooling", "noise", "max_length", "max_sentences")
        }
