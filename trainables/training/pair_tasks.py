"""Fine-tuning tasks: what a pair of embeddings (u, v) is trained and scored on (docs/methods/electra.md M1, M2).

A `Task` names its data, its labels, its loss on (u, v), what evaluation keeps per pair, and its
metrics; the TMFT loop (trainables/methods/tmft/method.py), the tokeniser (trainables/training/tokenized.py), the MLflow
callback and the runner look tasks up here by name, so a new task is one new class.

| task      | data                          | loss on (u, v)                                   | primary (companion)   |
|-----------|-------------------------------|--------------------------------------------------|-----------------------|
| stsb      | STS-B, gold 0-5               | MSE(cos(u, v), gold / 5)                         | spearman (pearson)    |
| mrpc      | MRPC, label 0/1               | BCE-with-logits, the logit is the raw cos(u, v)  | f1 (accuracy)         |
| sick      | SICK entailment, 3 classes    | CE of Linear(3h, 3) on [u; v; abs(u - v)]        | f1, macro (accuracy)  |
| wordsim   | word pairs, score in [0, 1]   | MSE(cos(u, v), score)                            | spearman (pearson)    |

Metrics are x100. MRPC: after every epoch the F1-best and the accuracy-best thresholds on the dev
cosines are chosen (sweeping every cut between sorted dev scores; thresholding sigmoid(cos) is the
same, sigmoid being monotonic) and applied unchanged to test; `dev_threshold_f1` /
`dev_threshold_accuracy` log them (in cosine units). SICK: macro-F1 over the labels present in the
gold or the predictions (sklearn's `f1_score(average="macro")`, computed with numpy).
Word similarity also reports the Spearman of negative Euclidean and Manhattan distances and of the
dot product, and their max with the cosine (`spearman_max4`): the authors' selection rule
(`--ws-selection max4`); the default selects on the cosine only (`spearman`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trainables.core.registry import Registry
from trainables.evaluation.metrics import correlations

if TYPE_CHECKING:
    import torch
    from torch import nn

# A primary metric -> the companion reported beside it (Table 2: Spearman / Pearson).
COMPANIONS = {"spearman": "pearson", "f1": "accuracy"}


def get_task(name: str) -> "Task":
    """The task registered under `name` (SweepInputError naming the known ones otherwise)."""
    return TASKS.get(name)()


def task_names(sweepable_only: bool = True) -> list[str]:
    return TASKS.names(where=lambda cls: cls.sweepable or not sweepable_only)


def primary_metric(task: str | None, config: dict | None = None) -> str:
    """The metric a task selects its best epoch by ('spearman', 'f1', ...); unknown tasks: spearman."""
    return get_task(task or "stsb").primary_for(config or {}) if (task or "stsb") in TASKS else "spearman"


# --- metrics (numpy only; sklearn is not a dependency) ---------------------------------------
def binary_f1(gold, predicted) -> float:
    """F1 of the positive class (1); 0 when there is no true or predicted positive."""
    gold, predicted = np.asarray(gold).astype(bool), np.asarray(predicted).astype(bool)
    tp = float(np.sum(gold & predicted))
    denominator = 2 * tp + float(np.sum(~gold & predicted)) + float(np.sum(gold & ~predicted))
    return 0.0 if denominator == 0 else 2 * tp / denominator


def macro_f1(gold, predicted) -> float:
    """Unweighted mean of per-class F1 over the classes present in gold or predictions."""
    gold, predicted = np.asarray(gold), np.asarray(predicted)
    classes = np.union1d(np.unique(gold), np.unique(predicted))
    return float(np.mean([binary_f1(gold == c, predicted == c) for c in classes])) if len(classes) else 0.0


def accuracy(gold, predicted) -> float:
    gold, predicted = np.asarray(gold), np.asarray(predicted)
    return float(np.mean(gold == predicted)) if len(gold) else 0.0


def threshold_cuts(scores, gold) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every distinct way to call the top-k scores positive: (thresholds, f1, accuracy) per cut.

    A pair is predicted positive iff its score > threshold. Thresholds are midpoints between
    neighbouring distinct sorted scores, plus one above the maximum (nothing positive) and one
    below the minimum (everything positive).
    """
    scores, gold = np.asarray(scores, dtype=np.float64), np.asarray(gold).astype(bool)
    n = len(scores)
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], gold[order]
    k = np.arange(n + 1)  # number predicted positive
    tp = np.concatenate([[0], np.cumsum(y)])
    positives = int(y.sum())
    valid = np.ones(n + 1, dtype=bool)
    valid[1:n] = s[:-1] > s[1:]  # cannot cut between tied scores
    thresholds = np.empty(n + 1)
    thresholds[0] = s[0] + 1.0 if n else 0.0
    thresholds[n] = s[-1] - 1.0 if n else 0.0
    thresholds[1:n] = (s[:-1] + s[1:]) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(k + positives > 0, 2 * tp / np.maximum(k + positives, 1), 0.0)
    acc = (tp + (n - positives) - (k - tp)) / max(n, 1)
    return thresholds[valid], f1[valid], acc[valid]


