"""SED: sentence ensemble distillation (the SED paper; METHODS.md M5). A student is trained so
that its sentence embedding approaches, by mean squared error, the mean of an ensemble of
teachers' embeddings of the same sentence; only the student is updated.

Teachers (`--teachers`): models, folders or `runs:/<run id>` of one embedding size, or
`sweep:<sweep name or parent run id>[:layer=l]`, the best-dev checkpoints of a finished sweep's
trials (e.g. the seeds of one TMFT layer, or Contrastive Tension models). Student (`--student`):
any encoder of the teachers' embedding size. Corpus (`--corpus`): `wiki` (the Wikipedia sample
in the data folder) or a text file, one sentence a line.

Targets stage (kind `sed-targets`, in the stage store like DAPT's): the ensemble's mean embedding
of every corpus sentence, stored in fp16 (`targets.npy`), and each teacher's and the ensemble's
embeddings of the evaluation suite's and STS-B dev's sentences (`eval_teacher<i>.npy`,
`eval_ensemble.npy`), for the stability table. Keyed by the teachers' weights, the poolings, the corpus and the
suite: one
computation serves every student seed and every later sweep; every student run links to it
(`upstream_run_id`).

Pooling (the paper: mean pooling of the final layer during distillation, of the mean of the two
final layers when evaluating): `--train-pool-layers k` for targets and student in training,
`--eval-pool-layers k` for every evaluation (teachers, ensemble, students), k = 1 or 2.

The paper's printed text lost its distillation numbers (batch size, learning rate, warm-up share,
ensemble size, sentence count); these choices are flags recorded in every run: Adam with
decoupled weight decay 0 (AdamW, weight decay 0 = Adam), lr 2e-5, batch 32, linear warm-up over
10% of the steps then linear decay, gradient clipping 1.0, 1 epoch over the corpus, STS-B dev
Spearman after every epoch with the best epoch kept (the paper's early stopping).

Grid: one trial per teacher (`member` teacher, `replica` its index), one for the ensemble, and one
per student seed (`member` student, `replica` the seed); teacher and ensemble trials only score
the stage's cached embeddings. Metrics: `dev_spearman` per epoch, `best_dev_spearman`, and at the
end, for the best-dev weights, every evaluation set's `<set>_spearman`, `mean_spearman` over them
and `test_spearman_at_best_dev` (STS-B test). The report's table of this contract (member x
mean, std and max over replicas) is the paper's stability table.
"""

from __future__ import annotations

import hashlib
import math
import time
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
from trainables.stages.upstream import STAGES, StageKind
from trainables.training.trainable import EpochTrainable

MEMBERS = ("teacher", "ensemble", "student")
DEFAULT_SETS = "sts12,sts13,sts14,stsb,sickr"
DEV_SET = "stsb_dev"
TARGETS_FILE = "targets.npy"
SWEEP_PREFIX = "sweep:"


# --- teachers, corpus --------------------------------------------------------------------------
def resolve_teachers(spec: str, mlflow_uri: str) -> list[tuple[str, Path]]:
    """(label, local model folder) of every teacher of `--teachers`."""
    from trainables.encoders.loading import resolve_model

    spec = str(spec).strip()
    if spec.startswith(SWEEP_PREFIX):
        return _sweep_teachers(spec, mlflow_uri)
    names = parse_names(spec, "--teachers")
    if len(names) < 2:
        raise SweepInputError(f"--teachers {spec!r}: an ensemble needs at least two teachers")
    return [(name, resolve_model(name, mlflow_uri)) for name in names]


