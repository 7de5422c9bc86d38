"""The TSDAE paper by name: its published numbers and the presets of `sweeps/tsdae.py` that rerun its
tables and figures, in one place.

Published numbers are typed in from the paper (../shared/papers/tsdae.txt), x100 as printed:
Table 2 (average precision on the four domain tasks; every row, for reference; the presets compare
the unsupervised rows this project implements: TSDAE, MLM, CT, SimCSE and the untrained
BERT-base-uncased with mean pooling), and Table 11 (Appendix F: Spearman on the STS sets, BERT-base
trained on Wikipedia sentences; Table 3's STSb column is its STSb column). Figure 3 / Figure 6
(corpus size) is a plot: its preset runs the grid and the report says the paper gives only a plot.
The pre-training figure (Figure 2 / Figure 5) fine-tunes each pre-trained model on labelled
in-domain pairs, which this method does not do: it has no preset. BERT-flow is not implemented.
"""

from __future__ import annotations

from trainables.core.method import Estimate, Preset, PublishedColumn, PublishedRow

PAPER = "TSDAE (Wang, Reimers and Gurevych 2021)"
MODEL = "bert-base-uncased"  # the paper's checkpoint (§5, Table 8)
DOMAIN_SETS = ("askubuntu", "cqadupstack", "twitterpara", "scidocs")
OBJECTIVES = {"TSDAE": "tsdae", "MLM": "mlm", "CT": "ct", "SimCSE": "simcse", "BERT-base-uncased": "none"}

# --- Table 2: average precision x100 on AskUbuntu (MAP), CQADupStack (MAP@100), TwitterPara (AP; TURL,
# PIT, their average), SciDocs (MAP; Cite, Co-Cite, Co-Read, Co-View, their average), and the average of
# the four tasks' averages. USE-large's AskUbuntu and CQADupStack numbers are printed in parentheses
# (trained on in-domain data).
TABLE2_COLUMNS = (
    "AskU.",
    "CQADup.",
    "TwitterP. TURL",
    "TwitterP. PIT",
    "TwitterP. Avg.",
    "SciDocs Cite",
    "SciDocs CC",
    "SciDocs CR",
    "SciDocs CV",
    "SciDocs Avg.",
    "Avg.",
)
TABLE2 = {
    "Unsupervised learning based on BERT-base": {
        "TSDAE": (59.4, 14.5, 76.8, 69.2, 73.0, 71.4, 73.9, 75.0, 75.6, 74.0, 55.2),
        "MLM": (54.3, 11.7, 71.9, 69.7, 70.8, 71.2, 75.8, 75.1, 76.2, 74.6, 52.9),
        "CT": (56.3, 13.3, 74.6, 70.4, 72.5, 63.4, 67.1, 70.1, 69.7, 67.6, 52.4),
        "SimCSE": (55.9, 12.4, 74.5, 62.5, 68.5, 62.5, 65.1, 67.7, 67.6, 65.7, 50.6),
        "BERT-flow": (53.7, 9.2, 72.8, 65.7, 69.3, 61.3, 62.8, 66.7, 67.1, 64.5, 49.2),
    },
    "Domain adaptation: NLI+STS -> target task": {
        "TSDAE": (58.7, 13.6, 75.8, 66.2, 71, 69.9, 73.8, 75, 75.7, 73.6, 54.2),
        "MLM": (54.4, 9.7, 69.8, 68.1, 69, 67.1, 71.8, 72.6, 72.9, 71.1, 51.1),
        "CT": (57.9, 14.2, 75.6, 70.6, 73.1, 62.3, 66.2, 68.5, 68.9, 66.5, 52.9),
        "SimCSE": (56.6, 13.8, 73.4, 65.9, 69.7, 61.8, 63.7, 67.01, 66.7, 64.8, 51.2),
        "BERT-flow": (58.2, 13.9, 76.5, 67.4, 72, 62.2, 64.8, 68.1, 68, 65.8, 52.5),
    },
    "Domain adaptation: target task -> NLI+STS": {
        "TSDAE": (59.4, 14.4, 75.8, 73.1, 74.5, 75.6, 78.6, 78.1, 78.2, 77.6, 56.5),
        "MLM": (60.6, 14.3, 75.0, 68.6, 71.8, 74.7, 78.2, 77.0, 77.6, 76.9, 55.9),
        "CT": (56.4, 13.4, 75.9, 68.9, 72.4, 66.5, 69.6, 70.6, 72.2, 69.7, 53.0),
        "SimCSE": (56.2, 13.1, 75.5, 67.3, 71.4, 65.5, 68.5, 70.0, 71.4, 68.9, 52.4),
    },
    "Other previous unsupervised approaches": {
        "BM25": (53.4, 13.3, 71.9, 70.5, 71.2, 58.9, 61.3, 67.3, 66.9, 63.6, 50.4),
        "Avg. GloVe": (51.0, 10.0, 70.1, 52.1, 61.1, 58.8, 60.6, 64.2, 65.4, 62.2, 46.1),
        "Sent2Vec": (49.0, 3.2, 47.5, 39.9, 43.7, 61.6, 66.0, 66.1, 66.7, 65.1, 40.2),
        "BERT-base-uncased": (48.5, 6.5, 69.1, 61.7, 65.4, 59.4, 65.1, 65.4, 68.6, 64.6, 46.3),
    },
    "Out-of-the-box supervised pre-trained models": {
        "SBERT-base-nli-v2": (53.4, 11.8, 75.4, 69.9, 72.7, 66.8, 70.0, 70.7, 72.8, 70.1, 52.0),
        "SBERT-base-nli-stsb-v2": (54.5, 12.9, 75.9, 68.5, 72.2, 66.2, 69.2, 69.9, 72.3, 69.4, 52.3),
        "USE-large": (59.3, 15.9, 77.1, 69.8, 73.5, 67.1, 69.5, 71.4, 72.6, 70.2, 54.7),
    },
    "In-domain supervised training (upper bound)": {
        "SBERT-supervised": (63.8, 16.3, 81.6, 75.8, 78.7, 90.4, 91.2, 86.2, 83.6, 87.9, 61.6)
    },
}

