"""`python -m analysis mteb-run`: mteb's own tasks on the project's encoders (trainables/evaluation/mteb_encoder.py).
Offline, a task runs from a local folder in the hub's layout and scores as the suite does on the same
pairs; tasks that cannot run are refused, all named, before anything loads or is written.

Slow: importing mteb alone takes 5-8 s. Run with `pytest -m slow tests/test_mteb_run.py`."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

pytest.importorskip("mteb")
pytestmark = [pytest.mark.slow, pytest.mark.mteb]


@pytest.fixture(scope="module")
def hub_copy(data_dir, tmp_path_factory):
    """A data dir holding mteb/stsbenchmark-sts's layout (test.jsonl.gz) with the first 150 STS-B test pairs."""
    from trainables.data.stsb import load_stsb

    rows = load_stsb(data_dir, splits=("test",))["test"][:150]
    root = tmp_path_factory.mktemp("hub-layout")
    (root / "stsbenchmark-sts").mkdir()
    with gzip.open(root / "stsbenchmark-sts" / "test.jsonl.gz", "wt", encoding="utf-8") as out:
        for e in rows:
            out.write(
                json.dumps({"split": "test", "score": e.score, "sentence1": e.sentence1, "sentence2": e.sentence2})
            )
            out.write("\n")
    return root, rows


def test_an_mteb_task_runs_offline_from_its_local_copy_and_scores_as_the_suite(tiny_models, hub_copy, tmp_path):
    from mteb.cache import ResultCache
    from transformers import AutoModel, AutoTokenizer

    from analysis.__main__ import main
    from trainables.evaluation.task_kinds import Pairs, task_kind
    from trainables.evaluation.zero_shot import pooled_layers

    root, rows = hub_copy
    model = tiny_models["bert"]  # 4 layers
    argv = ["mteb-run", "--models", model, "--layers", "2,last", "--tasks", "STSBenchmark", "--data-dir", str(root)]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    loaded = ResultCache(tmp_path / "out").load_results(include_remote=False)
    scores = {m.model_name: m.task_results[0].get_score() for m in loaded.model_results}
    assert set(scores) == {"embsweep/bert-L2", "embsweep/bert"}
    pairs = Pairs([e.sentence1 for e in rows], [e.sentence2 for e in rows], np.array([e.score for e in rows]))
    encoder, tokenizer = AutoModel.from_pretrained(model).eval(), AutoTokenizer.from_pretrained(model)
    embeddings = pooled_layers(encoder, tokenizer, [*pairs.s1, *pairs.s2], [2, 4], ["mean"])
    for layer, name in ((2, "embsweep/bert-L2"), (4, "embsweep/bert")):
        rows_of = {t: v / np.linalg.norm(v) for t, v in zip([*pairs.s1, *pairs.s2], embeddings[(layer, "mean")])}
        ours = task_kind("sts").score(pairs, lambda texts: np.stack([rows_of[t] for t in texts]))
        assert scores[name] * 100 == pytest.approx(ours["spearman"], abs=1e-4), name


def test_tasks_that_cannot_run_offline_are_refused_before_anything_starts(tiny_models, hub_copy, tmp_path, capsys):
    from analysis.__main__ import main

    root, _ = hub_copy
    tasks = "STSBenchmark,STS12,NoSuchTask,CQADupstackRetrieval"
    out = tmp_path / "out"
    argv = ["mteb-run", "--models", tiny_models["bert"], "--tasks", tasks, "--data-dir", str(root), "--out", str(out)]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: mteb tasks refused, nothing was run: ") and error.count("\n") == 1
    assert f"STS12: no local copy sts12-sts/ under {root}" in error and "mteb/sts12-sts" in error
    assert "NoSuchTask: not an mteb task" in error and "CQADupstackRetrieval: an aggregate" in error
    assert "STSBenchmark" not in error.split("refused, nothing was run: ")[1]
    assert not (out / "results").exists()
    assert main([*argv[:-4], "--layers", "two", "--out", str(out)]) == 2
    assert "--layers takes 'last' or comma-separated layers" in capsys.readouterr().err