def _sweep_teachers(spec: str, mlflow_uri: str) -> list[tuple[str, Path]]:
    from mlflow import MlflowClient

    from trainables.core.schema import TAG_CHECKPOINT, TAG_PARENT, TAG_ROLE, TAG_SWEEP
    from trainables.encoders.run_refs import resolve_run

    body = spec[len(SWEEP_PREFIX) :]
    sweep, _, option = body.partition(":")
    layer = None
    if option:
        key, _, value = option.partition("=")
        if key != "layer" or not value.strip().isdigit():
            raise SweepInputError(f"--teachers {spec!r}: after the sweep, only :layer=<l> is understood")
        layer = value.strip()
    client = MlflowClient(tracking_uri=mlflow_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    parents = (
        [
            r.info.run_id
            for r in client.search_runs(experiments, f"tags.`{TAG_SWEEP}` = '{sweep}'")
            if r.data.tags.get(TAG_ROLE) == "sweep"
        ]
        if experiments
        else []
    )
    if not parents:
        try:
            parents = [client.get_run(sweep).info.run_id]
        except Exception:
            raise SweepInputError(
                f"--teachers {spec!r}: no sweep named {sweep!r} (nor a parent run with that id) in the "
                f"MLflow store {mlflow_uri}; pass --mlflow-uri of the sweep that trained them"
            ) from None
    runs = [
        r
        for parent in parents
        for r in client.search_runs(experiments, f"tags.`{TAG_PARENT}` = '{parent}'")
        if r.data.tags.get(TAG_ROLE) == "trial" and r.info.status == "FINISHED" and r.data.tags.get(TAG_CHECKPOINT)
    ]
    layers = sorted({r.data.params.get("layer") for r in runs} - {None}, key=int)
    if layer is not None:
        runs = [r for r in runs if r.data.params.get("layer") == layer]
    elif len(layers) > 1:
        raise SweepInputError(
            f"--teachers {spec!r}: the sweep's trials are at layers {', '.join(layers)}; "
            f"pick one, e.g. {spec}:layer={layers[-1]}"
        )
    if len(runs) < 2:
        raise SweepInputError(
            f"--teachers {spec!r}: {len(runs)} finished trial(s) with a checkpoint found; an ensemble "
            "needs at least two (e.g. the seeds of one layer)"
        )
    runs.sort(key=lambda r: (r.data.params.get("model", ""), int(r.data.params.get("seed", 0) or 0), r.info.run_id))
    return [
        (f"{r.info.run_name} (runs:/{r.info.run_id})", resolve_run(f"runs:/{r.info.run_id}", mlflow_uri)) for r in runs
    ]


def embedding_size(path) -> int:
    from trainables.encoders.loading import load_config

    return int(load_config(path).hidden_size)


def check_sizes(teachers: list[tuple[str, Path]], student: tuple[str, Path]) -> int:
    sizes = {label: embedding_size(path) for label, path in [*teachers, student]}
    if len(set(sizes.values())) > 1:
        listed = "; ".join(f"{label}: {size}" for label, size in sizes.items())
        raise SweepInputError(
            f"SED needs teachers and a student of one embedding size (the loss compares the vectors); "
            f"got {listed}. Pick teachers and a student of the same size."
        )
    return next(iter(sizes.values()))


def read_corpus(corpus: str, data_dir, max_sentences: int | None) -> tuple[list[str], str]:
    """(sentences, checksum): `wiki` or a text file, one sentence a line (blank lines skipped)."""
    from trainables.data.sentences import WIKI_FILE, read_sentence_lines
    from trainables.training.tokenized import subset

    if corpus == "wiki":
        sentences = read_sentence_lines(Path(data_dir) / WIKI_FILE)
    else:
        path = Path(corpus).expanduser()
        if not path.is_file():
            raise SweepInputError(
                f"--corpus {corpus!r}: no such file; pass a text file with one sentence a line, or 'wiki'"
            )
        sentences = [
            line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()
        ]
    if not sentences:
        raise SweepInputError(f"--corpus {corpus!r} holds no sentences")
    sentences = subset(sentences, max_sentences)
    return sentences, hashlib.sha256("\n".join(sentences).encode()).hexdigest()[:32]


def eval_sentences(suite, dev) -> list[str]:
    """The sentences teachers are scored on: the suite's, then STS-B dev's not among them."""
    known = set(suite.sentences)
    return [*suite.sentences, *(s for s in dev.sentences if s not in known)]


# --- pooling ----------------------------------------------------------------------------------
def pooled(model, input_ids, attention_mask, layers: int) -> torch.Tensor:
    """The mean over the last `layers` layers of the masked mean over tokens."""
    from trainables.encoders.loading import mean_pool

    output = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=layers > 1)
    states = output.hidden_states[-layers:] if layers > 1 else (output.last_hidden_state,)
    return torch.stack([mean_pool(state, attention_mask) for state in states]).mean(0)


def encode(
    model,
    tokenizer,
    sentences: list[str],
    layers: int,
    batch_size: int = 64,
    device="cpu",
    max_length: int | None = None,
    on_batch=None,
) -> np.ndarray:
    """float32 [n, hidden]: the mean over the last `layers` layers of their mean pooling, from one
    forward pass per batch (trainables/zero_shot.pooled_layers), rows in the order of `sentences`."""
    from trainables.encoders.loading import model_depth
    from trainables.evaluation.zero_shot import pooled_layers

    depth = model_depth(model.config)
    chosen = list(range(max(0, depth - layers + 1), depth + 1))
    pooled_by_layer = pooled_layers(
        model,
        tokenizer,
        sentences,
        chosen,
        ["mean"],
        batch_size=batch_size,
        max_length=max_length,
        device=device,
        on_batch=on_batch,
    )
    return np.mean([pooled_by_layer[(layer, "mean")] for layer in chosen], axis=0).astype(np.float32)


