"""GPU memory and step time of TSDAE's contrastive baselines at their papers' batches, against the
cost model the plan packs trials by (trainables/encoders/cost.py, as trainables/methods/tsdae/method.py
prices them). Measured on an H200 (2026-11-26): SimCSE at 512 a batch reserved 21.1 GiB (estimate
26.5, ratio 0.80, 0.113 s a step), at 64 4.1 GiB (5.5, 0.75), CT 4.0 GiB against 8.8 when its two
copies doubled the whole estimate (0.45); a second copy now adds its weights and optimiser state only.

Three trials on BERT-base's shape (random weights built from its config: memory and speed do not
depend on the values), each a few AdamW steps of the objective's loss written out in torch:

- SimCSE as the TSDAE paper ran it (`--simcse-settings tsdae-paper`): 512 sentences a batch, each
  encoded twice under dropout, [CLS] then linear + tanh, InfoNCE at temperature 0.05, 32 tokens;
- SimCSE at its own paper's later settings (`simcse-paper`): 64 sentences, the same loss;
- CT official: two copies of the encoder, 16 pairs a batch, mean pooling, dot-product BCE, 75 tokens,
  RMSprop.

Printed per trial: the peak memory allocated and reserved by PyTorch's allocator (expandable
segments, as every trial runs), the cost model's estimate and the ratio measured / estimated
(the plan packs by the estimate, so a ratio above 1 would over-pack a GPU), and seconds a step.
A CUDA context (~0.6 GiB in the model) is not in PyTorch's figures; the model's estimate holds it.

Needs torch and transformers only; on a machine without a GPU it runs a tiny shape (`--smoke`).

    python benchmarks/contrastive_memory.py            # on a GPU machine
    python benchmarks/contrastive_memory.py --smoke    # a tiny model, on the CPU
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results_file  # noqa: E402
from trainables.encoders import cost  # noqa: E402

os.environ.update(cost.CUDA_ALLOCATOR_ENV)

import torch  # noqa: E402

BERT_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
TRIALS = (  # name, sentences (pairs for CT) a batch, tokens, objective
    ("simcse tsdae-paper", 512, 32, "simcse"),
    ("simcse simcse-paper", 64, 32, "simcse"),
    ("ct official", 16, 75, "ct"),
)


def encoder(config, device):
    from transformers import BertModel

    return BertModel(config, add_pooling_layer=False).to(device).train()


def mean_pool(hidden, mask):
    return (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)


def simcse_step(model, dense, ids, mask):
    both = torch.cat([ids, ids])  # one forward of the two views, as sentence-transformers' loss batches them
    cls = model(input_ids=both, attention_mask=torch.cat([mask, mask])).last_hidden_state[:, 0]
    a, b = torch.tanh(dense(cls)).chunk(2)
    scores = torch.nn.functional.normalize(a, dim=-1) @ torch.nn.functional.normalize(b, dim=-1).T / 0.05
    return torch.nn.functional.cross_entropy(scores, torch.arange(len(a), device=a.device))


def ct_step(first, second, ids, mask):
    a = mean_pool(first(input_ids=ids, attention_mask=mask).last_hidden_state, mask)
    b = mean_pool(second(input_ids=ids.roll(1, 0), attention_mask=mask).last_hidden_state, mask)
    labels = torch.zeros(len(ids), device=ids.device)
    labels[::8] = 1.0
    return torch.nn.functional.binary_cross_entropy_with_logits((a * b).sum(-1), labels, reduction="sum")


def run(name, batch, tokens, objective, shape_kwargs, steps, device) -> dict:
    from transformers import BertConfig

    config = BertConfig(vocab_size=30522, **shape_kwargs)
    torch.manual_seed(0)
    ids = torch.randint(1000, 30000, (batch, tokens), device=device)
    mask = torch.ones_like(ids, dtype=torch.float)
    if objective == "simcse":
        model = encoder(config, device)
        dense = torch.nn.Linear(config.hidden_size, config.hidden_size).to(device)
        params = [*model.parameters(), *dense.parameters()]
        optimizer = torch.optim.AdamW(params, lr=5e-5)
        step = lambda: simcse_step(model, dense, ids, mask)
    else:
        first, second = encoder(config, device), encoder(config, device)
        params = [*first.parameters(), *second.parameters()]
        optimizer = torch.optim.RMSprop(params, lr=1e-5, alpha=0.9, eps=1e-7)
        step = lambda: ct_step(first, second, ids, mask)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(steps + 2):  # two warm-up steps
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        loss = step()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - started)
    shape = cost.shape_from_config(config, config.num_hidden_layers, batch, tokens)
    estimate = cost.trial_memory_bytes(shape, "tf32") + (
        cost.second_copy_bytes(shape) if objective == "ct" else 0
    )  # method.py
    allocated = torch.cuda.max_memory_allocated() if device.type == "cuda" else float("nan")
    reserved = torch.cuda.max_memory_reserved() if device.type == "cuda" else float("nan")
    return {
        "trial": name,
        "allocated_gib": allocated / cost.GIB,
        "reserved_gib": reserved / cost.GIB,
        "estimate_gib": estimate / cost.GIB,
        "ratio": reserved / estimate,
        "s_per_step": sorted(times)[len(times) // 2],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a tiny model on the CPU")
    parser.add_argument("--steps", type=int, default=5)
    results_file.add_flag(parser, "contrastive_memory")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # `auto` precision on a GPU: tf32, as the plan prices it
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    shape = TINY if args.smoke else BERT_BASE
    print(f"{'trial':<22}{'allocated GiB':>15}{'reserved GiB':>14}{'estimate GiB':>14}{'ratio':>8}{'s/step':>9}")
    rows = []
    for name, batch, tokens, objective in TRIALS:
        row = run(name, batch, tokens, objective, shape, args.steps, device)
        rows.append(
            [row["trial"], *(f"{row[k]:.2f}" for k in ("allocated_gib", "reserved_gib", "estimate_gib", "ratio"))]
            + [f"{row['s_per_step']:.3f}"]
        )
        print(
            f"{row['trial']:<22}{row['allocated_gib']:>15.2f}{row['reserved_gib']:>14.2f}"
            f"{row['estimate_gib']:>14.2f}{row['ratio']:>8.2f}{row['s_per_step']:>9.3f}"
        )
        if device.type == "cuda":
            torch.cuda.empty_cache()
    where = torch.cuda.get_device_name() if device.type == "cuda" else "the CPU (a tiny model)"
    results_file.write(
        "" if args.smoke else args.results_json,  # a smoke run checks the benchmark; it measures nothing worth keeping
        "contrastive_memory",
        ["trial", "allocated GiB", "reserved GiB", "estimate GiB", "ratio", "s/step"],
        rows,
        summary=f"TSDAE's contrastive baselines at their papers' batches on {where}, {args.steps} steps each, against "
        "the cost model the plan packs trials by.",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
