"""TSDAE's Appendix A greedy search on a small budget: noise type (ratio 0.3, CLS, untied; Table 5), then
the best type's ratio 0.1-0.9 (Table 6), then pooling CLS/mean/max (Table 7), then the decoder tied or not,
each configuration trained with the trial's loop (`trainables.methods.tsdae.training.Training`, TSDAE's
own settings: AdamW lr 3e-5 constant, batch 8, clipping 1, epochs of the corpus with the last incomplete
batch dropped) for `--steps` steps, STS-B dev Spearman every `--eval-steps` (the best kept, as the
paper's "best validation performance"), one seed. The configurations of a stage train in parallel
processes (`--workers`); each stage starts from the best of the last, as the paper's greedy order.

Printed and written (`--out`, JSON): every configuration's best STS-B dev Spearman x100, the stage's
winner, and the encoder untrained (CLS and mean pooling) for reference.

    python benchmarks/tsdae_appendix.py --model PATH --corpus sentences.txt --steps 2000 --eval-steps 500
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks import results_file  # noqa: E402

TYPES = ("delete", "swap", "mask", "replace", "add")
RATIOS = tuple(round(0.1 * k, 1) for k in range(1, 10))
POOLINGS = ("cls", "mean", "max")


def _dev(data_dir: str):
    from trainables.data.stsb import load_stsb

    rows = load_stsb(Path(data_dir), splits=("dev",))["dev"]
    return [r.sentence1 for r in rows], [r.sentence2 for r in rows], [r.score for r in rows]


def _spearman(st, dev) -> float:
    import numpy as np
    from scipy.stats import spearmanr

    st.eval()
    left, right, gold = dev
    a = st.encode(left, batch_size=128, convert_to_numpy=True, normalize_embeddings=True)
    b = st.encode(right, batch_size=128, convert_to_numpy=True, normalize_embeddings=True)
    return 100 * float(spearmanr(np.sum(a * b, axis=1), gold).statistic)


def train(job: dict) -> dict:
    """One configuration: `steps` steps, the best STS-B dev Spearman over the evaluations."""
    import torch

    from trainables.methods.tsdae.settings import resolve
    from trainables.methods.tsdae.training import Training
    from trainables.training.device import seed_everything

    sentences = Path(job["corpus"]).read_text().splitlines()
    dev = _dev(job["data_dir"])
    args = argparse.Namespace(ct_variant="official", shared_settings=False, steps=job["steps"], max_length=128)
    config = resolve("tsdae", args, len(sentences), 512)
    config.update(objective="tsdae", seed=0, _model_path=job["model"], **job["configuration"])
    seed_everything(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    training = Training(config, sentences, device)
    training.loss.float()  # a checkpoint stored in half precision trains in float32
    started, best, curve = time.perf_counter(), float("-inf"), []
    for _ in range(job["steps"] // job["eval_steps"]):
        training.run(job["eval_steps"])
        score = _spearman(training.st, dev)
        curve.append(round(score, 2))
        best = max(best, score)
    return {
        **job["configuration"],
        "best_dev": round(best, 2),
        "curve": curve,
        "seconds": time.perf_counter() - started,
    }


def untrained(model: str, data_dir: str) -> dict:
    import torch

    from trainables.methods.tsdae.training import sentence_model

    dev = _dev(data_dir)
    out = {}
    for pooling in ("cls", "mean"):
        st = sentence_model(model, pooling, 128).float().to("cuda" if torch.cuda.is_available() else "cpu")
        out[pooling] = round(_spearman(st, dev), 2)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--corpus", required=True, help="a text file, one sentence a line")
    parser.add_argument("--data-dir", required=True, help="the folder holding stsbenchmark/")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--eval-steps", type=int, default=500)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--out", default="tsdae_appendix.json")
    results_file.add_flag(parser, "tsdae_appendix")
    args = parser.parse_args(argv)
    base = {"corpus": args.corpus, "data_dir": args.data_dir, "model": args.model}
    base.update(steps=args.steps, eval_steps=args.eval_steps)
    done: dict[tuple, dict] = {}

    def stage(configurations: list[dict]) -> dict:
        key = lambda c: (c["noise"], c["noise_ratio"], c["pooling"], c["tied_decoder"])  # noqa: E731
        todo = [c for c in configurations if key(c) not in done]
        import multiprocessing

        with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            for result in pool.map(train, [{**base, "configuration": c} for c in todo]):
                done[key(result)] = result
                print(json.dumps(result), flush=True)
        return max((done[key(c)] for c in configurations), key=lambda r: r["best_dev"])

    report = {"settings": vars(args), "untrained": untrained(args.model, args.data_dir)}
    print("untrained", report["untrained"], flush=True)
    picked = lambda r: {k: r[k] for k in ("noise", "noise_ratio", "pooling", "tied_decoder")}  # noqa: E731
    start = {"noise_ratio": 0.3, "pooling": "cls", "tied_decoder": False}
    table5 = stage([{**start, "noise": t} for t in TYPES])
    table6 = stage([{**start, "noise": table5["noise"], "noise_ratio": r} for r in RATIOS])
    table7 = stage([{**picked(table6), "pooling": p} for p in POOLINGS])
    tying = stage([{**picked(table7), "tied_decoder": tied} for tied in (False, True)])
    report["greedy"] = {"table5": picked(table5), "table6": picked(table6), "table7": picked(table7)}
    report["greedy"]["tying"] = picked(tying)
    report["runs"] = list(done.values())
    Path(args.out).write_text(json.dumps(report, indent=1))
    stages = (("Table 5", table5, "noise"), ("Table 6", table6, "noise_ratio"), ("Table 7", table7, "pooling"))
    rows = [[name, f"{field} {best[field]}", best["best_dev"]] for name, best, field in stages]
    rows.append(["tying", f"tied_decoder {tying['tied_decoder']}", tying["best_dev"]])
    results_file.write(
        args.results_json,
        "tsdae_appendix",
        ["stage (greedy)", "best", "STS-B dev Spearman"],
        rows,
        summary=f"{args.model}: TSDAE's Appendix A greedy search, {args.steps} steps a configuration, one seed; "
        f"untrained: {report['untrained']}.",
    )
    print(json.dumps(report["greedy"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