# The run metric of each Table 2 column (trainables/evaluation: `<set>_<metric>`, a subset's as
# `<set>_<subset>_<metric>`, a set of several subsets also the mean over them, as USEB averages).
# "Avg." (the mean of the four tasks, each from the runs of its own corpus) has no single run metric:
# it is the mean of the row's four task columns (`TABLE2_AVERAGE`).
TABLE2_METRICS = {
    "AskU.": ("askubuntu_map",),
    "CQADup.": ("cqadupstack_useb_map_at_100",),  # USEB's MAP@100: over the duplicates found in the top 100
    "TwitterP. TURL": ("twitterpara_turl_ap",),
    "TwitterP. PIT": ("twitterpara_pit_ap",),
    "TwitterP. Avg.": ("twitterpara_ap",),
    "SciDocs Cite": ("scidocs_cite_map",),
    "SciDocs CC": ("scidocs_cocite_map",),
    "SciDocs CR": ("scidocs_coread_map",),
    "SciDocs CV": ("scidocs_coview_map",),
    "SciDocs Avg.": ("scidocs_map",),
}

TABLE2_AVERAGE = PublishedColumn("Avg.", (), of=("AskU.", "CQADup.", "TwitterP. Avg.", "SciDocs Avg."))

# --- Table 11 (Appendix F): Spearman x100, BERT-base trained on Wikipedia sentences; SBERT-base-nli-stsb-v2
# has only STSb and SICK-R (its training set holds subsets of STS12-16).
TABLE11_COLUMNS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSb", "SICK-R", "Avg.")
TABLE11 = {
    "Unsupervised method based on BERT-base": {
        "TSDAE": (55.2, 67.4, 62.4, 74.3, 73.0, 66.0, 62.3, 65.8),
        "CT": (60.0, 76.3, 68.2, 77.3, 75.8, 73.9, 69.4, 71.6),
        "SimCSE": (63.6, 79.3, 69.6, 78.2, 77.7, 73.8, 70.1, 73.2),
        "BERT-flow": (34.1, 60.7, 48.8, 61.9, 64.8, 48.9, 58.4, 53.9),
        "MLM": (30.9, 59.9, 47.7, 60.3, 63.7, 47.3, 58.2, 52.6),
    },
    "Out-of-the-box supervised pre-trained models": {
        "SBERT-base-nli-v2": (72.5, 84.8, 80.2, 84.8, 80.0, 83.9, 78.0, 80.6),
        "SBERT-base-nli-stsb-v2": (None, None, None, None, None, 87.3, 80.4, None),
        "USE-large": (74.3, 71.8, 71.4, 82.5, 77.5, 80.9, 75.8, 76.3),
    },
}
STS_SETS = ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr")
TABLE11_METRICS = {
    **{name: (f"{s}_spearman",) for name, s in zip(TABLE11_COLUMNS, STS_SETS)},
    "Avg.": tuple(f"{s}_spearman" for s in STS_SETS),
}

