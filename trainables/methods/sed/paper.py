"""The SED paper by name (Carlsson and Sahlgren 2021, ../shared/papers/sentence-ensemble-distillation.txt):
its evaluation sets and aggregation, its stability table (Table 3) as a preset of `sweeps/sed.py`,
and that table's published numbers, typed in as printed (the one place they live).

Table 3 reports, for each ensemble, the max, mean and standard deviation over the ensemble's
models and over the distillation learners (students) of "the average Spearman score on the
zero-shot STS tasks" (§5.4), which are STS12-16 (Tables 1 and 2, "Avg." column: the plain mean of
the five sets). The paper does not say how a set's score is aggregated over its subsets; the
authors' released models are evaluated with SentEval (their repository's README: "All evaluation
is done using the SentEval framework"), whose STS12-16 headline is the mean of the per-subset
correlations weighted by pairs per subset. So the preset's comparison averages
`sts12_spearman_wmean` .. `sts16_spearman_wmean`. STS-B and SICK-R are scored too (the suite's
`stsb_spearman`, `sickr_spearman`, zero-shot cosine); the paper prints them only as SentEval
transfer tasks (Table 7: a regressor trained on frozen embeddings), which this project does not run.

Only the CT and CT-SED rows are run (Table 3's BERT-L-CT block; Tables 1 and 5 per STS set for
BERT-Large, BERT-Base and DistilBERT, each over its own teachers' sweep): Flow normalisation is not
implemented and the NLI stage is not part of this project, so the CT-Flow, NLI-CT and NLI-CT-Flow
rows (Table 6 whole) are kept here for the record or not at all.
"""

from __future__ import annotations

import functools
import math

from trainables.core.method import Estimate, Preset, PublishedColumn, PublishedRow, TrialCost

PAPER = "Carlsson and Sahlgren 2021, Sentence Embeddings by Ensemble Distillation (SED)"
SOURCE = "the SED paper, Table 3 (§5.4): average Spearman over STS12-16 of the ensemble models and the learners"

# The paper's evaluation: the zero-shot STS tasks of Tables 1-3, plus STS-B and SICK-R.
STS_SETS = ("sts12", "sts13", "sts14", "sts15", "sts16")
PAPER_SETS = (*STS_SETS, "stsb", "sickr")
AGGREGATION = "spearman_wmean"  # SentEval's weighted mean over subsets (module docstring)
AVERAGE = tuple(f"{name}_{AGGREGATION}" for name in STS_SETS)

# The paper's setting: teachers and learner share one architecture, BERT-Large (§5.1), the
# teachers each trained with Contrastive Tension (Appendix B.2: the CT code, RMSprop, 50,000
# steps, batch 16, Wikipedia sentences). The authors' CT models are uncased (vocabulary 30,522,
# do_lower_case). The CT code scores both of its copies on STS-B dev after every 500-step epoch
# and keeps the better whenever it is the best so far ("Top-CT-Eval"): `--ct-keep better
# --eval-steps 500 --final-weights best-dev`. Ensemble size lost from the text: 5 here (a project choice).
MODEL = "bert-large-uncased"
TEACHER_SEEDS = "0-4"
TEACHERS_SWEEP = "sed-ct-teachers"


def teachers_command(model: str, sweep: str) -> str:
    """The command that trains a preset's CT teachers (`sweep:<sweep>`) of `model`, as Appendix B.2."""
    return (
        f"python sweeps/tsdae.py --objective ct --ct-variant official --ct-keep better --models {model} "
        f"--pooling mean --seeds {TEACHER_SEEDS} --steps 50000 --eval-steps 500 --final-weights best-dev "
        f"--corpus wiki --name {sweep}"
    )


TEACHERS_COMMAND = teachers_command(MODEL, TEACHERS_SWEEP)
# Tables 1 and 5 per base model: the teachers' sweep of each (Table 1 is BERT-Large's, the sweep Table 3 uses)
BASE_MODELS = {
    "BERT-L": (MODEL, TEACHERS_SWEEP),
    "BERT-B": ("bert-base-uncased", "sed-ct-teachers-base"),
    "BERT-D": ("distilbert-base-uncased", "sed-ct-teachers-distil"),
}


def _table3(label, group, member, values):
    names = ("Max", "Mean", "STD")
    return PublishedRow(
        label, (("member", member),), tuple((n, v) for n, v in zip(names, values) if v is not None), group
    )


