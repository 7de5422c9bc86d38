"""SED: sentence ensemble distillation (the SED paper; docs/methods.md M5). A student is trained so
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
`--eval-pool-layers k` for every evaluation (teachers, ensemble, students), k = 1 or 2. A student's
saved sentence-transformers folder (`best/`) can only mean-pool its last layer (sentence-transformers'
Pooling module reads one layer), so with `--eval-pool-layers 2` a student also reports the folder's
scores, `folder_<set>_spearman` and `folder_mean_spearman`; param `saved_pooling` says what the
folder holds.

Architecture (paper §5.1: teachers and learner "always share the same architecture"): teachers
whose model type or shape differs from the student's are refused, unless
`--other-architectures` (then param `paper_setting` names them as outside the paper's setting).

Evaluation sets (paper: STS12-16 in Tables 1-3, STS-B and SICK-R in Table 7): `--sets` defaults
to all seven; the paper's stability table averages STS12-16, each SentEval's weighted mean over
subsets (`<set>_spearman_wmean`, trainables/methods/sed/paper.py).

The paper's printed text lost its distillation numbers (batch size, learning rate, warm-up share,
ensemble size, sentence count); these choices are flags recorded in every run: Adam with
decoupled weight decay 0 (AdamW, weight decay 0 = Adam), lr 2e-5, batch 32, linear warm-up over
10% of the steps then linear decay, gradient clipping 1.0, 1 epoch over the corpus, STS-B dev
Spearman after every epoch with the best epoch's weights kept. With the default single epoch that
selects nothing (the one epoch's weights are scored); the paper's "SED with early stopping in
regards to the STS-b development set" (§4, of its supervised ensembles) needs `--epochs` above 1.

Grid: one trial per teacher (`member` teacher, `replica` its index), one for the ensemble, and one
per student seed (`member` student, `replica` the seed); teacher and ensemble trials only score
the stage's cached embeddings. Metrics: `dev_spearman` per epoch, `best_dev_spearman`, and at the
end, for the best-dev weights, every evaluation set's `<set>_spearman`, `mean_spearman` over them
and `test_spearman_at_best_dev` (STS-B test). The report's table of this contract (member x
mean, std and max over replicas) is the paper's stability table.
"""

from __future__ import annotations

import math
from pathlib import Path

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
from trainables.methods.sed import paper
from trainables.methods.sed.targets import (
    DEV_SET,
    check_sizes,
    other_architectures,
    read_corpus,
    resolve_teachers,
    stage_config,
)
from trainables.methods.sed.trainable import SEDData, SEDTrainable

MEMBERS = ("teacher", "ensemble", "student")
DEFAULT_SETS = paper.PAPER_SETS


# --- the method --------------------------------------------------------------------------------
@register_method("sed")
class SED(Method):
    """Sentence ensemble distillation: targets stage, then teachers, ensemble and student seeds."""

    trainable = SEDTrainable
    description = "SED: a student distilled to the mean embedding of an ensemble of teachers"
    smoke = {"seeds": "0,1", "epochs": 1, "max_sentences": 128, "sets": "stsb", "batch_size": 16}
    cost_axes = ("member",)
    presets = paper.PRESETS

    @classmethod
    def estimate(cls, args):
        return paper.estimate(args)

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
            "--other-architectures",
            action="store_true",
            help="accept teachers whose model type or shape differs from the student's (outside the paper's "
            "setting, §5.1; recorded in param paper_setting); refused otherwise",
        )
        what.add_argument(
            "--corpus",
            default="wiki",
            help="'wiki' (the Wikipedia sample in --data-dir) or a text file, one sentence a line",
        )
        what.add_argument("--max-sentences", type=int, default=None, help="a deterministic subset of the corpus")
        add_seeds_argument(what, "0,1,2,3,4")
        what.add_argument(
            "--sets",
            default=DEFAULT_SETS,
            help="evaluation sets scored at the end (STS-B dev is scored every epoch); default: the paper's, "
            "STS12-16, STS-B, SICK-R",
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
        from trainables.evaluation.sets import main_metric, suite_primary

        return MetricContract(
            primary="best_dev_spearman",
            report=suite_primary(cls.sets(args)),
            companion="test_spearman_at_best_dev",
            epoch="dev_spearman",
            axes=("member", "replica"),
            select=None,
            seed="replica",
            columns=(*(main_metric(name) for name in cls.sets(args)), suite_primary(cls.sets(args))),
            label="Spearman",
            short={"member": "", "replica": "#"},
        )

    @classmethod
    def plan(cls, args, context) -> MethodPlan:
        from trainables.core import object_storage
        from trainables.encoders.loading import resolve_model
        from trainables.encoders.precision import stage_precision
        from trainables.evaluation.sets import load_suite
        from trainables.stages.store import make_spec, stage_root

        if context.smoke_test and not str(args.teachers).strip():
            teachers, student = cls._smoke_models(context, args)
        else:
            teachers = resolve_teachers(args.teachers, context.mlflow_uri)
            student = (args.student, resolve_model(args.student, context.mlflow_uri))
        size = check_sizes(teachers, student)
        others = other_architectures(teachers, student)
        if others and not args.other_architectures:
            raise SweepInputError(
                "SED's paper distils teachers of the student's own architecture (§5.1); these differ: "
                + "; ".join(others)
                + ". Pass --other-architectures to run outside the paper's setting (recorded in param paper_setting)."
            )
        setting = "yes" if not others else "no: other architectures: " + "; ".join(others)
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
            "saved_pooling": "mean of the last layer (folder_* metrics)",
            "corpus": config["corpus"],
            "sentences": len(sentences),
            "teachers": len(teachers),
            "upstream_method": "sed-targets",
            "stage_key": spec["key"],
            "upstream_run_id": None,
            "_upstream_path": object_storage.join(root, spec["key"]),
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
            static_params={
                "teacher_list": " | ".join(label for label, _ in teachers)[:5000],
                "paper_setting": setting[:5000],
            },
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
            ("student",): TrialCost(
                encoder_cost.trial_memory_bytes(shape, args.precision),
                seconds,
                weight_bytes=encoder_cost.weight_bytes(shape),
            ),
            ("teacher",): scoring,
            ("ensemble",): scoring,
        }