# --- Table 3: STSb test Spearman and Table 2's average (its columns are Table 11's STSb and Table 2's Avg.)
TABLE3 = {
    "TSDAE": (66.0, 55.2),
    "MLM": (47.3, 52.9),
    "CT": (73.9, 52.4),
    "SimCSE": (73.8, 50.6),
    "BERT-flow": (48.9, 49.2),
    "SBERT-base-nli-v2": (83.9, 52.0),
    "SBERT-base-nli-stsb-v2": (87.3, 52.3),
    "USE-large": (80.9, 54.7),
}

# --- Table 9 (Appendix C): other checkpoints, average precision x100, mean over 5 seeds (the +/- std
# left out), on AskUbuntu, CQADupStack, TwitterPara (the average of TURL and PIT), SciDocs and their average.
TABLE9_COLUMNS = ("AskU.", "CQADup.", "TwitterP.", "SciDocs", "Avg.")
TABLE9 = {
    "google/electra-base-discriminator": {
        "TSDAE": (56.6, 8.0, 69.0, 66.2, 49.9),
        "CT": (50.3, 5.0, 66.5, 46.1, 41.6),
        "SimCSE": (50.9, 6.2, 61.8, 49.3, 42.0),
    },
    "distilroberta-base": {
        "TSDAE": (58.9, 12.5, 68.5, 59.3, 49.9),
        "CT": (57.9, 13.8, 63.6, 62.7, 49.8),
        "SimCSE": (57.1, 12.2, 65.6, 63.4, 49.6),
    },
    "roberta-base": {
        "TSDAE": (58.3, 12.2, 70.0, 61.4, 50.3),
        "CT": (56.7, 14.2, 69.4, 63.1, 50.5),
        "SimCSE": (56.6, 12.4, 66.8, 64.4, 50.1),
    },
    "distilbert-base-uncased": {
        "TSDAE": (59.2, 14.6, 73.9, 72.3, 54.9),
        "CT": (57.7, 14.0, 66.4, 72.2, 52.3),
        "SimCSE": (54.8, 12.3, 66.8, 65.9, 49.9),
    },
    "bert-base-uncased": {
        "TSDAE": (59.4, 14.5, 73.0, 74.0, 55.2),
        "CT": (56.3, 13.3, 72.5, 67.6, 52.4),
        "SimCSE": (55.9, 12.4, 68.5, 65.7, 50.6),
    },
}
TABLE9_METRICS = {
    "AskU.": ("askubuntu_map",),
    "CQADup.": ("cqadupstack_useb_map_at_100",),
    "TwitterP.": ("twitterpara_ap",),
    "SciDocs": ("scidocs_map",),
}
# transformers has no causal-LM decoder with cross-attention for DistilBERT, so TSDAE cannot run on it
# here (method.py refuses it before anything starts): the preset's grid leaves it out; its CT and
# SimCSE rows compare when run by hand (`--models distilbert-base-uncased --objective ct,simcse`).
TABLE9_MODELS = tuple(m for m in TABLE9 if m != "distilbert-base-uncased")

