"""The Ray Tune trial of a TSDAE sweep: `eval_steps` steps of `Training` an epoch, STS-B dev after each,
the evaluation suite at the end with the weights `final_weights` names (`last` or `best-dev`). Scoring
encodes at `eval_max_length` tokens, whatever the training length. Official CT with `ct_keep` better
scores both copies each epoch and takes the better as the epoch's model (the CT code's Top-CT-Eval);
`best_copy` records which copy the best-dev weights are."""

from __future__ import annotations

from pathlib import Path

from trainables.methods.tsdae.training import Training
from trainables.training.trainable import EpochTrainable


class TSDAETrainable(EpochTrainable):
    def build(self, config: dict, data) -> None:
        self.dev, self.suite = data.dev, data.suites[config["corpus"]]
        self.training = Training(config, data.corpora[(config["corpus"], config.get("max_sentences"))], self.device)
        self.st = self.training.st
        self.best_weights = None
        self.epoch_copy = self.best_copy = 2

    def train_epoch(self, epoch: int) -> dict:
        config = self.trial_config
        steps = min(int(config["eval_steps"]), int(config["steps"]) - (epoch - 1) * int(config["eval_steps"]))
        return {"train_loss": self.training.run(steps)}

    def _scores(self, suite, model=None) -> dict:
        model = self.st if model is None else model
        model.eval()
        training_length = model.max_seq_length
        model.max_seq_length = int(self.trial_config.get("eval_max_length") or training_length)
        try:
            embeddings = model.encode(suite.sentences, batch_size=64, convert_to_numpy=True)
        finally:
            model.max_seq_length = training_length
        return suite.score(embeddings)

    def evaluate(self) -> dict:
        scores = self._scores(self.dev)
        out = {"dev_spearman": scores["stsb_dev_spearman"], "dev_pearson": scores["stsb_dev_pearson"]}
        first = self.training.first_copy()
        if first is None:
            return out
        other = self._scores(self.dev, first)
        out.update(dev_spearman_copy1=other["stsb_dev_spearman"], dev_spearman_copy2=out["dev_spearman"])
        self.epoch_copy = 1 if other["stsb_dev_spearman"] > out["dev_spearman"] else 2  # the CT code's `>`
        if self.epoch_copy == 1:
            out.update(dev_spearman=other["stsb_dev_spearman"], dev_pearson=other["stsb_dev_pearson"])
        return out

    def remember_best(self) -> None:
        model = self.training.first_copy() if self.epoch_copy == 1 else self.st
        self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        self.best_copy = self.epoch_copy

    def _with_best(self, action):
        latest = {k: v.detach().to("cpu", copy=True) for k, v in self.st.state_dict().items()}
        self.st.load_state_dict(self.best_weights)
        try:
            return action()
        finally:
            self.st.load_state_dict(latest)

    def save_best(self, target: Path) -> None:
        """The model folder the trial keeps: once the trial is done with `final_weights` last, the last
        weights (the ones its evaluation sets scored, and what `runs:/` and `sweep:` references read);
        else the best-dev ones (what a resumed trial reads back). The folder's max_seq_length is the
        scoring length, so whoever encodes with it (SED, `runs:/`, sentence-transformers) does not
        truncate at the training length."""
        training_length = self.st.max_seq_length
        self.st.max_seq_length = int(self.trial_config.get("eval_max_length") or training_length)
        try:
            if self.trial_config.get("final_weights") == "last" and self.epoch >= self.epochs:
                self.st.save(str(target))
            elif self.best_weights is not None:
                self._with_best(lambda: self.st.save(str(target)))
        finally:
            self.st.max_seq_length = training_length

    def load_best(self, source: Path) -> None:
        from sentence_transformers import SentenceTransformer

        self.best_weights = SentenceTransformer(str(source), device="cpu").state_dict()

    def final_metrics(self) -> dict:
        """The suite's scores with the last weights (`final_weights` last: the TSDAE paper's fixed step
        budget) or the best-dev ones (SimCSE's rule)."""
        kept = {"best_copy": self.best_copy} if self.training.first_copy() is not None else {}
        passes = self.training.batches.passes()
        if passes is not None:  # the passes over the corpus its batches made
            kept["corpus_passes"] = passes
        if self.suite is None:
            return kept
        if self.trial_config.get("final_weights") == "last":
            return {**kept, **self._scores(self.suite)}
        if self.best_weights is None:
            return kept
        return {**kept, **self._with_best(lambda: self._scores(self.suite))}

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.st.parameters())

    def trained_parameters(self) -> list:
        return self.training.trained_parameters()

    def method_state(self, checkpoint_dir: Path) -> dict:
        return {**self.training.state_dict(), "best_copy": self.best_copy}

    def load_method_state(self, state: dict, checkpoint_dir: Path) -> None:
        self.training.load_state_dict(state)
        self.best_copy = int(state.get("best_copy", 2))


class TSDAEData:
    """Shipped once to every trial: the corpora by (name, max_sentences), STS-B dev, and the
    evaluation suite of each corpus (None: none)."""

    def __init__(self, corpora: dict, dev, suites: dict):
        self.corpora, self.dev, self.suites = corpora, dev, suites
