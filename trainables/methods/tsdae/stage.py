"""The `tsdae` upstream stage (TSDAE once per model, for TMFT trials that start from it:
`--improvement tsdae`): its settings (`--tsdae-*`, `TsdaeStage.settings`), config and computation, and
the noise setting the method and the stage share."""

from __future__ import annotations

from pathlib import Path

from trainables.core import settings as shared
from trainables.core.settings import Choice, Int, Setting, Text
from trainables.methods.tsdae.checks import check_corpus, check_decoder, read_corpus
from trainables.methods.tsdae.noise import NOISES
from trainables.methods.tsdae.settings import LAST_BATCH, PAPER
from trainables.stages.upstream import STAGES, StageKind, stage_settings

NOISE = Setting(
    "noise",
    Choice(NOISES),
    "delete",
    "delete: the paper's deletion p=0.6 drawn every time; keep: the ST v3 examples' keep-0.6 variant; swap, mask, "
    "replace, add: Appendix A Table 5's other types, 0.3 of the words (noise.py)",
    source="TSDAE paper §3.2, Appendix A Tables 5-6",
)
_TSDAE = PAPER["tsdae"]
# The stage trains at TSDAE's settings (settings.py PAPER) but for the step budget and the length,
# which are the project's (10,000 steps, 128 tokens).
SETTINGS = stage_settings(
    "tsdae",
    (
        Setting("steps", Int(low=1), 10_000, "TSDAE stage: optimiser steps (project; the paper: 100K)"),
        shared.BATCH_SIZE.but(
            default=_TSDAE["batch_size"].value,
            help="TSDAE stage: sentences a batch",
            source=_TSDAE["batch_size"].source,
        ),
        shared.LR.but(
            default=_TSDAE["lr"].value,
            help="TSDAE stage: AdamW, constant, weight decay 0, clipping 1",
            source=_TSDAE["lr"].source,
        ),
        shared.POOLING.but(
            kind=Choice(("cls", "mean")),
            default=_TSDAE["pooling"].value,
            help="TSDAE stage: how token vectors become a sentence vector",
            source=_TSDAE["pooling"].source,
        ),
        NOISE.but(help="TSDAE stage: " + NOISE.help),
        shared.MAX_LENGTH.but(
            kind=Int(low=1),
            default=128,
            help="TSDAE stage: tokens (project; the released code truncates at the model's limit only)",
        ),
        Setting(
            "corpus", Text(), "wiki", "TSDAE stage: 'wiki' (the Wikipedia sample) or a text file, one sentence a line"
        ),
        Setting("max_sentences", Int(low=1), None, "TSDAE stage: the first N sentences of the corpus"),
    ),
)


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
        "weight_decay": 0.0,
        "warmup_steps": 0,
        "clip": 1.0,
        "dropout": True,
        "decoder_dropout": True,
        # TSDAE's DataLoader (settings.py LAST_BATCH): a shuffled pass an epoch, the last incomplete batch dropped
        "sampling": "epochs",
        "last_batch": LAST_BATCH["tsdae"],
    }


def compute(spec: dict, out_dir: Path) -> dict:
    """Run the TSDAE stage of `spec` for its step budget (the last weights are kept, as for DAPT)
    and write `out_dir/encoder/` (a transformers model folder TMFT starts from)."""
    import time

    from trainables.methods.tsdae.training import Training  # torch: imported when the stage runs
    from trainables.stages.progress import StageProgress
    from trainables.training.device import pick_device, seed_everything
    from trainables.training.divergence import check_converging

    started = time.perf_counter()
    config = spec["config"]
    seed_everything(int(config["seed"]))
    sentences, corpus, _ = read_corpus(
        config["corpus"], spec["data_dir"], config.get("max_sentences"), "--tsdae-corpus"
    )
    device = pick_device()
    training = Training({**config, "_model_path": spec["model_path"]}, sentences, device)
    progress = StageProgress(spec, int(config["steps"]))
    loss = training.run(int(config["steps"]), progress)
    progress.finish()
    check_converging(1, loss, training.trained_parameters(), config["lr"], "lower --tsdae-lr or check --tsdae-corpus")
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
    stage itself, what that method asks of it: its settings (`--tsdae-*` flags, typed), their check,
    the stage config and the params every downstream trial records."""

    downstream, task = "tsdae+tmft", "denoising"
    compute = staticmethod(compute)
    recorded = {"tsdae_corpus": "corpus", "tsdae_steps": "steps"}
    settings = SETTINGS

    @staticmethod
    def check(a: dict) -> None:
        """What the settings alone cannot check: the corpus is a known name or a text file."""
        check_corpus(a["tsdae_corpus"], "--tsdae-corpus")

    @staticmethod
    def prepare(a: dict, paths: dict, data_dir) -> str:
        """The corpus checksum, once the corpus is known to fill a batch and every model (id -> folder) to
        have a decoder."""
        from trainables.data.sentences import check_corpus_size

        sentences, _, checksum = read_corpus(a["tsdae_corpus"], data_dir, a["tsdae_max_sentences"], "--tsdae-corpus")
        check_corpus_size(sentences, a["tsdae_batch_size"], "--tsdae-corpus", a["tsdae_corpus"], "one TSDAE batch")
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