def best_threshold(scores, gold, metric: str = "f1") -> float:
    """The dev threshold with the best F1 (or accuracy); ties go to the higher threshold."""
    thresholds, f1, acc = threshold_cuts(scores, gold)
    values = f1 if metric == "f1" else acc
    return float(thresholds[int(np.argmax(values))])


# --- tasks ------------------------------------------------------------------------------------
class Task:
    """A pair task. Subclasses set the class attributes and override what differs."""

    name = ""
    primary = "spearman"
    companion = "pearson"
    sweepable = True  # offered as --task of the sweep scripts
    description = ""
    # {split: evaluation set} when the task's dev and test are evaluation sets scored by the cosine
    # alone (trainables/evaluation/sets.py): then a zero-epoch sweep scores all layers from one pass.
    zero_shot_sets: dict = {}

    def primary_for(self, config: dict) -> str:
        return self.primary

    def load(self, data_dir) -> tuple[dict[str, list], dict[str, str]]:
        """({split: [example with sentence1, sentence2]}, {name: checksum})."""
        raise NotImplementedError

    def label(self, example) -> float:
        return float(example.score)

    def build_head(self, hidden_size: int) -> nn.Module | None:
        return None

    def loss(self, u: torch.Tensor, v: torch.Tensor, labels: torch.Tensor, head) -> torch.Tensor:
        raise NotImplementedError

    def outputs(self, u: torch.Tensor, v: torch.Tensor, head) -> torch.Tensor:
        """What evaluation keeps per pair (one row per pair)."""
        import torch.nn.functional as F

        return F.cosine_similarity(u, v)

    def metrics(self, outputs: dict[str, np.ndarray], labels: dict[str, np.ndarray]) -> dict[str, float]:
        """{<split>_<metric>} for the dev and test outputs of one evaluation."""
        raise NotImplementedError


TASKS = Registry("task", Task)


class CosineRegression(Task):
    """ŷ = cos(u, v), L = MSE(ŷ, gold / scale); Spearman and Pearson x100."""

    scale = 1.0

    def loss(self, u, v, labels, head):
        import torch.nn.functional as F

        return F.mse_loss(F.cosine_similarity(u, v), labels / self.scale)

    def metrics(self, outputs, labels):
        out = {}
        for split, scores in outputs.items():
            for name, value in correlations(np.asarray(scores).reshape(len(scores), -1)[:, 0], labels[split]).items():
                out[f"{split}_{name}"] = value
        return out


@TASKS.register("stsb")
class STSB(CosineRegression):
    name, scale = "stsb", 5.0
    zero_shot_sets = {"dev": "stsb_dev", "test": "stsb"}
    description = "STS Benchmark, MSE of the cosine against gold / 5"

    def load(self, data_dir):
        from trainables.data.stsb import load_stsb, stsb_checksums

        return load_stsb(data_dir), stsb_checksums(data_dir)


class TranslatedSTSB(STSB):
    """A machine-translated STS-B (the paper's Appendix B): STS-B's loss and metrics, its own data
    (trainables/data/multilingual_stsb.py) and the paper's models for its language."""

    language = ""
    zero_shot_sets: dict = {}

    @property
    def paper_models(self) -> str | None:
        from trainables.data.multilingual_stsb import PAPER_MODELS

        return PAPER_MODELS.get(self.language)  # None: a release language the paper did not run

    def load(self, data_dir):
        from trainables.data.multilingual_stsb import load_translated

        return load_translated(self.language, data_dir)


def _translated_tasks():
    """KorSTS and German and Spanish STS-B (the paper's), then every other language the stsb-multi-mt release in
    the default data folder holds: (task name, language, description)."""
    from trainables.core.paths import default_data_dir
    from trainables.data.multilingual_stsb import LANGUAGE_NAMES, PAPER_LANGUAGES, release_languages

    yield "korsts", "ko", "KorSTS (Korean STS-B, kakaobrain)"
    yield "stsb-de", "de", "German STS-B (stsb-multi-mt)"
    yield "stsb-es", "es", "Spanish STS-B (stsb-multi-mt)"
    for language in release_languages(default_data_dir()):
        if language not in PAPER_LANGUAGES:
            name = LANGUAGE_NAMES.get(language, language)
            yield f"stsb-{language}", language, f"{name} STS-B (stsb-multi-mt, found in the data folder)"