# --- Table 2's "NLI+STS -> target task" block starts from a model trained on NLI+STS: the paper's own
# (SBERT-base-nli-stsb-v2, Table 8); its "target task -> NLI+STS" block needs NLI training, not here.
SBERT = {
    "SBERT-base-nli-v2": "kwang2049/SBERT-base-nli-v2",
    "SBERT-base-nli-stsb-v2": "kwang2049/SBERT-base-nli-stsb-v2",
}

# --- Appendix A: STS-B dev Spearman x100 of TSDAE (BERT-base) trained on SNLI+MultiNLI sentences for 30K steps,
# scored every 1.5K steps (the best), mean over 5 seeds; the greedy search: noise type at ratio 0.3 with CLS
# pooling (Table 5), deletion's ratio (Table 6), pooling at deletion 0.6 (Table 7), then tying the decoder
# (79.15). The decoder is untied until the last step (tying is found best after the pooling).
TABLE5 = {"delete": 78.33, "swap": 76.85, "mask": 76.56, "replace": 74.01, "add": 72.65}
TABLE6 = {0.1: 77.81, 0.2: 77.70, 0.3: 77.75, 0.4: 78.02, 0.5: 78.25, 0.6: 78.77, 0.7: 78.19, 0.8: 77.69, 0.9: 75.67}
TABLE7 = {"cls": 78.77, "mean": 78.84, "max": 78.17}
TIED = 79.15  # deletion 0.6, CLS, tied decoder (Appendix A's last sentence)
APPENDIX_A_STEPS, APPENDIX_A_EVAL_STEPS = 30_000, 1_500
APPENDIX_A_CORPUS = "wiki"  # the paper's SNLI+MultiNLI sentences are `allnli` where the data folder has AllNLI.tsv
DEV = PublishedColumn("STS-B dev", ("best_dev_spearman",))


def _appendix_row(label: str, score: float, group: str, noise: str, ratio: float, pooling: str, tied: bool):
    match = (("objective", "tsdae"), ("settings", "paper"), ("noise", noise), ("noise_ratio", ratio))
    match += (("pooling", pooling), ("tied_decoder", tied))
    return PublishedRow(label, match, (("STS-B dev", score),), group)


APPENDIX_A_ROWS = {
    "tsdae-table5": tuple(
        _appendix_row(n, v, "Table 5: noise types (ratio 0.3, CLS, untied)", n, 0.3, "cls", False)
        for n, v in TABLE5.items()
    ),
    "tsdae-table6": tuple(
        _appendix_row(f"{r:g}", v, "Table 6: deletion ratio (CLS, untied)", "delete", r, "cls", False)
        for r, v in TABLE6.items()
    ),
    "tsdae-table7": tuple(
        _appendix_row(p, v, "Table 7: pooling (deletion 0.6, untied)", "delete", 0.6, p, False)
        for p, v in TABLE7.items()
    ),
    "tsdae-tying": (
        _appendix_row("untied", TABLE7["cls"], "Tables 6-7 (deletion 0.6, CLS)", "delete", 0.6, "cls", False),
        _appendix_row("tied", TIED, "Appendix A: tying the decoder", "delete", 0.6, "cls", True),
    ),
}
APPENDIX_A_GRIDS = {  # noise, noise_ratio, poolings, decoder
    "tsdae-table5": (",".join(TABLE5), "0.3", "cls", "untied"),
    "tsdae-table6": ("delete", ",".join(f"{r:g}" for r in TABLE6), "cls", "untied"),
    "tsdae-table7": ("delete", "0.6", ",".join(TABLE7), "untied"),
    "tsdae-tying": ("delete", "0.6", "cls", "tied,untied"),
}
APPENDIX_A_WHAT = {
    "tsdae-table5": "Table 5 (Appendix A): TSDAE's noise types delete, swap, mask, replace, add at ratio 0.3",
    "tsdae-table6": "Table 6 (Appendix A): TSDAE's deletion ratio 0.1 to 0.9",
    "tsdae-table7": "Table 7 (Appendix A): TSDAE's pooling CLS, mean, max",
    "tsdae-tying": "Appendix A's last step: TSDAE's decoder tied to the encoder or not (tied: 79.15)",
}
APPENDIX_A_NOTE = (
    "The paper trains on SNLI and MultiNLI sentences without labels; they are not in this project's data "
    "folder, so the preset trains on the Wikipedia sample (wiki1m-prefix, the runs' `corpus`); `--corpus allnli` "
    "trains on the paper's sentences where the data folder has AllNLI.tsv. 30K steps at TSDAE's settings, STS-B "
    "dev every 1.5K, the best (`best_dev_spearman`), 5 seeds, as the paper. The swap, mask, replace and add rules "
    "are the project's (the paper does not define them; trainables/methods/tsdae/noise.py). The paper's Table 5 "
    "deletion at 0.3 (78.33) and Table 6's 0.3 (77.75) differ though the configuration is the same."
)

