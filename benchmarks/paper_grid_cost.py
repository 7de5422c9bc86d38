"""The ELECTRA paper's English TMFT grid priced in GPU-hours by the project's cost model
(trainables/encoders/cost.py, calibrated on an H100 by benchmarks/gpu.py), against the paper's own
"around 300 GPU hours" on one RTX 3090 (its Appendix F).

The grid: STS-B for the 13 English models of Tables 1-2 (BERT tiny..large, ELECTRA-D and -G
small/base/large, DeBERTa-v3 base); MRPC and SICK for the four base models (Figures 5-6); WS+TMFT
and DAPT+TMFT on STS-B for the four base models (Figure 2): every layer 0..L, 5 seeds, 10 epochs,
batch 32. Tokens are counted with BERT's uncased WordPiece for every model (the cased, ELECTRA and
DeBERTa vocabularies give counts within a few percent on this English data). The upstream stages
(DAPT: 48.5 GPU-hours by the paper's own account; WS: minutes) are not priced.

Two ways of running the grid:
- project: each trial trains the encoder truncated to layer l;
- authors: each trial runs the full model and reads `hidden_states[l]` (forward through all L
  layers, backward through the first l), as the released code does.

Each is priced at every precision on one H100 trial after another (no packing), and for the paper's
RTX 3090 in fp32 by scaling the GPU-bound part by the published dense throughputs: FP32 35.6
TFLOP/s on the RTX 3090 against 67 on the H100 SXM, so 11.7 effective TFLOP/s on the H100 becomes
11.7 x 35.6 / 67 = 6.2 (the kernel-launch part is kept: it is the CPU's).

    python benchmarks/paper_grid_cost.py
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results_file  # noqa: E402
from benchmarks.gpu import default_tokenizer  # noqa: E402
from trainables.encoders import cost as encoder_cost
from trainables.methods.tmft import paper as electra_paper  # noqa: E402

MODELS = electra_paper.CONFIGS  # public configs of the 13 English models
BASE_MODELS = electra_paper.BASE_MODELS
SEEDS, EPOCHS, BATCH = 5, 10, 32
H100_FP32, RTX3090_FP32 = 67.0, 35.6  # published dense FP32 TFLOP/s
PAPER_HOURS = 300


def grid() -> list[tuple[str, str]]:
    """(task, model) per family of trials (each over all layers and 5 seeds)."""
    cells = [("stsb", m) for m in MODELS]
    cells += [(task, m) for task in ("mrpc", "sick") for m in BASE_MODELS]
    cells += [("stsb", m) for m in BASE_MODELS for _ in ("ws", "dapt")]  # TMFT after each upstream stage
    return cells


config_of = electra_paper.public_config


def trial_seconds(config, task, layer: int, precision: str, tflops: float | None, authors: bool) -> float:
    if not authors:
        return encoder_cost.pair_task_cost(config, task, layer, BATCH, EPOCHS, tflops, precision)[1]
    train, splits = task.splits["train"], task.splits
    tokens = sum(map(len, train.s1)) + sum(map(len, train.s2))
    eval_tokens = sum(sum(map(len, splits[s].s1)) + sum(map(len, splits[s].s2)) for s in ("dev", "test"))
    steps = math.ceil(len(train) / BATCH)
    eval_batches = sum(math.ceil(len(splits[s]) / 64) for s in ("dev", "test"))
    depth = int(config.num_hidden_layers)
    shape = encoder_cost.shape_from_config(config, layer, BATCH, 1)
    per_layer = encoder_cost.shape_from_config(config, 1, BATCH, 1).layer_params
    upper = (depth - layer) * per_layer  # run forward only, in training and in evaluation
    flops = EPOCHS * (
        6 * shape.layer_params * tokens + 2 * upper * tokens + 2 * (shape.layer_params + upper) * eval_tokens
    )
    gpu = flops / ((tflops or encoder_cost.GPU_TFLOPS[precision]) * 1e12)
    launches = EPOCHS * (3 * steps * (layer + 1) + steps * (depth - layer) + eval_batches * (depth + 1))
    return max(gpu, launches * encoder_cost.LAUNCH_SECONDS[precision])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    results_file.add_flag(parser, "paper_grid_cost")
    args = parser.parse_args()
    from trainables.core.paths import default_data_dir
    from trainables.training.tokenized import load_task, tokenize_task

    tokenizer = default_tokenizer()
    tasks = {}
    for name in ("stsb", "mrpc", "sick"):
        examples, checksums = load_task(name, default_data_dir())
        tasks[name] = tokenize_task(name, tokenizer, examples, checksums)
    rtx3090 = encoder_cost.GPU_TFLOPS["fp32"] * RTX3090_FP32 / H100_FP32
    columns = [
        ("H100 fp32", "fp32", None),
        ("H100 tf32", "tf32", None),
        ("H100 bf16", "bf16", None),
        ("RTX 3090 fp32", "fp32", rtx3090),
    ]
    cells = grid()
    trials = sum((MODELS[m][1] + 1) * SEEDS for _, m in cells)
    print(
        f"the paper's English TMFT grid: {len(cells)} model x task families, {trials} trials "
        f"(every layer, {SEEDS} seeds, {EPOCHS} epochs, batch {BATCH}); GPU-hours, one trial after another\n"
    )
    print(f"{'':<10}" + "".join(f"{label:>16}" for label, _, _ in columns))
    rows = []
    for authors in (False, True):
        hours = []
        for _, precision, tflops in columns:
            seconds = sum(
                trial_seconds(config_of(m), tasks[t], layer, precision, tflops, authors) * SEEDS
                for t, m in cells
                for layer in range(MODELS[m][1] + 1)
            )
            hours.append(seconds / 3600)
        print(f"{'authors' if authors else 'project':<10}" + "".join(f"{h:>16.1f}" for h in hours))
        rows.append(["the authors' way" if authors else "the project's", *(f"{h:.1f}" for h in hours)])
    results_file.write(
        args.results_json,
        "paper_grid_cost",
        ["GPU-hours", *(label for label, _, _ in columns)],
        rows,
        summary=f"The paper's English TMFT grid ({trials} trials: every layer, {SEEDS} seeds, {EPOCHS} epochs, batch "
        f"{BATCH}) priced by the cost model, one trial after another; the paper: around {PAPER_HOURS} GPU-hours on one "
        "RTX 3090.",
    )
    print(
        f"\nthe paper (Appendix F): around {PAPER_HOURS} GPU-hours on one RTX 3090, DAPT stages (48.5) and the "
        "multilingual, CKA and random-init runs included"
    )
    print(
        f"RTX 3090 column: the H100's effective fp32 {encoder_cost.GPU_TFLOPS['fp32']:g} TFLOP/s x "
        f"{RTX3090_FP32:g} / {H100_FP32:g} = {rtx3090:.1f}"
    )


if __name__ == "__main__":
    main()
