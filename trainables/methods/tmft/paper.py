"""The ELECTRA sentence-embedding paper by name: the grid of each of its tables and figures as a
preset of `sweeps/electra_layers.py` or `sweeps/improvements.py`, its published Tables 1 and 2,
and the public configs of its English models, which price a grid without loading any model.

Published numbers are typed in from the paper (../shared/papers/electra-sentence-embeddings-tmft.txt:
Table 1, the base models with and without the improvements; Table 2 in Appendix D, the model
sizes), scores x100 as printed: dev and test Spearman/Pearson at the layer with the best dev
Spearman, and the last layer where the paper prints it. Figures 2-13 are plots (the numbers the
paper's text quotes from them are not tabulated here): their presets run the grid and the report
says that the paper gives only a plot; Figure 2's best layers are Table 1's, Figure 4's points Table 2's.
"""

from __future__ import annotations

import functools
import math

from trainables.core.method import Estimate, Preset, PublishedScore, TrialCost

PAPER = "Rep et al. 2024, Are ELECTRA's Sentence Embeddings Beyond Repair? (TMFT)"
SOURCE = (
    "the ELECTRA sentence-embedding paper (TMFT), "
    "Table 1 and Table 2 (Appendix D), test set scores of the layer with the best dev Spearman"
)

BASE_MODELS = (
    "google/electra-base-discriminator",
    "google/electra-base-generator",
    "bert-base-cased",
    "microsoft/deberta-v3-base",
)
BERT_SIZES = (
    "google/bert_uncased_L-2_H-128_A-2",
    "google/bert_uncased_L-4_H-256_A-4",
    "google/bert_uncased_L-4_H-512_A-8",
    "google/bert_uncased_L-8_H-512_A-8",
    "bert-base-cased",
    "bert-large-cased",
)
DISCRIMINATORS = (
    "google/electra-small-discriminator",
    "google/electra-base-discriminator",
    "google/electra-large-discriminator",
)
GENERATORS = ("google/electra-small-generator", "google/electra-base-generator", "google/electra-large-generator")

# Public configs: hidden size, layers, attention heads, intermediate size, embedding size, vocabulary (the
# transformers config fields SHAPE_FIELDS).
SHAPE_FIELDS = "hidden_size num_hidden_layers num_attention_heads intermediate_size embedding_size vocab_size".split()
CONFIGS = {
    "google/bert_uncased_L-2_H-128_A-2": (128, 2, 2, 512, 128, 30522),
    "google/bert_uncased_L-4_H-256_A-4": (256, 4, 4, 1024, 256, 30522),
    "google/bert_uncased_L-4_H-512_A-8": (512, 4, 8, 2048, 512, 30522),
    "google/bert_uncased_L-8_H-512_A-8": (512, 8, 8, 2048, 512, 30522),
    "bert-base-cased": (768, 12, 12, 3072, 768, 28996),
    "bert-large-cased": (1024, 24, 16, 4096, 1024, 28996),
    "google/electra-small-discriminator": (256, 12, 4, 1024, 128, 30522),
    "google/electra-base-discriminator": (768, 12, 12, 3072, 768, 30522),
    "google/electra-large-discriminator": (1024, 24, 16, 4096, 1024, 30522),
    "google/electra-small-generator": (256, 12, 4, 1024, 128, 30522),
    "google/electra-base-generator": (256, 12, 4, 1024, 768, 30522),
    "google/electra-large-generator": (256, 24, 4, 1024, 1024, 30522),
    "microsoft/deberta-v3-base": (768, 12, 12, 3072, 768, 128100),
}


def public_config(model: str):
    """A BertConfig of `model`'s public shape (ELECTRA's embedding size set), for pricing; models of
    the paper's other languages are priced as the English base model of their family. None if unknown."""
    from transformers import BertConfig

    shape = CONFIGS.get(model) or CONFIGS.get(_english_counterpart(model))
    if shape is None:
        return None
    return BertConfig(**dict(zip(SHAPE_FIELDS, shape)), max_position_embeddings=512)


def _english_counterpart(model: str) -> str | None:
    from trainables.data.multilingual_stsb import PAPER_MODELS

    if not any(model in models.split(",") for models in PAPER_MODELS.values()):
        return None
    if "generator" in model:
        return "google/electra-base-generator"
    return "google/electra-base-discriminator" if "electra" in model or "electricidad" in model else "bert-base-cased"


