"""SED: sentence ensemble distillation (the SED paper; docs/methods/sed.md M5). A student is trained so
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

from trainables.core import settings as shared
from trainables.core.errors import SweepInputError
from trainables.core.method import Estimate, Method, MethodInfo, MethodPlan, MetricContract, TrialCost, register_method
from trainables.core.settings import Flag, Int, Names, Setting, Text
from trainables.evaluation.sets import SUITE, eval_set_names
from trainables.methods.sed import paper
from trainables.methods.sed.targets import (
    DEV_SET,
    Teachers,
    check_sizes,
    other_architectures,
    read_corpus,
    resolve_teachers,
    stage_config,
)


def trainable_module():
    """trainables/methods/sed/trainable.py (torch, Ray Tune), imported when a plan or a trial needs it."""
    import trainables.methods.sed.trainable as module

    return module


SMOKE_TEACHER_SEEDS = (1, 2)  # --smoke-test without --teachers: two tiny random BERTs
WHAT = "what to distil"
DISTIL = "distillation (the paper's printed text lost its numbers: these are choices, recorded in each run)"
SETTINGS = (
    Setting(
        "teachers",
        Teachers(),
        [],
        "the ensemble, of one embedding size (sweep:<sweep name or parent run id>[:layer=l]: the best-dev "
        "checkpoints of its trials); required, except with --smoke-test (tiny random teachers)",
        group=WHAT,
        config=False,
    ),
    Setting("student", Text(), "sentence-transformers/all-MiniLM-L6-v2", "the model to train", group=WHAT),
    Setting(
        "other_architectures",
        Flag(),
        False,
        "accept teachers whose model type or shape differs from the student's (outside the paper's setting, §5.1; "
        "recorded in param paper_setting); refused otherwise",
        group=WHAT,
        config=False,
    ),
    Setting(
        "corpus",
        Text(),
        "wiki",
        "'wiki' (the Wikipedia sample in --data-dir) or a text file, one sentence a line",
        group=WHAT,
        config=False,
    ),
    Setting(
        "max_sentences",
        Int(low=1),
        None,
        "a deterministic subset of the corpus of this many sentences (None: the whole corpus)",
        group=WHAT,
        config=False,
    ),
    shared.SEEDS.but(help="student seeds: comma-separated, or a range like 0-4", group=WHAT),
    SUITE.but(
        kind=Names(known=lambda: eval_set_names()),
        default=list(paper.PAPER_SETS),
        help="evaluation sets scored at the end (STS-B dev is scored every epoch)",
        source="the SED paper: STS12-16 (Tables 1-3), STS-B and SICK-R (Table 7)",
        group=WHAT,
        config=False,
    ),
    shared.EPOCHS.but(
        kind=Int(low=1),
        default=1,
        help="epochs over the corpus; STS-B dev Spearman after each, the best epoch's weights kept",
        group=DISTIL,
    ),
    shared.BATCH_SIZE.but(help="corpus sentences per step", group=DISTIL),
    shared.LR.but(help="peak learning rate (AdamW with weight decay 0, i.e. Adam)", group=DISTIL),
    shared.WARMUP_RATIO.but(group=DISTIL),
    Setting(
        "train_pool_layers",
        Int(low=1, high=2),
        1,
        "targets and student in training: mean of the last k layers' mean pooling",
        group=DISTIL,
        source="the SED paper: mean pooling of the final layer",
    ),
    Setting(
        "eval_pool_layers",
        Int(low=1, high=2),
        2,
        "every evaluation (teachers, ensemble, students): mean of the last k layers' mean pooling",
        group=DISTIL,
        source="the SED paper evaluates with the two final layers",
    ),
)
CITATION = """@article{carlsson2021sentence,
  title = {Sentence Embeddings by Ensemble Distillation},
  author = {Carlsson, Fredrik and Sahlgren, Magnus},
  journal = {arXiv preprint arXiv:2104.06719},
  year = {2021},
  url = {https://arxiv.org/abs/2104.06719}
}"""


# --- the method --------------------------------------------------------------------------------
@register_method("sed")
class SED(Method):
    """Sentence ensemble distillation: targets stage, then teachers, ensemble and student seeds."""

    trainable = "trainables.methods.sed.trainable:SEDTrainable"  # imported when a trial or a plan needs it
    info = MethodInfo(
        display_name="SED (ensemble distillation)",
        description="a student distilled to the mean embedding of an ensemble of teachers",
        citation=CITATION,
        main_metric="mean Spearman over the evaluation sets, of the best-dev weights (the paper's Table 3: the "
        "average over STS12-16 per teacher, the ensemble and per student)",
    )
    settings = SETTINGS
    smoke = {"seeds": [0, 1], "epochs": 1, "max_sentences": 128, "sets": ["stsb"], "batch_size": 16}
    cost_axes = ("member",)
    presets = paper.PRESETS

    @classmethod
    def estimate(cls, args) -> Estimate:
        if not args.teachers and args.smoke_test:
            trials = len(SMOKE_TEACHER_SEEDS) + 1 + len(args.seeds)
            stage = paper.targets_stage(len(SMOKE_TEACHER_SEEDS), args.max_sentences, args.storage_path)
            return Estimate(
                trials, None, "the smoke test's tiny random teachers and student, built when it starts", stages=(stage,)
            )
        return paper.estimate(args)

    @classmethod
    def check(cls, args) -> None:
        if not args.teachers and not args.smoke_test:
            raise SweepInputError("--teachers is required: models of one embedding size, or sweep:<name>[:layer=l]")

    @classmethod
    def metrics(cls, args) -> MetricContract:
        from trainables.evaluation.sets import main_metric, suite_primary

        return MetricContract(
            primary="best_dev_spearman",
            report=suite_primary(args.sets),
            companion="test_spearman_at_best_dev",
            epoch="dev_spearman",
            axes=("member", "replica"),
            select=None,
            seed="replica",
            columns=(*(main_metric(name) for name in args.sets), suite_primary(args.sets)),
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

        if context.smoke_test and not args.teachers:
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
        sets = args.sets
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
            **cls.base_config(args),  # method, student, epochs, lr, batch_size, warmup_ratio, *_pool_layers
            "student": student[0],  # the smoke test's tiny student where --teachers is empty
            "_student_path": str(student[1]),
            "optimizer": "adamw-wd0",
            "schedule": "warmup-linear",
            "clip": 1.0,
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
        configs += [{**base, "member": "student", "replica": seed, "seed": seed} for seed in args.seeds]
        return MethodPlan(
            configs=configs,
            data=trainable_module().SEDData(corpus_ids, pad_id, suite, dev),
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

        seed = args.seeds[0]
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
        for seed in SMOKE_TEACHER_SEEDS:
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