# Table 3 as printed: (max, mean, std) of the average Spearman over STS12-16.
TABLE3 = {
    "BERT-L-CT": (
        _table3("BERT-L-CT", "ensemble models", "teacher", (75.22, 74.07, 0.80)),
        _table3("BERT-L-CT", "full ensemble", "ensemble", (77.40, None, None)),
        _table3("BERT-L-CT-SED", "distillation learners", "student", (77.04, 76.76, 0.20)),
    ),
    "BERT-L-CT-Flow": (
        _table3("BERT-L-CT-Flow", "ensemble models", "teacher", (75.30, 74.41, 0.48)),
        _table3("BERT-L-CT-Flow", "full ensemble", "ensemble", (77.62, None, None)),
        _table3("BERT-L-CT-SED-Flow", "distillation learners", "student", (77.15, 76.73, 0.26)),
    ),
    "BERT-L-NLI-CT": (
        _table3("BERT-L-NLI-CT", "ensemble models", "teacher", (77.35, 76.91, 0.32)),
        _table3("BERT-L-NLI-CT", "full ensemble", "ensemble", (78.06, None, None)),
        _table3("BERT-L-NLI-CT-SED", "distillation learners", "student", (78.08, 77.93, 0.09)),
    ),
    "BERT-L-NLI-CT-Flow": (
        _table3("BERT-L-NLI-CT-Flow", "ensemble models", "teacher", (77.87, 77.50, 0.25)),
        _table3("BERT-L-NLI-CT-Flow", "full ensemble", "ensemble", (77.91, None, None)),
        _table3("BERT-L-NLI-CT-SED-Flow", "distillation learners", "student", (78.32, 78.19, 0.10)),
    ),
}
COLUMNS = tuple(
    PublishedColumn(name, AVERAGE, stat) for name, stat in (("Max", "max"), ("Mean", "mean"), ("STD", "std"))
)

# Tables 1 and 5 as printed (Spearman, the second of each "Pearson / Spearman" cell; the paper's
# "69,50" read as 69.50): the CT model and its SED learner per STS set and their average.
PER_SET_COLUMNS = ("STS12", "STS13", "STS14", "STS15", "STS16", "Avg.")
PER_SET = {
    "BERT-L": {"CT": (69.50, 75.97, 74.22, 78.83, 78.92, 75.49), "CT-SED": (69.87, 77.84, 75.87, 80.48, 80.74, 76.96)},
    "BERT-B": {"CT": (66.86, 70.91, 72.37, 78.55, 77.78, 73.29), "CT-SED": (65.45, 71.15, 70.54, 77.90, 77.23, 72.45)},
    "BERT-D": {"CT": (66.92, 72.41, 72.72, 78.26, 78.60, 73.78), "CT-SED": (68.17, 74.81, 74.21, 78.61, 78.77, 74.91)},
}
PER_SET_METRICS = tuple(PublishedColumn(n, (m,)) for n, m in zip(PER_SET_COLUMNS, AVERAGE)) + (
    PublishedColumn("Avg.", AVERAGE),
)


def _per_set_rows(base: str) -> tuple[PublishedRow, ...]:
    """The CT row (the teachers' mean: each is one CT model) and the CT-SED row (the learners' mean)."""
    return tuple(
        PublishedRow(f"{base}-{label}", (("member", member),), tuple(zip(PER_SET_COLUMNS, PER_SET[base][label])))
        for label, member in (("CT", "teacher"), ("CT-SED", "student"))
    )


NOTE = (
    "What differs: the paper's teachers are BERT-Large models tuned by Contrastive Tension with the authors' "
    "TensorFlow code, and its learner is BERT-Large; here the teachers are whatever `--teachers` named (the preset: "
    f"the sweep `{TEACHERS_SWEEP}`, CT of {MODEL} by sweeps/tsdae.py) and the learner `--student`. The paper's "
    "ensemble size, corpus size, batch size, learning rate and warm-up share are lost from its text; the "
    "project's choices are run params. Its per-set aggregation is not stated: SentEval's weighted mean is assumed. "
    "Scores are comparable with the paper's only with BERT-Large teachers and learner of the paper's setting; "
    "with smaller models (e.g. all-MiniLM-L6-v2, which cannot be compared with BERT-Large) compare the rows with "
    "each other: whether the learners' mean passes the best teacher, and their std against the teachers'."
)


def _per_set_preset(name: str, base: str, table: str) -> Preset:
    model, sweep = BASE_MODELS[base]
    return Preset(
        name,
        "sed",
        "sweeps/sed.py",
        f"SED {table}: {base}-CT (the teachers) and {base}-CT-SED (the learners) per zero-shot STS set",
        {
            "teachers": f"sweep:{sweep}",
            "student": model,
            "sets": PAPER_SETS,
            "eval_pool_layers": 2,
            "train_pool_layers": 1,
            "seeds": "0-4",
        },
        f"the SED paper, {table}: Spearman x100 per STS set (SentEval's weighted mean over subsets)",
        _per_set_rows(base),
        NOTE.replace(MODEL, model),
        paper=PAPER,
        columns=PER_SET_METRICS,
        before=(teachers_command(model, sweep),),
    )