# Figure 3 / Figure 6 (§7.1): corpus sizes from 128 to 65,536 sentences, 10 epochs up to 100K steps
CORPUS_SIZES = tuple(128 * 2**k for k in range(10))


def _rows(table: dict, columns: tuple[str, ...], group: str, compared: tuple[str, ...]) -> tuple[PublishedRow, ...]:
    """The rows of `table[group]` this project runs, matched on the objective and the paper's settings.
    The model is not matched: a preset run with another base model (`--models`; the paper's
    bert-base-uncased cannot be had everywhere) is compared all the same, and the report names the
    model that ran above the table."""
    rows = []
    for label in compared:
        values = tuple((c, v) for c, v in zip(columns, table[group][label]) if v is not None)
        match = (("objective", OBJECTIVES[label]), ("settings", "paper"))
        rows.append(PublishedRow(label, match, values, group))
    return tuple(rows)


def _columns(metrics: dict) -> tuple[PublishedColumn, ...]:
    return tuple(PublishedColumn(name, names) for name, names in metrics.items())


def _table9_rows() -> tuple[PublishedRow, ...]:
    """Table 9's rows matched on the model as well: each checkpoint is its own group."""
    return tuple(
        PublishedRow(
            label,
            (("objective", OBJECTIVES[label]), ("settings", "paper"), ("model", model)),
            tuple(zip(TABLE9_COLUMNS, values)),
            model,
        )
        for model, rows in TABLE9.items()
        for label, values in rows.items()
    )


def _sbert_rows() -> tuple[PublishedRow, ...]:
    group = "Out-of-the-box supervised pre-trained models"
    return tuple(
        PublishedRow(
            label, (("objective", "none"), ("model", model)), tuple(zip(TABLE2_COLUMNS, TABLE2[group][label])), group
        )
        for label, model in SBERT.items()
    )