def _row(method, model, layer, params_m, dev, test, selection="best") -> PublishedScore:
    (dev_s, dev_p), (test_s, test_p) = dev, test
    return PublishedScore(method, model, layer, params_m, dev_s, dev_p, test_s, test_p, selection=selection)


TABLE1 = (
    _row("tmft", "bert-base-cased", 12, 107.72, (86.07, 85.98), (82.74, 83.03)),
    _row("tmft", "google/electra-base-discriminator", 3, 45.10, (82.15, 82.20), (75.29, 76.96)),
    _row("tmft", "google/electra-base-generator", 12, 33.31, (86.62, 86.38), (82.57, 82.50)),
    _row("tmft", "microsoft/deberta-v3-base", 7, 148.00, (84.80, 84.86), (81.98, 82.44)),
    _row("ws+tmft", "bert-base-cased", 12, 107.72, (85.85, 85.84), (83.77, 84.08)),
    _row("ws+tmft", "google/electra-base-discriminator", 3, 45.10, (82.66, 82.56), (76.71, 77.31)),
    _row("ws+tmft", "google/electra-base-generator", 12, 33.31, (86.67, 86.39), (82.85, 82.91)),
    _row("ws+tmft", "microsoft/deberta-v3-base", 7, 148.00, (85.48, 85.55), (83.27, 83.31)),
    _row("dapt+tmft", "bert-base-cased", 12, 107.72, (85.91, 85.71), (82.66, 82.64)),
    _row("dapt+tmft", "google/electra-base-discriminator", 7, 73.45, (84.07, 83.78), (79.90, 79.92)),
    _row("dapt+tmft", "google/electra-base-generator", 11, 32.52, (85.58, 85.22), (80.97, 80.85)),
    _row("dapt+tmft", "microsoft/deberta-v3-base", 7, 148.00, (85.95, 85.88), (83.59, 83.51)),
)
TABLE2 = (
    _row("tmft", "google/bert_uncased_L-2_H-128_A-2", 2, 4.37, (78.20, 77.57), (69.80, 70.64)),
    _row("tmft", "google/bert_uncased_L-4_H-256_A-4", 4, 11.10, (83.06, 82.42), (75.55, 76.28)),
    _row("tmft", "google/bert_uncased_L-4_H-512_A-8", 4, 28.50, (85.25, 85.09), (79.13, 79.56)),
    _row("tmft", "google/bert_uncased_L-8_H-512_A-8", 8, 41.11, (85.74, 85.46), (80.74, 81.02)),
    _row("tmft", "bert-base-cased", 12, 107.72, (86.07, 85.98), (82.74, 83.03)),
    _row("tmft", "bert-large-cased", 24, 332.53, (88.33, 88.31), (85.47, 85.68)),
    _row("tmft", "google/electra-small-discriminator", 1, 4.76, (79.74, 79.27), (68.88, 69.64)),
    _row("tmft", "google/electra-small-discriminator", 12, 13.45, (73.98, 73.14), (66.72, 67.27), "last"),
    _row("tmft", "google/electra-base-discriminator", 3, 45.10, (82.15, 82.20), (75.29, 76.96)),
    _row("tmft", "google/electra-base-discriminator", 12, 108.89, (72.41, 71.62), (66.82, 67.23), "last"),
    _row("tmft", "google/electra-large-discriminator", 12, 182.94, (84.74, 84.88), (80.90, 81.15)),
    _row("tmft", "google/electra-large-discriminator", 24, 334.09, (29.88, 28.44), (25.84, 25.21), "last"),
    _row("tmft", "google/electra-small-generator", 12, 13.45, (84.62, 84.11), (81.55, 80.93)),
    _row("tmft", "google/electra-base-generator", 12, 33.31, (86.62, 86.38), (82.57, 82.50)),
    _row("tmft", "google/electra-large-generator", 24, 50.74, (87.23, 86.86), (84.63, 84.52)),
)

# Above the comparison table of a preset with DAPT rows (analysis/published.py prints the note first).
TABLE1_CORPUS_NOTE = (
    "The paper's DAPT corpus: SNLI + MultiNLI sentences (AllNLI, §4.2); the project's default is SICK + STS-B "
    "train + a Wikipedia sample (`--dapt-corpus sick,stsb-train,wiki`, as AllNLI is not available offline), so "
    "DAPT+TMFT rows are comparable with the paper's only where this sweep ran `--dapt-corpus allnli`."
)