# --- the targets stage ------------------------------------------------------------------------
def stage_config(
    teachers: list[tuple[str, Path]],
    corpus: str,
    corpus_checksum: str,
    max_sentences: int | None,
    train_layers: int,
    eval_layers: int,
    sets: list[str],
    batch_size: int = 64,
) -> dict:
    from trainables.stages.store import model_fingerprint

    return {
        "stage": "sed-targets",
        "teachers": [f"{label}@{model_fingerprint(path)}" for label, path in teachers],
        "corpus": corpus,
        "corpus_checksum": corpus_checksum,
        "max_sentences": max_sentences,
        "train_pool_layers": int(train_layers),
        "eval_pool_layers": int(eval_layers),
        "sets": list(sets),
        "batch_size": int(batch_size),
    }


def compute(spec: dict, out_dir: Path) -> dict:
    """Targets and evaluation embeddings of the ensemble (see the module docstring)."""
    from transformers import AutoTokenizer

    from trainables.encoders.loading import load_pretrained
    from trainables.evaluation.sets import load_suite
    from trainables.stages.progress import StageProgress

    config = spec["config"]
    started = time.time()
    sentences, _ = read_corpus(spec["corpus_path"], spec["data_dir"], config["max_sentences"])
    suite, dev = load_suite(config["sets"], spec["data_dir"]), load_suite([DEV_SET], spec["data_dir"])
    scored = eval_sentences(suite, dev)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batch = int(config["batch_size"])
    steps = math.ceil(len(sentences) / batch) + math.ceil(len(scored) / batch)
    progress = StageProgress(spec, len(spec["teacher_paths"]) * steps)
    total, evals = None, []
    for index, path in enumerate(spec["teacher_paths"]):
        model = load_pretrained(path).to(device)
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        targets = encode(
            model, tokenizer, sentences, config["train_pool_layers"], batch, device, on_batch=progress.step
        )
        total = targets.astype(np.float64) if total is None else total + targets
        evals.append(
            encode(model, tokenizer, scored, config["eval_pool_layers"], batch, device, on_batch=progress.step)
        )
        np.save(Path(out_dir) / f"eval_teacher{index}.npy", evals[-1].astype(np.float16))
    progress.finish()
    np.save(Path(out_dir) / TARGETS_FILE, (total / len(spec["teacher_paths"])).astype(np.float16))
    np.save(Path(out_dir) / "eval_ensemble.npy", np.mean(evals, axis=0).astype(np.float16))
    return {
        "sentences": len(sentences),
        "teachers": len(evals),
        "device": str(device),
        "history": [],
        "final": {"encode_seconds": time.time() - started},
    }


# --- the trial ---------------------------------------------------------------------------------
@dataclass
class SEDData:
    """Shipped to every trial: the corpus tokenised by the student, the evaluation suite, and the
    STS-B dev set (scored every epoch)."""

    corpus_ids: list
    pad_id: int
    suite: object
    dev: object