SOURCE = "the TSDAE paper (Wang, Reimers and Gurevych 2021)"
SETTINGS_NOTE = (
    "Every objective at its own paper's settings (docs/methods/tsdae.md M6, recorded per run); BERT-flow is not "
    "implemented."
)
PRESETS = {
    p.name: p
    for p in (
        Preset(
            "tsdae-table2",
            "tsdae",
            "sweeps/tsdae.py",
            "TSDAE Table 2 (unsupervised rows): TSDAE, MLM, CT, SimCSE trained on each domain's unlabelled "
            "sentences, average precision on AskUbuntu, CQADupStack, TwitterPara, SciDocs",
            {
                "models": MODEL,
                "objectives": "none,tsdae,mlm,ct,simcse",
                "seeds": "0-4",
                "corpus": ",".join(DOMAIN_SETS),
                "eval_sets": "in-domain",
                "simcse_settings": "tsdae-paper",
            },
            f"{SOURCE}, Table 2, test sets, mean over 5 seeds",
            _rows(TABLE2, TABLE2_COLUMNS, "Unsupervised learning based on BERT-base", ("TSDAE", "MLM", "CT", "SimCSE"))
            + _rows(TABLE2, TABLE2_COLUMNS, "Other previous unsupervised approaches", ("BERT-base-uncased",)),
            f"{SETTINGS_NOTE} Each run is scored on its own corpus's set only, so Avg. is the mean of the four "
            "task columns (each over its own runs), as the paper's is; a task with no runs leaves it empty.",
            paper=PAPER,
            columns=(*_columns(TABLE2_METRICS), TABLE2_AVERAGE),
            shown=(
                ("model", f"base model (the paper's: {MODEL})"),
                ("settings", "settings"),
                ("simcse_settings", "SimCSE's settings (the paper's: tsdae-paper)"),
                ("final_weights", "weights scored"),
                ("eval_max_length", "tokens scored"),
            ),
        ),
        Preset(
            "tsdae-table11",
            "tsdae",
            "sweeps/tsdae.py",
            "TSDAE Table 11 (Appendix F; Table 3's STSb column): TSDAE, CT, SimCSE, MLM trained on Wikipedia "
            "sentences, Spearman on STS12-16, STSb and SICK-R",
            {
                "models": MODEL,
                "objectives": "tsdae,ct,simcse,mlm",
                "seeds": "0-4",
                "corpus": "wiki",
                "eval_sets": ",".join(STS_SETS),
                "simcse_settings": "tsdae-paper",
            },
            f"{SOURCE}, Table 11 (Appendix F), test sets",
            _rows(TABLE11, TABLE11_COLUMNS, "Unsupervised method based on BERT-base", ("TSDAE", "CT", "SimCSE", "MLM")),
            f"{SETTINGS_NOTE} The paper's Wikipedia sample (as Carlsson et al.'s) is not published; the "
            "project's is wiki1m-prefix. Each STS set is scored over its subsets pooled (`<set>_spearman`).",
            paper=PAPER,
            columns=_columns(TABLE11_METRICS),
            shown=(
                ("model", f"base model (the paper's: {MODEL})"),
                ("corpus", "corpus"),
                ("settings", "settings"),
                ("simcse_settings", "SimCSE's settings (the paper's: tsdae-paper)"),
            ),
        ),
        Preset(
            "tsdae-table2-nli-first",
            "tsdae",
            "sweeps/tsdae.py",
            "TSDAE Table 2 (domain adaptation, NLI+STS -> target task): TSDAE, MLM, CT, SimCSE trained on each "
            "domain's unlabelled sentences from SBERT-base-nli-stsb-v2, average precision on the four tasks",
            {
                "models": SBERT["SBERT-base-nli-stsb-v2"],
                "objectives": "tsdae,mlm,ct,simcse",
                "seeds": "0-4",
                "corpus": ",".join(DOMAIN_SETS),
                "eval_sets": "in-domain",
                "simcse_settings": "tsdae-paper",
            },
            f"{SOURCE}, Table 2 (domain adaptation: NLI+STS -> target task), test sets",
            _rows(
                TABLE2, TABLE2_COLUMNS, "Domain adaptation: NLI+STS -> target task", ("TSDAE", "MLM", "CT", "SimCSE")
            ),
            f"{SETTINGS_NOTE} The NLI+STS stage is the paper's own released model (SBERT-base-nli-stsb-v2, Table 8), "
            "assumed to be the start of this block; the other block (target task -> NLI+STS) needs NLI training, "
            "which this project does not run.",
            paper=PAPER,
            columns=(*_columns(TABLE2_METRICS), TABLE2_AVERAGE),
            shown=(("model", "base model"), ("simcse_settings", "SimCSE's settings (the paper's: tsdae-paper)")),
        ),
        Preset(
            "tsdae-sbert",
            "tsdae",
            "sweeps/tsdae.py",
            "TSDAE Table 2 (out-of-the-box supervised models): SBERT-base-nli-v2 and SBERT-base-nli-stsb-v2 "
            "encoding each domain's test set as they are",
            {
                "models": ",".join(SBERT.values()),
                "objectives": "none",
                "seeds": "0",
                "corpus": ",".join(DOMAIN_SETS),
                "eval_sets": "in-domain",
            },
            f"{SOURCE}, Table 2 (out-of-the-box supervised pre-trained models), test sets",
            _sbert_rows(),
            "Encode-only rows: no training (`--objective none`, mean pooling as the models' own), matched on the "
            "model.",
            paper=PAPER,
            columns=(*_columns(TABLE2_METRICS), TABLE2_AVERAGE),
        ),
        Preset(
            "tsdae-table9",
            "tsdae",
            "sweeps/tsdae.py",
            "TSDAE Table 9 (Appendix C, other checkpoints): TSDAE, CT, SimCSE from ELECTRA-base, DistilRoBERTa-base, "
            "RoBERTa-base and BERT-base on each domain, average precision on the four tasks",
            {
                "models": ",".join(TABLE9_MODELS),
                "objectives": "tsdae,ct,simcse",
                "seeds": "0-4",
                "corpus": ",".join(DOMAIN_SETS),
                "eval_sets": "in-domain",
                "simcse_settings": "tsdae-paper",
            },
            f"{SOURCE}, Table 9 (Appendix C), test sets, mean over 5 seeds",
            _table9_rows(),
            f"{SETTINGS_NOTE} DistilBERT's rows are left out of the grid: transformers has no causal-LM decoder "
            "with cross-attention for DistilBERT, so TSDAE cannot run on it here (its CT and SimCSE rows compare "
            "when run with --models distilbert-base-uncased --objective ct,simcse). Rows match on the model.",
            paper=PAPER,
            columns=(
                *_columns(TABLE9_METRICS),
                PublishedColumn("Avg.", (), of=("AskU.", "CQADup.", "TwitterP.", "SciDocs")),
            ),
        ),
        *(
            Preset(
                name,
                "tsdae",
                "sweeps/tsdae.py",
                f"TSDAE {APPENDIX_A_WHAT[name]}: STS-B dev Spearman, the best every 1.5K of 30K steps",
                {
                    "models": MODEL,
                    "objectives": "tsdae",
                    "seeds": "0-4",
                    "corpus": APPENDIX_A_CORPUS,
                    "noise": grid[0],
                    "noise_ratio": grid[1],
                    "poolings": grid[2],
                    "decoder": grid[3],
                    "steps": APPENDIX_A_STEPS,
                    "eval_steps": APPENDIX_A_EVAL_STEPS,
                    "eval_sets": "none",
                },
                f"{SOURCE}, Appendix A, STS-B dev, mean over 5 seeds",
                APPENDIX_A_ROWS[name],
                APPENDIX_A_NOTE,
                paper=PAPER,
                columns=(DEV,),
                shown=(
                    ("model", f"base model (the paper's: {MODEL})"),
                    ("corpus", "corpus (the paper's: SNLI+MultiNLI sentences)"),
                    ("steps", "steps (the paper's: 30,000)"),
                ),
            )
            for name, grid in APPENDIX_A_GRIDS.items()
        ),
        Preset(
            "tsdae-fig3",
            "tsdae",
            "sweeps/tsdae.py",
            "TSDAE Figure 3 / Figure 6 (§7.1, Appendix G): corpus sizes 128-65,536 sentences, 10 epochs up to "
            "100K steps, each domain",
            {
                "models": MODEL,
                "objectives": "tsdae,mlm,ct,simcse",
                "seeds": "0-4",
                "corpus": ",".join(DOMAIN_SETS),
                "max_sentences": ",".join(map(str, CORPUS_SIZES)),
                "corpus_epochs": 10,
                "eval_sets": "in-domain",
                "simcse_settings": "tsdae-paper",
            },
            note="Every objective trains 10 epochs of each corpus size up to 100K steps (§7.1), SimCSE's one-epoch "
            "budget included, each epoch as its code forms its batches (params sampling, last_batch, epoch_steps): "
            "a shuffled pass, TSDAE dropping the last incomplete batch, MLM and SimCSE training it (SimCSE at 128 "
            "and 256 sentences: one batch of the whole corpus), CT drawing with replacement. What differs: the "
            "paper reports each size's best in-domain development score "
            "(TwitterPara: test) over the epochs; here the in-domain test sets are scored with each objective's "
            "final weights.",
            paper=PAPER,
        ),
    )
}