for _name, _language, _what in _translated_tasks():
    TASKS.register(_name)(
        type(
            f"TranslatedSTSB_{_language}",
            (TranslatedSTSB,),
            {"name": _name, "language": _language, "description": f"{_what}, as stsb"},
        )
    )


@TASKS.register("wordsim")
class WordSimilarity(CosineRegression):
    """Word pairs (M2): outputs (cos, -euclidean, -manhattan, dot) so the authors' max rule can be scored."""

    name, scale = "wordsim", 1.0
    sweepable = False
    description = "RG-65 + SimLex-999 + SimVerb-3500 + WordSim-353-sim, MSE of the cosine against the [0, 1] score"
    SELECTIONS = {"cosine": "spearman", "max4": "spearman_max4"}

    def primary_for(self, config):
        return self.SELECTIONS[config.get("ws_selection", "cosine")]

    def load(self, data_dir, seed: int = 0, split_method: str = "numpy"):
        from trainables.data.word_similarity import build_ws_dataset, ws_checksum

        return build_ws_dataset(data_dir, seed, split_method), {"wordsim": ws_checksum(data_dir)}

    def outputs(self, u, v, head):
        import torch
        import torch.nn.functional as F

        return torch.stack(
            [
                F.cosine_similarity(u, v),
                -torch.norm(u - v, p=2, dim=1),
                -torch.norm(u - v, p=1, dim=1),
                (u * v).sum(dim=1),
            ],
            dim=1,
        )

    def metrics(self, outputs, labels):
        out = {}
        for split, scores in outputs.items():
            scores = np.asarray(scores).reshape(len(scores), -1)
            cosine = correlations(scores[:, 0], labels[split])
            out[f"{split}_spearman"], out[f"{split}_pearson"] = cosine["spearman"], cosine["pearson"]
            spearmans = [cosine["spearman"]]
            for column, name in enumerate(("euclidean", "manhattan", "dot")[: scores.shape[1] - 1], start=1):
                spearmans.append(correlations(scores[:, column], labels[split])["spearman"])
                out[f"{split}_spearman_{name}"] = spearmans[-1]
            out[f"{split}_spearman_max4"] = float(np.nanmax(spearmans))
        return out


@TASKS.register("mrpc")
class MRPC(Task):
    name, primary, companion = "mrpc", "f1", "accuracy"
    description = "MRPC paraphrase, BCE-with-logits on the raw cosine, threshold chosen on dev"

    def load(self, data_dir):
        from trainables.data.mrpc import load_mrpc, mrpc_checksums

        return load_mrpc(data_dir), mrpc_checksums(data_dir)

    def loss(self, u, v, labels, head):
        import torch.nn.functional as F

        return F.binary_cross_entropy_with_logits(F.cosine_similarity(u, v), labels)

    def metrics(self, outputs, labels):
        dev, gold = np.asarray(outputs["dev"]).ravel(), np.asarray(labels["dev"]) > 0.5
        thresholds = {"f1": best_threshold(dev, gold, "f1"), "accuracy": best_threshold(dev, gold, "accuracy")}
        out = {"dev_threshold_f1": thresholds["f1"], "dev_threshold_accuracy": thresholds["accuracy"]}
        for split, scores in outputs.items():
            scores, gold = np.asarray(scores).ravel(), np.asarray(labels[split]) > 0.5
            out[f"{split}_f1"] = 100.0 * binary_f1(gold, scores > thresholds["f1"])
            out[f"{split}_accuracy"] = 100.0 * accuracy(gold, scores > thresholds["accuracy"])
        return out


@TASKS.register("sick")
class SICK(Task):
    name, primary, companion = "sick", "f1", "accuracy"
    n_classes = 3
    description = "SICK entailment, cross-entropy of Linear(3h, 3) on [u; v; |u - v|], macro-F1"

    def load(self, data_dir):
        from trainables.data.sick import load_sick, sick_checksums

        return load_sick(data_dir), sick_checksums(data_dir)

    def label(self, example) -> float:
        return float(example.label)

    def build_head(self, hidden_size):
        from torch import nn

        return nn.Linear(3 * hidden_size, self.n_classes)

    def outputs(self, u, v, head):
        import torch

        return head(torch.cat([u, v, torch.abs(u - v)], dim=1))

    def loss(self, u, v, labels, head):
        import torch.nn.functional as F

        return F.cross_entropy(self.outputs(u, v, head), labels.long())

    def metrics(self, outputs, labels):
        out = {}
        for split, logits in outputs.items():
            predicted = np.asarray(logits).argmax(axis=1)
            gold = np.asarray(labels[split]).astype(int)
            out[f"{split}_f1"] = 100.0 * macro_f1(gold, predicted)
            out[f"{split}_accuracy"] = 100.0 * accuracy(gold, predicted)
        return out