CKA_COMMAND = (
    "python -m analysis cka --models {pair} --checkpoints {sweep_dir} --out {sweep_dir}/cka-{name} "
    "--mlflow-uri {mlflow_uri}"
)


def _tmft(name, reproduces, flags, published=(), follow_up=()) -> Preset:
    return Preset(
        name,
        "tmft",
        "sweeps/electra_layers.py",
        reproduces,
        {"layers": "all", **flags},
        SOURCE if published else "",
        tuple(published),
        follow_up=tuple(follow_up),
        paper=PAPER,
    )


def _improvements(name, reproduces, improvement, published=()) -> Preset:
    return Preset(
        name,
        "improvements",
        "sweeps/improvements.py",
        reproduces,
        {"models": ",".join(BASE_MODELS), "layers": "all", "improvement": improvement},
        SOURCE if published else "",
        tuple(published),
        note=TABLE1_CORPUS_NOTE if "dapt" in improvement else "",
        paper=PAPER,
        shown=(("dapt_corpus", "DAPT corpus of this sweep"),) if "dapt" in improvement else (),
    )


_BASE = {"models": ",".join(BASE_MODELS)}
PRESETS = {
    p.name: p
    for p in (
        _improvements(
            "table1", "Table 1: TMFT, WS+TMFT and DAPT+TMFT on STS-B, the four base models", "none,ws,dapt", TABLE1
        ),
        _tmft(
            "table2",
            "Table 2 (Appendix D): TMFT on STS-B over model sizes (BERT tiny-large, ELECTRA-D and -G small-large)",
            {"models": ",".join(BERT_SIZES + DISCRIMINATORS + GENERATORS)},
            TABLE2,
        ),
        _tmft(
            "fig2a",
            "Figure 2a: TMFT on STS-B at every layer, the four base models",
            _BASE,
            [r for r in TABLE1 if r.method == "tmft"],
        ),
        _improvements(
            "fig2b",
            "Figure 2b: WS+TMFT on STS-B at every layer, the four base models",
            "ws",
            [r for r in TABLE1 if r.method == "ws+tmft"],
        ),
        _improvements(
            "fig2c",
            "Figure 2c: DAPT+TMFT on STS-B at every layer, the four base models",
            "dapt",
            [r for r in TABLE1 if r.method == "dapt+tmft"],
        ),
        _tmft(
            "fig3",
            "Figure 3: CKA per layer between BERT and ELECTRA-G, ELECTRA-D and DeBERTa-v3, fine-tuned by TMFT "
            "(the sweep, then the CKA commands it prints)",
            _BASE,
            follow_up=[
                CKA_COMMAND.replace("{pair}", f"{model},bert-base-cased").replace("{name}", letter)
                for letter, model in (
                    ("a", "google/electra-base-generator"),
                    ("b", "google/electra-base-discriminator"),
                    ("c", "microsoft/deberta-v3-base"),
                )
            ],
        ),
        _tmft(
            "fig4",
            "Figure 4: parameters against test Spearman, best-dev and last layers of every model size "
            "(the Pareto plot; Table 2's grid)",
            {"models": ",".join(BERT_SIZES + DISCRIMINATORS + GENERATORS)},
            TABLE2,
        ),
        _tmft("fig5", "Figure 5 (Appendix A): TMFT on MRPC (F1), the four base models", {**_BASE, "task": "mrpc"}),
        _tmft(
            "fig6",
            "Figure 6 (Appendix A): TMFT on SICK entailment (F1), the four base models",
            {**_BASE, "task": "sick"},
        ),
        _tmft("fig7", "Figure 7 (Appendix B): TMFT on KorSTS, the paper's Korean models", {"task": "korsts"}),
        _tmft("fig8", "Figure 8 (Appendix B): TMFT on German STS-B, the paper's German models", {"task": "stsb-de"}),
        _tmft("fig9", "Figure 9 (Appendix B): TMFT on Spanish STS-B, the paper's Spanish models", {"task": "stsb-es"}),
        _tmft(
            "fig10",
            "Figure 10 (Appendix C): TMFT on STS-B, ELECTRA generator small, base, large",
            {"models": ",".join(GENERATORS)},
        ),
        _tmft(
            "fig11",
            "Figure 11 (Appendix C): TMFT on STS-B, ELECTRA discriminator small, base, large",
            {"models": ",".join(DISCRIMINATORS)},
        ),
        _tmft(
            "fig12",
            "Figure 12 (Appendix C): TMFT on STS-B, BERT tiny, mini, small, medium, base, large",
            {"models": ",".join(BERT_SIZES)},
        ),
        _tmft(
            "fig13",
            "Figure 13 (Appendix E): TMFT on STS-B from randomly initialised weights, the four base models",
            {**_BASE, "random_init": True},
        ),
    )
}