# Public config of the paper's model, for pricing without loading it: hidden size, layers, heads,
# intermediate size, vocabulary.
CONFIGS = {"bert-base-uncased": (768, 12, 12, 3072, 30522)}
TOKENS_PER_SENTENCE = 24  # the domains' titles and tweets: ~17 words, 1.3 tokens a word, [CLS] [SEP]
EPOCH_SENTENCES = 100_000  # an objective that trains one epoch of a corpus (SimCSE), priced at this size


def estimate(args) -> Estimate:
    """Trials of the grid (corpora x sizes x models x objectives x seeds; the untrained encoder once per
    model) and each trial's cost from the models' public configs: each objective's resolved settings
    (its paper's unless settings say otherwise), `TOKENS_PER_SENTENCE` tokens a sentence, the encoder
    cost model's throughput and memory (trainables/encoders/cost.py, cost.py `trial_memory_bytes`);
    evaluation not priced."""
    from transformers import BertConfig

    from trainables.core.method import TrialCost
    from trainables.encoders import cost as encoder_cost
    from trainables.methods.tsdae.cost import PASSES, trial_memory_bytes
    from trainables.methods.tsdae.settings import corpus_settings

    corpora, sizes, models, objectives = args.corpus, args.max_sentences or [None], args.models, args.objectives
    seeds = len(args.seeds)
    from trainables.methods.tsdae.method import TSDAE

    # the untrained encoder: one run per model; TSDAE: one per configuration (noise, ratio, pooling, decoder)
    runs = {o: 1 if o == "none" else seeds * len(TSDAE.configurations(args, o, "cls")) for o in objectives}
    trials = len(corpora) * len(sizes) * len(models) * sum(runs.values())
    if any(m not in CONFIGS for m in models):
        return Estimate(trials, None, "GPU-hours priced for the paper's bert-base-uncased only")
    precision = "tf32" if args.precision == "auto" else args.precision
    costs = []
    for _corpus in corpora:
        for model in models:
            hidden, layers, heads, intermediate, vocab = CONFIGS[model]
            config = BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                                intermediate_size=intermediate, vocab_size=vocab)  # fmt: skip
            for size in sizes:
                for objective in objectives:
                    label = f"--max-sentences {size}" if size else f"--corpus {_corpus}"
                    settings = corpus_settings(objective, args, size or EPOCH_SENTENCES, 512, label)
                    steps, batch = int(settings.get("steps") or 0), int(settings.get("batch_size") or 1)
                    passes = PASSES.get(objective, 1.0)
                    shape = encoder_cost.shape_from_config(config, layers, batch, TOKENS_PER_SENTENCE)
                    tokens = int(passes * batch * TOKENS_PER_SENTENCE * steps)
                    cost = TrialCost(
                        memory_bytes=trial_memory_bytes(shape, objective),
                        seconds=encoder_cost.trial_seconds(shape, tokens, 0, 1, args.gpu_tflops, precision, steps, 0),
                        weight_bytes=encoder_cost.weight_bytes(shape),
                    )
                    costs.extend([cost] * runs[objective])
    return Estimate(
        trials,
        sum(c.seconds for c in costs) / 3600,
        "",
        f"TSDAE and its baselines: {precision} on an H100 (--gpu-tflops scales it), {TOKENS_PER_SENTENCE} tokens "
        f"a sentence, one-epoch objectives at {EPOCH_SENTENCES:,} sentences, evaluation not priced",
        costs=tuple(costs),
    )