PRESETS = {
    "sed-table1": _per_set_preset("sed-table1", "BERT-L", "Table 1"),
    "sed-table5-base": _per_set_preset("sed-table5-base", "BERT-B", "Table 5"),
    "sed-table5-distil": _per_set_preset("sed-table5-distil", "BERT-D", "Table 5"),
    "sed-table3": Preset(
        "sed-table3",
        "sed",
        "sweeps/sed.py",
        "SED Table 3: stability of BERT-L-CT teachers, their full ensemble and SED learners over seeds",
        {
            "teachers": f"sweep:{TEACHERS_SWEEP}",
            "student": MODEL,
            "sets": PAPER_SETS,
            "eval_pool_layers": 2,
            "train_pool_layers": 1,
            "seeds": "0-4",
        },
        SOURCE,
        TABLE3["BERT-L-CT"],
        NOTE,
        paper=PAPER,
        columns=COLUMNS,
        before=(TEACHERS_COMMAND,),
    ),
}

# Public config of the paper's model, for pricing without loading it: hidden size, layers, heads, intermediate
# size, vocabulary.
CONFIGS = {
    "bert-large-cased": (1024, 24, 16, 4096, 28996),
    "bert-large-uncased": (1024, 24, 16, 4096, 30522),
    "bert-base-uncased": (768, 12, 12, 3072, 30522),
}


def estimate(args) -> Estimate:
    """Trials (one per teacher, the ensemble, one per student seed), each one's cost, and the students'
    GPU-hours, priced by the cost model (trainables/encoders/cost.py) from the student's public config or
    its local config, on the corpus's words (1.3 tokens a word); teacher and ensemble trials only score
    the targets stage's cached embeddings (no GPU). Teachers known only by a sweep name are counted from
    the preset's teacher command; the teachers' own training and the targets stage (each teacher's
    forward passes over the corpus) are not priced. `args`: the typed settings of `sweeps/sed.py`."""
    from trainables.core.settings import SEEDS

    seeds = len(args.seeds)
    teachers = args.teachers
    if len(teachers) == 1 and teachers[0] in {f"sweep:{sweep}" for _, sweep in BASE_MODELS.values()}:
        count = len(SEEDS.parse(TEACHER_SEEDS))
    elif teachers and not teachers[0].startswith("sweep:"):
        count = len(teachers)
    elif not teachers:
        return Estimate(0, None, "no --teachers given: nothing to count")
    else:
        return Estimate(0, None, "teachers from a sweep: count unknown before it is resolved")
    trials = count + 1 + seeds
    config = _config(args.student)
    words = _corpus_words(args.corpus, str(args.data_dir), args.max_sentences)
    stage = targets_stage(count, words[0] if words else None, args.storage_path)
    if config is None or words is None:
        return Estimate(trials, None, f"no config or corpus here to price {args.student}", stages=(stage,))
    from trainables.encoders import cost as encoder_cost

    sentences, total = words
    tokens = math.ceil(1.3 * total) + 2 * sentences
    seq = 128
    shape = encoder_cost.shape_from_config(config, int(config.num_hidden_layers), args.batch_size, seq)
    precision = "tf32" if args.precision == "auto" else args.precision
    steps = math.ceil(sentences / args.batch_size)
    seconds = encoder_cost.trial_seconds(shape, tokens // 2, 0, args.epochs, args.gpu_tflops, precision, steps, 0)
    student = TrialCost(
        encoder_cost.trial_memory_bytes(shape, precision), seconds, weight_bytes=encoder_cost.weight_bytes(shape)
    )
    scoring = TrialCost(0.0, 1.0, gpu=False)  # as SED.plan prices a teacher or the ensemble
    return Estimate(
        trials,
        seeds * seconds / 3600,
        "teachers' training not priced" if teachers[0].startswith("sweep:") else "",
        f"SED students: {precision} on an H100 (--gpu-tflops scales it), 1.3 tokens per corpus word",
        costs=(scoring,) * (count + 1) + (student,) * seeds,
        stages=(stage,),
    )


def targets_stage(teachers: int, sentences: int | None, storage_path: str) -> str:
    """The `sed-targets` stage a grid runs first, as --dry-run lists it."""
    from trainables.core import object_storage

    return (
        f"sed-targets: the ensemble's mean embedding of {sentences or 'every'} corpus sentences by {teachers} "
        "teachers, and their embeddings of the evaluation sets; computed unless the stage store "
        f"({object_storage.join(storage_path, 'stages')}) holds it for these teachers, poolings, corpus and sets; "
        "not priced"
    )


def _config(model: str):
    from transformers import BertConfig

    shape = CONFIGS.get(model)
    if shape is not None:
        fields = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
        return BertConfig(**dict(zip(fields, shape)))
    try:
        from trainables.encoders.loading import load_config, resolve_model

        return load_config(resolve_model(model, ""))
    except Exception:
        return None


@functools.lru_cache(maxsize=None)
def _corpus_words(corpus: str, data_dir: str, max_sentences):
    """(sentences, words) of the corpus, or None where it is not here."""
    from trainables.core.errors import SweepInputError
    from trainables.methods.sed.targets import read_corpus

    try:
        sentences, _ = read_corpus(corpus, data_dir, max_sentences)
    except SweepInputError:
        return None
    return len(sentences), sum(len(s.split()) for s in sentences)
