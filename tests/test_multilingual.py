"""The translated STS Benchmarks of the ELECTRA paper's Appendix B, read from small files in the
real formats that the tests write (KorSTS's TSV, stsb_multi_mt's parquet in the hub's layout):
none of the real files exists on these machines."""

from __future__ import annotations

import pytest

from trainables.core.errors import DataFormatError, SweepInputError
from trainables.data.multilingual_stsb import PAPER_MODELS, load_translated
from trainables.training.pair_tasks import get_task

KORSTS_HEADER = "genre\tfilename\tyear\tid\tscore\tsentence1\tsentence2"
KORSTS_ROWS = [
    "main-captions\tMSRvid\t2012test\t0001\t5.000\t비행기가 이륙하고 있다.\t비행기가 이륙하고 있다.",
    "main-news\theadlines\t2015\t0002\t1.600\t한 남자가 플루트를 연주하고 있다.\t남자가 대나무 피리를 연주하고 있다.",
]


def _korsts(root, rows=KORSTS_ROWS):
    folder = root / "KorSTS"
    folder.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        (folder / f"sts-{split}.tsv").write_text("\n".join([KORSTS_HEADER, *rows]) + "\n", encoding="utf-8")
    return root


def _multi_mt(root, language: str, scores=(4.8, 0.5)):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = root / "stsb_multi_mt" / language
    folder.mkdir(parents=True)
    table = pa.table(
        {
            "sentence1": ["Ein Flugzeug hebt ab.", "Ein Mann spielt Flöte."],
            "sentence2": ["Ein Flugzeug startet.", "Eine Frau schneidet Zwiebeln."],
            "similarity_score": list(scores),
        }
    )
    for split in ("train", "dev", "test"):
        pq.write_table(table, folder / f"{split}-00000-of-00001.parquet")
    return root


def test_korsts_is_read_by_its_header(tmp_path):
    examples, checksums = load_translated("ko", _korsts(tmp_path))
    assert [len(examples[s]) for s in ("train", "dev", "test")] == [2, 2, 2]
    assert examples["train"][1].score == 1.6 and examples["train"][1].sentence1.startswith("한 남자가")
    assert set(checksums) == {"train", "dev", "test"}
    task = get_task("korsts")
    loaded, _ = task.load(tmp_path)
    assert loaded["test"][0].sentence2 == "비행기가 이륙하고 있다." and task.scale == 5.0


@pytest.mark.parametrize("language, task", [("de", "stsb-de"), ("es", "stsb-es")])
def test_stsb_multi_mt_in_the_hubs_layout(tmp_path, language, task):
    examples, _ = get_task(task).load(_multi_mt(tmp_path, language))
    assert [e.score for e in examples["dev"]] == [4.8, 0.5] and examples["train"][
        0
    ].sentence1 == "Ein Flugzeug hebt ab."


def test_bad_files_are_named(tmp_path):
    with pytest.raises(DataFormatError, match=r"sts-train.tsv, line 2: score 7.0 is outside 0-5"):
        load_translated("ko", _korsts(tmp_path / "a", [KORSTS_ROWS[0].replace("5.000", "7.0")]))
    with pytest.raises(DataFormatError, match="file not found"):
        load_translated("ko", tmp_path / "empty")
    with pytest.raises(DataFormatError, match=r"no train\*.parquet"):
        load_translated("de", tmp_path / "empty")
    with pytest.raises(SweepInputError, match="no hub copy"):
        load_translated("ko", "hub")


def test_the_papers_models_per_language():
    assert PAPER_MODELS["ko"].split(",")[0] == "klue/bert-base"
    assert "deepset/gelectra-base-generator" in PAPER_MODELS["de"]
    assert "mrm8488/electricidad-base-discriminator" in PAPER_MODELS["es"]
    assert get_task("stsb-de").paper_models == PAPER_MODELS["de"]


def test_a_korean_sweep_plans_the_papers_korean_models_by_default(tmp_path, tiny_models, data_dir):
    """--task korsts with the default --models plans klue/bert-base and the KoELECTRA pair (offline here,
    so resolving them is refused with the model named); explicit --models are kept."""
    from sweeps.engine.runner import parser_for, plan_sweep

    root = _korsts(tmp_path / "data")
    flags = ["--task", "korsts", "--data-dir", str(root), "--storage-path", str(tmp_path / "runs"), "--epochs", "1"]
    with pytest.raises(SweepInputError, match="klue/bert-base"):
        plan_sweep(parser_for("tmft").parse_args(flags), method="tmft")
    plan = plan_sweep(
        parser_for("tmft").parse_args([*flags, "--models", tiny_models["bert"], "--layers", "1", "--seeds", "0"]),
        method="tmft",
    )
    assert [c["task"] for c in plan.configs] == ["korsts"] and plan.configs[0]["model"] == tiny_models["bert"]