class SEDTrainable(EpochTrainable):
    def build(self, config: dict, data: SEDData) -> None:
        self.member, self.data = config["member"], data
        self.stage = Path(config["_upstream_path"])
        self.eval_layers = int(config["eval_pool_layers"])
        self.best_weights = None
        if self.member != "student":
            self.epochs = 0
            name = "eval_ensemble.npy" if self.member == "ensemble" else f"eval_teacher{int(config['replica'])}.npy"
            self.cached = np.load(self.stage / name).astype(np.float32)
            return
        from transformers import AutoTokenizer, get_linear_schedule_with_warmup

        from trainables.encoders.loading import count_parameters, load_pretrained
        from trainables.training.precision import adamw, resolve

        self.precision = resolve(config.get("precision", "fp32"), self.device)
        self.precision.apply_matmul_settings()
        self.model = load_pretrained(config["_student_path"]).to(self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(config["_student_path"])
        self.targets = np.load(self.stage / TARGETS_FILE, mmap_mode="r")
        self.batch_size, self.train_layers = int(config["batch_size"]), int(config["train_pool_layers"])
        steps = max(1, self.epochs) * math.ceil(len(data.corpus_ids) / self.batch_size)
        self.optimizer = adamw(
            [p for p in self.model.parameters() if p.requires_grad], float(config["lr"]), self.device
        )
        self.scheduler = get_linear_schedule_with_warmup(
            self.optimizer, math.ceil(float(config["warmup_ratio"]) * steps), steps
        )
        self.params = count_parameters(self.model)

    def train_epoch(self, epoch: int) -> dict:
        from trainables.core.errors import TrialFailure
        from trainables.training.batches import pad
        from trainables.training.precision import to_device

        self.model.train()
        order = torch.randperm(
            len(self.data.corpus_ids),
            generator=torch.Generator().manual_seed(int(self.trial_config["seed"]) * 100_003 + epoch),
        ).tolist()
        total = torch.zeros((), device=self.device)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            ids, mask = pad([self.data.corpus_ids[i] for i in rows], self.data.pad_id)
            target = torch.from_numpy(np.asarray(self.targets[sorted(rows)], dtype=np.float32))
            target = to_device(target[np.argsort(np.argsort(rows))], self.device)
            with self.precision.autocast():
                student = pooled(
                    self.model, to_device(ids, self.device), to_device(mask, self.device), self.train_layers
                )
            loss = F.mse_loss(student.float(), target)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.scheduler.step()
            total += loss.detach() * len(rows)
        mean = float(total) / len(order)
        if not math.isfinite(mean):
            raise TrialFailure(f"distillation diverged: the mean loss of epoch {epoch} is {mean}; lower --lr")
        return {"train_loss": mean}

    def _scores(self, suite) -> dict:
        if self.member != "student":  # rows of the stage's evaluation sentences
            position = {s: i for i, s in enumerate(eval_sentences(self.data.suite, self.data.dev))}
            return suite.score(self.cached[[position[s] for s in suite.sentences]])
        with self.precision.autocast():
            embeddings = encode(self.model, self.tokenizer, suite.sentences, self.eval_layers, 64, self.device)
        return suite.score(embeddings)

    def evaluate(self) -> dict:
        scores = self._scores(self.data.dev)
        return {"dev_spearman": scores[f"{DEV_SET}_spearman"], "dev_pearson": scores[f"{DEV_SET}_pearson"]}

    def final_metrics(self) -> dict:
        if self.member == "student":
            latest = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
            self.model.load_state_dict(self.best_weights)
        scores = self._scores(self.data.suite)
        if self.member == "student":
            self.model.load_state_dict(latest)
        return {
            **scores,
            **({"test_spearman_at_best_dev": scores["stsb_spearman"]} if "stsb_spearman" in scores else {}),
        }

    def parameter_count(self) -> int:
        return getattr(self, "params", 0)

    def remember_best(self) -> None:
        if self.member == "student":
            self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def save_best(self, target: Path) -> None:
        from trainables.encoders.st_folder import write_sentence_transformer
        from trainables.training.pair_training import copy_tokenizer_files

        if self.member != "student" or self.best_weights is None:
            return
        self.model.save_pretrained(str(target), state_dict=self.best_weights)
        copy_tokenizer_files(self.trial_config["_student_path"], target)
        write_sentence_transformer(target, "mean")

    def load_best(self, source: Path) -> None:
        from safetensors.torch import load_file

        if self.member == "student":
            self.best_weights = load_file(str(source / "model.safetensors"))

    def method_state(self, checkpoint_dir: Path) -> dict:
        if self.member != "student":
            return {}
        self.model.save_pretrained(str(checkpoint_dir / "encoder"))
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_method_state(self, state: dict, checkpoint_dir: Path) -> None:
        from safetensors.torch import load_file

        if self.member != "student":
            return
        self.model.load_state_dict(load_file(str(checkpoint_dir / "encoder" / "model.safetensors")))
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


# --- the method --------------------------------------------------------------------------------
@register_method("sed")
class SED(Method):
    """Sentence ensemble distillation: targets stage, then teachers, ensemble and student seeds."""

    trainable = SEDTrainable
    description = "SED: a student distilled to the mean embedding of an ensemble of teachers"
    smoke = {"seeds": "0,1", "epochs": 1, "max_sentences": 128, "sets": "stsb", "batch_size": 16}
    cost_axes = ("member",)

    @classmethod
    def add_arguments(cls, parser, defaults: dict) -> None:

        what = parser.add_argument_group("what to distil")
        what.add_argument(
            "--teachers",
            default=defaults.get("teachers", ""),
            help="comma-separated models, folders or runs:/<run id> of one embedding size, or "
            "sweep:<sweep name or parent run id>[:layer=l] (the best-dev checkpoints of its trials)",
        )
        what.add_argument("--student", default="sentence-transformers/all-MiniLM-L6-v2", help="the model to train")
        what.add_argument(
            "--corpus",
            default="wiki",
            help="'wiki' (the Wikipedia sample in --data-dir) or a text file, one sentence a line",
        )
        what.add_argument("--max-sentences", type=int, default=None, help="a deterministic subset of the corpus")
        add_seeds_argument(what, "0,1,2,3,4")
        what.add_argument(
            "--sets", default=DEFAULT_SETS, help="evaluation sets scored at the end (STS-B dev is scored every epoch)"
        )
        train = parser.add_argument_group(
            "distillation (the paper's printed text lost its numbers: these are choices, recorded in each run)"
        )
        train.add_argument("--epochs", type=int, default=1)
        train.add_argument("--batch-size", type=int, default=32)
        train.add_argument("--lr", type=float, default=2e-5)
        train.add_argument(
            "--warmup-ratio", type=float, default=0.1, help="linear warm-up share of the steps, then linear decay"
        )
        train.add_argument(
            "--train-pool-layers",
            type=int,
            choices=(1, 2),
            default=1,
            help="targets and student in training: mean of the last k layers' mean pooling (the paper: 1)",
        )
        train.add_argument(
            "--eval-pool-layers",
            type=int,
            choices=(1, 2),
            default=2,
            help="every evaluation: mean of the last k layers (the paper evaluates with 2)",
        )

    @classmethod
    def check(cls, args) -> None:
        if not str(args.teachers).strip() and not args.smoke_test:
            raise SweepInputError("--teachers is required: models of one embedding size, or sweep:<name>[:layer=l]")
        if not args.lr > 0 or args.batch_size <= 0 or args.epochs < 1 or not 0 <= args.warmup_ratio < 1:
            raise SweepInputError(
                "--lr and --batch-size must be positive, --epochs at least 1, --warmup-ratio in [0, 1)"
            )
        if args.max_sentences is not None and args.max_sentences <= 0:
            raise SweepInputError(f"--max-sentences must be a positive integer, got {args.max_sentences}")
        parse_int_list(args.seeds, "--seeds")
        cls.sets(args)

    @staticmethod
    def sets(args) -> list[str]:
        from trainables.evaluation.sets import eval_set_names

        return parse_names(args.sets, "--sets", eval_set_names())

    @classmethod
    def metrics(cls, args) -> MetricContract:
        return MetricContract(
            primary="best_dev_spearman",
            report="mean_spearman",
            companion="test_spearman_at_best_dev",
            epoch="dev_spearman",
            axes=("member", "replica"),
            select=None,
            seed="replica",
            columns=(*(f"{name}_spearman" for name in cls.sets(args)), "mean_spearman"),
            label="Spearman",
            short={"member": "", "replica": "#"},
        )

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.encoders.loading import resolve_model
        from trainables.evaluation.sets import load_suite
        from trainables.stages.store import make_spec, stage_root
        from trainables.training.precision import stage_precision

        if context.smoke_test and not str(args.teachers).strip():
            teachers, student = cls._smoke_models(context, args)
        else:
            teachers = resolve_teachers(args.teachers, context.mlflow_uri)
            student = (args.student, resolve_model(args.student, context.mlflow_uri))
        size = check_sizes(teachers, student)
        sentences, checksum = read_corpus(args.corpus, args.data_dir, args.max_sentences)
        sets = cls.sets(args)
        suite, dev = load_suite(sets, args.data_dir), load_suite([DEV_SET], args.data_dir)
        root = stage_root(None, context.storage_path)
        config = stage_config(
            teachers,
            "wiki" if args.corpus == "wiki" else Path(args.corpus).name,
            checksum,
            args.max_sentences,
            args.train_pool_layers,
            args.eval_pool_layers,
            sets,
        )
        config.update(stage_precision(args))
        spec = make_spec(
            "sed-targets",
            f"ensemble of {len(teachers)}",
            teachers[0][1],
            root,
            args.data_dir,
            ",".join(f"{k}={v}" for k, v in sorted({**suite.checksums, **dev.checksums}.items())),
            config,
        )
        spec.update(teacher_paths=[str(path) for _, path in teachers], corpus_path=args.corpus)
        corpus_ids, pad_id = cls._tokenise(student[1], sentences)
        base = {
            "method": cls.name,
            "student": student[0],
            "_student_path": str(student[1]),
            "epochs": args.epochs,
            "lr": args.lr,
            "batch_size": args.batch_size,
            "warmup_ratio": args.warmup_ratio,
            "optimizer": "adamw-wd0",
            "schedule": "warmup-linear",
            "clip": 1.0,
            "train_pool_layers": args.train_pool_layers,
            "eval_pool_layers": args.eval_pool_layers,
            "corpus": config["corpus"],
            "sentences": len(sentences),
            "teachers": len(teachers),
            "upstream_method": "sed-targets",
            "stage_key": spec["key"],
            "upstream_run_id": None,
            "_upstream_path": str(root / spec["key"]),
        }
        configs = [{**base, "member": "teacher", "replica": i, "seed": i} for i in range(len(teachers))]
        configs.append({**base, "member": "ensemble", "replica": 0, "seed": 0})
        configs += [
            {**base, "member": "student", "replica": seed, "seed": seed}
            for seed in parse_int_list(args.seeds, "--seeds")
        ]
        return MethodPlan(
            configs=configs,
            data=SEDData(corpus_ids, pad_id, suite, dev),
            stages={spec["key"]: spec},
            costs=cls._costs(student[1], size, corpus_ids, args),
            checksums={"corpus": checksum},
            static_params={"teacher_list": " | ".join(label for label, _ in teachers)[:5000]},
            method_label=cls.name,
        )

    @classmethod
    def search_space(cls, args, base: dict) -> dict:
        """Optuna over the student's lr, batch size and warm-up (one seed), as TMFT's."""
        from ray import tune

        seed = parse_int_list(args.seeds, "--seeds")[0]
        return {
            **base,
            "member": "student",
            "replica": seed,
            "seed": seed,
            "lr": tune.loguniform(1e-6, 1e-4),
            "batch_size": tune.choice([16, 32, 64]),
            "warmup_ratio": tune.uniform(0.0, 0.2),
        }

    @staticmethod
    def _tokenise(path, sentences: list[str]) -> tuple[list, int]:
        from transformers import AutoTokenizer

        from trainables.encoders.loading import load_config, max_tokens

        tokenizer = AutoTokenizer.from_pretrained(str(path))
        limit = max_tokens(load_config(path), tokenizer)
        ids = tokenizer(sentences, truncation=True, max_length=limit)["input_ids"]
        return ids, int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)

    @staticmethod
    def _smoke_models(context, args):
        from trainables.encoders.tiny import build_tiny_model, smoke_model

        student = smoke_model(context.storage_path, args.data_dir)
        teachers = []
        for seed in (1, 2):
            folder = Path(student).parent / f"tiny-bert-teacher{seed}"
            if not (folder / "config.json").is_file():
                from trainables.data.stsb import load_stsb

                sentences = [e.sentence1 for e in load_stsb(args.data_dir)["train"][:2000]]
                build_tiny_model("bert", folder, layers=4, hidden=32, sentences=sentences, seed=seed)
            teachers.append((f"tiny-bert-teacher{seed}", folder))
        return teachers, ("tiny-bert", student)

    @staticmethod
    def _costs(path, size: int, corpus_ids: list, args) -> dict:
        from trainables.encoders import cost as encoder_cost
        from trainables.encoders.loading import load_config

        config = load_config(path)
        depth = int(config.num_hidden_layers)
        seq = max(map(len, corpus_ids)) if corpus_ids else 1
        shape = encoder_cost.shape_from_config(config, depth, args.batch_size, seq)
        tokens = sum(map(len, corpus_ids))
        seconds = encoder_cost.trial_seconds(
            shape,
            tokens // 2,
            0,
            args.epochs,
            args.gpu_tflops,
            args.precision,
            math.ceil(len(corpus_ids) / args.batch_size),
            0,
        )
        scoring = TrialCost(0.0, 1.0, gpu=False)
        return {
            ("student",): TrialCost(encoder_cost.trial_memory_bytes(shape, args.precision), seconds),
            ("teacher",): scoring,
            ("ensemble",): scoring,
        }


@STAGES.register("sed-targets")
class SedTargetsStage(StageKind):
    downstream, task = "sed", "distillation"
    compute = staticmethod(compute)

    @staticmethod
    def params(config: dict) -> dict:
        return {
            "sed_corpus": config["corpus"],
            "sed_teachers": len(config["teachers"]),
            "train_pool_layers": config["train_pool_layers"],
            "eval_pool_layers": config["eval_pool_layers"],
        }