def estimate(args, models: list[str], stages: int = 1) -> Estimate:
    """Trials and GPU-hours of a TMFT grid (`models` x layers x seeds, times `stages` downstream
    variants), priced by the cost model (trainables/encoders/cost.py) from the public configs, on
    the task's training data tokenised with all-MiniLM-L6-v2's WordPiece where installed (else
    1.3 tokens per word). Upstream stages are not priced."""
    from trainables.encoders import cost as encoder_cost
    from trainables.encoders.loading import check_layers, config_without_loading

    seeds, layers = len(args.seeds), args.layers
    configs = {model: public_config(model) or config_without_loading(model) for model in models}
    unknown = [m for m, c in configs.items() if c is None]
    depth = {m: int(c.num_hidden_layers) for m, c in configs.items() if c is not None}
    for model, layer_count in depth.items():
        check_layers(model, layer_count, layers)
    trials = stages * seeds * sum(len(layers) if layers is not None else depth.get(m, 0) + 1 for m in models)
    if unknown:
        return Estimate(trials if layers is not None else 0, None, f"no public config here for {', '.join(unknown)}")
    task, how, proxy = _tokenised_task(args.task, str(args.data_dir))
    precision = "tf32" if args.precision == "auto" else args.precision
    per_unit = [
        _trial_cost(
            *encoder_cost.pair_task_cost(
                configs[m], task, layer, args.batch_size, args.epochs, args.gpu_tflops, precision
            )
        )
        for m in models
        for layer in (layers if layers is not None else range(depth[m] + 1))
    ]
    seconds = stages * seeds * sum(cost.seconds for cost in per_unit)
    notes = [proxy] if proxy else []
    if getattr(args, "improvement", None):
        notes.append("upstream stages not priced")
    return Estimate(
        trials,
        seconds / 3600,
        "; ".join(notes),
        f"{precision} on an H100 (--gpu-tflops scales it), tokens {how}",
        costs=tuple(per_unit) * (stages * seeds),
    )


def _trial_cost(memory: float, seconds: float, weights: float) -> TrialCost:
    return TrialCost(memory, seconds, weight_bytes=weights)


@functools.lru_cache(maxsize=None)
def _tokenised_task(name: str, data_dir: str):
    """The task's tokenised splits for pricing (STS-B's English text stands in for its translations),
    how they were tokenised, and what stood in for the task ("" when nothing did)."""
    from trainables.training.tokenized import TokenizedPairs, TokenizedTask, load_task

    proxy = name if name in ("stsb", "mrpc", "sick") else "stsb"
    examples, checksums = load_task(proxy, data_dir)
    tokenizer, how = _pricing_tokenizer()
    encode = lambda texts: tokenizer(texts, truncation=True, max_length=512)["input_ids"]
    splits = {
        split: TokenizedPairs(
            s1=encode([r.sentence1 for r in rows]), s2=encode([r.sentence2 for r in rows]), labels=[0.0] * len(rows)
        )
        for split, rows in examples.items()
    }
    task = TokenizedTask(proxy, "", 0, splits, dict(checksums))
    return task, how, "" if proxy == name else f"{name} priced as STS-B"


def _pricing_tokenizer():
    from trainables.core.paths import models_dir

    folder = models_dir() / "sentence-transformers" / "all-MiniLM-L6-v2"
    if (folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(folder)), "by all-MiniLM-L6-v2's WordPiece"
    return WordCountTokenizer(), "estimated as 1.3 per word"


class WordCountTokenizer:
    """Stands in for a WordPiece tokenizer when none is installed: ceil(1.3 x words) + 2 ids per text."""

    def __call__(self, texts, **_):
        return {"input_ids": [[0] * (math.ceil(1.3 * len(str(t).split())) + 2) for t in texts]}
