"""Linear CKA between two models' layers (Kornblith et al. 2019; ELECTRA paper, Figure 3).

Definition (docs/methods/electra.md M1): with K = X Xᵀ and L = Y Yᵀ the linear Gram matrices of two
representations of the same n sentences, K~ = H K H and L~ = H L H their double-centred
versions (H = I - 11ᵀ/n), the biased-HSIC CKA is <K~, L~>_F / (||K~||_F ||L~||_F).
`gram_cka` computes exactly that; `linear_cka` computes the same number in feature space,
||Ycᵀ Xc||²_F / (||Xcᵀ Xc||_F ||Ycᵀ Yc||_F) with column-centred Xc, Yc, which needs no n x n
matrix (the two agree to rounding: tests check it).

`compare_models` embeds the STS-B test sentences (mean pooling of every hidden state,
`trainables.encoders.loading.mean_pool`) with two pretrained models and, optionally, with the TMFT
checkpoints of a finished sweep at their best-dev epoch (the `best/` folder beside each
`trial.json`, as the authors compared them; `encoder/`, the last epoch, only for checkpoints
written before `best/` existed, with a warning), and returns one CKA per layer index
(0 = embedding output) up to the shallower model's depth.
By default the sentences are all 2,758 of the test split (sentence1 and sentence2 of every pair,
duplicates included), as the authors' code does; `unique=True` takes the 2,552 unique ones in
order of first appearance.

`run_cka` (the command) writes cka.csv, cka.png and cka.svg into a folder or, for an object-store
URI `--out`, uploads them there (analysis/outputs.py), and logs them as artifacts of an MLflow run.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from trainables.core.errors import SweepInputError

log = logging.getLogger(__name__)
CKA_ROLE = "cka"


# ---- the measure -------------------------------------------------------------------------
def center_gram(gram: np.ndarray) -> np.ndarray:
    """H K H for H = I - 11ᵀ/n, computed by subtracting row and column means."""
    gram = np.asarray(gram, dtype=np.float64)
    return gram - gram.mean(axis=0, keepdims=True) - gram.mean(axis=1, keepdims=True) + gram.mean()


def gram_cka(gram_x: np.ndarray, gram_y: np.ndarray) -> float:
    """CKA of two n x n Gram matrices with the biased HSIC estimator."""
    kx, ky = center_gram(gram_x), center_gram(gram_y)
    return float(np.sum(kx * ky) / (np.linalg.norm(kx) * np.linalg.norm(ky)))


def linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA of two representations (n x d1, n x d2) of the same n examples."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"need two matrices with the same number of rows, got {x.shape} and {y.shape}")
    x = x - x.mean(axis=0, keepdims=True)
    y = y - y.mean(axis=0, keepdims=True)
    cross = np.linalg.norm(y.T @ x) ** 2
    return float(cross / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)))


# ---- sentences and embeddings ---------------------------------------------------------------
def stsb_test_sentences(data_dir, max_sentences: int | None = None, unique: bool = False) -> list[str]:
    """The STS-B test sentences (sentence1, sentence2 of each pair in file order)."""
    from trainables.data.stsb import load_stsb

    pairs = load_stsb(data_dir, splits=("test",))["test"]
    sentences = [s for pair in pairs for s in (pair.sentence1, pair.sentence2)]
    if unique:
        sentences = list(dict.fromkeys(sentences))
    return sentences[:max_sentences] if max_sentences else sentences


def _device():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def hidden_state_embeddings(model_dir, sentences: list[str], batch_size: int = 64) -> list[np.ndarray]:
    """Mean-pooled embeddings of every hidden state: a list (index 0 = embedding output) of
    n x h arrays, for the HF model folder `model_dir` (its own tokenizer; truncation at the
    model's maximum length; batches sorted by length, results in the input order)."""
    import torch
    from transformers import AutoTokenizer

    from trainables.encoders.loading import load_pretrained, mean_pool

    model_dir = str(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_pretrained(model_dir).to(_device()).eval()
    max_length = min(int(tokenizer.model_max_length), int(getattr(model.config, "max_position_embeddings", 512)))
    depth = int(model.config.num_hidden_layers)
    lengths = [len(ids) for ids in tokenizer(sentences, truncation=True, max_length=max_length)["input_ids"]]
    order = np.argsort(lengths, kind="stable")
    chunks: list[list[np.ndarray]] = []
    with torch.inference_mode():
        for start in range(0, len(sentences), batch_size):
            batch = [sentences[i] for i in order[start : start + batch_size]]
            encoded = tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            encoded = {k: v.to(model.device) for k, v in encoded.items() if k in ("input_ids", "attention_mask")}
            outputs = model(**encoded, output_hidden_states=True)
            states = outputs.hidden_states or ()
            if len(states) != depth + 1:
                if depth != 0:
                    raise RuntimeError(f"{model_dir}: {len(states)} hidden states for {depth} layers")
                states = (outputs.last_hidden_state,)  # a layer-0 encoder reports no hidden states
            chunks.append([mean_pool(h, encoded["attention_mask"]).double().cpu().numpy() for h in states])
    inverse = np.argsort(order, kind="stable")
    return [np.concatenate([c[i] for c in chunks])[inverse] for i in range(len(chunks[0]))]


# ---- checkpoints of a finished sweep ------------------------------------------------------
def find_checkpoints(directory) -> pd.DataFrame:
    """Every trial checkpoint under `directory`: one row per `trial.json` with its best-dev `best/`
    (else its last-epoch `encoder/`) beside it (columns model, layer, seed, method, task, encoder,
    weights: "best-dev" or "last epoch")."""
    directory = Path(directory)
    if not directory.is_dir():
        raise SweepInputError(f"Checkpoint directory {directory} does not exist.")
    rows = []
    for path in sorted(directory.rglob("trial.json")):
        encoder, weights = path.parent / "best", "best-dev"
        if not (encoder / "config.json").is_file():
            encoder, weights = path.parent / "encoder", "last epoch"
            if not (encoder / "config.json").is_file():
                log.warning("skipping %s: no best/ or encoder/ model folder beside it", path)
                continue
            log.warning("%s has no best-dev weights (best/): using its last epoch (encoder/)", path.parent)
        trial = json.loads(path.read_text())
        rows.append(
            {
                "model": str(trial.get("model")),
                "layer": int(trial["layer"]),
                "seed": trial.get("seed"),
                "method": trial.get("method", "tmft"),
                "task": trial.get("task"),
                "encoder": str(encoder),
                "weights": weights,
            }
        )
    columns = ["model", "layer", "seed", "method", "task", "encoder", "weights"]
    return pd.DataFrame(rows, columns=columns)


def _same_model(recorded: str, requested: str, resolved: Path) -> bool:
    if recorded == requested:
        return True
    try:
        return Path(recorded).expanduser().resolve() == resolved
    except OSError:
        return False


# ---- the comparison -------------------------------------------------------------------------
def compare_models(
    model_a: str, model_b: str, sentences: list[str], checkpoints=None, batch_size: int = 64
) -> pd.DataFrame:
    """CKA per layer index between two models, pretrained and (given `checkpoints`) fine-tuned.

    Returns rows (source, method, layer, seed, cka, model_a, model_b, n_sentences); `source` is
    "pretrained" or "finetuned" (one row per layer and seed present for both models).
    """
    from trainables.encoders.loading import resolve_model

    if len(sentences) < 2:
        raise SweepInputError("CKA needs at least 2 sentences.")
    paths = {m: resolve_model(m) for m in (model_a, model_b)}
    states = {m: hidden_state_embeddings(paths[m], sentences, batch_size) for m in (model_a, model_b)}
    depth = min(len(states[model_a]), len(states[model_b])) - 1
    rows = [
        {
            "source": "pretrained",
            "method": None,
            "layer": layer,
            "seed": None,
            "cka": linear_cka(states[model_a][layer], states[model_b][layer]),
        }
        for layer in range(depth + 1)
    ]
    if checkpoints is not None:
        rows += _finetuned_rows(model_a, model_b, paths, find_checkpoints(checkpoints), sentences, batch_size)
    frame = pd.DataFrame(rows)
    frame["model_a"], frame["model_b"], frame["n_sentences"] = model_a, model_b, len(sentences)
    return frame


def _finetuned_rows(model_a, model_b, paths, found: pd.DataFrame, sentences, batch_size) -> list[dict]:
    side = {}
    for model in (model_a, model_b):
        mine = found[[_same_model(m, model, paths[model]) for m in found["model"]]]
        side[model] = {(r.method, r.layer, r.seed): r.encoder for r in mine.itertuples()}
        if not side[model]:
            raise SweepInputError(
                f"No checkpoint for model {model!r} under the checkpoint directory "
                f"(models found: {', '.join(sorted(found['model'].unique())) or 'none'})."
            )
    common = sorted(set(side[model_a]) & set(side[model_b]), key=lambda k: (str(k[0]), k[1], str(k[2])))
    if not common:
        raise SweepInputError(f"No (method, layer, seed) has checkpoints for both {model_a!r} and {model_b!r}.")
    rows = []
    for method, layer, seed in common:
        embedded = [
            hidden_state_embeddings(side[m][(method, layer, seed)], sentences, batch_size) for m in (model_a, model_b)
        ]
        for states in embedded:
            if len(states) <= layer:
                raise SweepInputError(f"Checkpoint of layer {layer} has only {len(states) - 1} layers.")
        rows.append(
            {
                "source": "finetuned",
                "method": method,
                "layer": layer,
                "seed": seed,
                "cka": linear_cka(embedded[0][layer], embedded[1][layer]),
            }
        )
    return rows


# ---- outputs --------------------------------------------------------------------------------
def plot_cka(frame: pd.DataFrame):
    """Line plot of CKA against layer index: pretrained, and fine-tuned (mean ± std over seeds)."""
    import matplotlib
    from matplotlib.ticker import MaxNLocator

    from analysis.names import display_names, method_name
    from analysis.plots import new_figure

    names = display_names([frame["model_a"].iloc[0], frame["model_b"].iloc[0]])
    fig, ax = new_figure((7.0, 4.4))
    pre = frame[frame["source"] == "pretrained"].sort_values("layer")
    ax.plot(
        pre["layer"], pre["cka"], marker="o", markersize=4, color="black", linestyle="--", zorder=4, label="pretrained"
    )
    tuned = frame[frame["source"] == "finetuned"]
    for i, (method, group) in enumerate(tuned.groupby("method", sort=True)):
        stats = group.groupby("layer")["cka"].agg(["mean", "std", "count"]).reset_index()
        color = matplotlib.colormaps["tab10"](i)
        counts = sorted(stats["count"].unique())
        n = "/".join(str(c) for c in counts) + (" seed" if counts == [1] else " seeds")
        ax.plot(
            stats["layer"],
            stats["mean"],
            marker="s",
            color=color,
            linewidth=2.2,
            label=f"after {method_name(method)} at that layer (mean of {n})",
        )
        std = stats["std"].fillna(0).to_numpy()
        ax.fill_between(stats["layer"], stats["mean"] - std, stats["mean"] + std, color=color, alpha=0.2, linewidth=0)
    ax.set_ylim(-0.02, 1.02)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("Layer index l (0 = embedding output)")
    ax.set_ylabel("Linear CKA (0 to 1)")
    model_a, model_b = frame["model_a"].iloc[0], frame["model_b"].iloc[0]
    ax.set_title(
        f"Linear CKA, {names[model_a]} vs {names[model_b]}: STS-B test, {int(frame['n_sentences'].iloc[0])} sentences",
        fontsize=10.5,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, loc="lower left")
    return fig


def write_outputs(frame: pd.DataFrame, out_dir) -> list[Path]:
    """Write cka.csv, cka.png and cka.svg into the local folder out_dir."""
    from analysis.plots import save_figure

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv = out_dir / "cka.csv"
    frame.to_csv(csv, index=False)
    return [csv, *save_figure(plot_cka(frame), out_dir, "cka")]


def log_to_mlflow(frame: pd.DataFrame, files, tracking_uri: str, experiment: str = "cka", params=None) -> str:
    """One MLflow run (param method='cka', tag embsweep.role='cka') holding the files as
    artifacts and the pretrained CKA per layer as metric `cka_pretrained` (step = layer)."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    from trainables.core.schema import EXPERIMENT_KIND_TAGS, TAG_ROLE

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment, tags=EXPERIMENT_KIND_TAGS)
    model_a, model_b = frame["model_a"].iloc[0], frame["model_b"].iloc[0]
    run = client.create_run(experiment_id, tags={TAG_ROLE: CKA_ROLE}, run_name=f"cka {model_a} vs {model_b}")
    run_id = run.info.run_id
    try:
        values = {
            "method": "cka",
            "model_a": model_a,
            "model_b": model_b,
            "n_sentences": int(frame["n_sentences"].iloc[0]),
            **(params or {}),
        }
        pre = frame[frame["source"] == "pretrained"]
        metrics = [Metric("cka_pretrained", float(r.cka), 0, int(r.layer)) for r in pre.itertuples()]
        tuned = frame[frame["source"] == "finetuned"].groupby("layer")["cka"].mean()
        metrics += [Metric("cka_finetuned_mean", float(v), 0, int(layer)) for layer, v in tuned.items()]
        client.log_batch(run_id, metrics=metrics, params=[Param(k, str(v)) for k, v in values.items()])
        for path in files:
            client.log_artifact(run_id, str(path))
    except Exception:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id)
    return run_id


def run_cka(
    models: list[str],
    out_dir,
    data_dir=None,
    checkpoints=None,
    max_sentences=None,
    unique=False,
    tracking_uri=None,
    experiment="cka",
    batch_size=64,
) -> tuple[pd.DataFrame, list[Path | str], str | None]:
    """The `python -m analysis cka` command: compute, write, and log if `tracking_uri` is given.
    `out_dir` is a local folder or an object-store URI (analysis/outputs.py); the files returned are
    where they were written (paths, or URIs)."""
    from analysis.outputs import check_out, local_folder, location
    from trainables.core.paths import default_data_dir

    if len(models) != 2:
        raise SweepInputError(f"--models takes exactly two models separated by a comma, got {len(models)}: {models}")
    check_out(out_dir)  # before hours of embedding
    data_dir = data_dir or default_data_dir()
    sentences = stsb_test_sentences(data_dir, max_sentences, unique=unique)
    frame = compare_models(models[0], models[1], sentences, checkpoints=checkpoints, batch_size=batch_size)
    run_id = None
    with local_folder(out_dir) as folder:
        files = write_outputs(frame, folder)
        if tracking_uri:
            params = {"data_dir": str(data_dir), "unique_sentences": unique, "checkpoints": str(checkpoints or "")}
            run_id = log_to_mlflow(frame, files, tracking_uri, experiment, params)
    return frame, [location(out_dir, folder, f) for f in files], run_id
