"""The translated STS Benchmarks of the ELECTRA paper's Appendix B: small files in the real formats that the
tests write (KorSTS's TSV, the stsb-multi-mt release's CSVs, stsb_multi_mt's parquet in the hub's layout), and
the real release files of the data folder (every language `--help` lists, and the paper's presets on them)."""

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
    with pytest.raises(DataFormatError, match=r"stsb-de-train.csv: file not found; put the stsb-multi-mt release"):
        load_translated("de", tmp_path / "empty")
    (tmp_path / "hub" / "stsb_multi_mt" / "de").mkdir(parents=True)
    with pytest.raises(DataFormatError, match=r"no train\*.parquet"):
        load_translated("de", tmp_path / "hub")
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


RELEASE_ROWS = [
    "Ein Flugzeug hebt gerade ab.,Ein Flugzeug hebt gerade ab.,5.0",
    '"Ein Mann, der Flöte spielt.","Ein Mann sagt: ""Flöte"".",3.8',
]


def _release(root, languages=("de",), rows=RELEASE_ROWS, splits=("train", "dev", "test")):
    folder = root / "stsb-multi-mt"
    folder.mkdir(parents=True, exist_ok=True)
    for language in languages:
        for split in splits:
            (folder / f"stsb-{language}-{split}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def test_the_release_csvs_are_read_quoted_and_every_language_found(tmp_path):
    from trainables.data.multilingual_stsb import languages, release_languages

    root = _release(tmp_path, ("de", "fr", "zh"))
    assert release_languages(root) == ["de", "fr", "zh"] and languages(root) == ["ko", "de", "es", "fr", "zh"]
    examples, checksums = load_translated("fr", root)
    assert [len(examples[s]) for s in ("train", "dev", "test")] == [2, 2, 2] and set(checksums) == {
        "train",
        "dev",
        "test",
    }
    second = examples["dev"][1]
    assert (second.sentence1, second.sentence2, second.score) == (
        "Ein Mann, der Flöte spielt.",
        'Ein Mann sagt: "Flöte".',
        3.8,
    )
    assert get_task("stsb-de").load(root)[0]["train"][0].score == 5.0  # the release wins over the hub's layout


@pytest.mark.parametrize(
    "rows, expected",
    [
        (
            [RELEASE_ROWS[0], "Ein Satz ohne Partner,4.0"],
            r"stsb-de-train.csv, line 2: expected 3 comma-separated fields",
        ),
        ([RELEASE_ROWS[0], "a,b,7.5"], r"stsb-de-train.csv, line 2: score 7.5 is outside 0-5"),
        ([RELEASE_ROWS[0], "a,b,-0.1"], r"stsb-de-train.csv, line 2: score -0.1 is outside 0-5"),
        ([RELEASE_ROWS[0], "a,b,n/a"], r"stsb-de-train.csv, line 2: score 'n/a' is not a number"),
        ([RELEASE_ROWS[0], '"a torn, line,b,4.0'], r"stsb-de-train.csv, line 2: torn line"),
        (['"a torn, line,b,4.0', *RELEASE_ROWS], r"stsb-de-train.csv, line 1: torn line"),
    ],
)
def test_a_bad_release_line_is_named_by_file_and_line(tmp_path, rows, expected):
    with pytest.raises(DataFormatError, match=expected) as refused:
        load_translated("de", _release(tmp_path, rows=rows))
    assert "\n" not in str(refused.value)


def test_a_missing_release_split_is_named(tmp_path):
    root = _release(tmp_path, ("fr",), splits=("train", "test"))
    with pytest.raises(DataFormatError, match=r"stsb-fr-dev.csv: file not found"):
        load_translated("fr", root)


def test_a_torn_release_file_stops_the_sweep_in_one_line_writing_nothing(tmp_path, tiny_models, capsys):
    from sweeps.electra_layers import main

    root = _release(tmp_path / "data", rows=[RELEASE_ROWS[0], "a,b"])
    storage = tmp_path / "runs"
    flags = ["--task", "stsb-de", "--models", tiny_models["bert"], "--layers", "1", "--seeds", "0", "--epochs", "1"]
    assert main([*flags, "--data-dir", str(root), "--storage-path", str(storage)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "stsb-de-train.csv, line 2: expected 3 comma-separated fields" in err, err
    assert not storage.exists()


def test_help_lists_every_language_of_the_release_in_the_data_folder(data_dir):
    from sweeps.engine.runner import parser_for
    from trainables.data.multilingual_stsb import release_languages

    found = release_languages(data_dir)
    assert {"de", "es", "en", "fr", "zh"} <= set(found), found  # the shared release: 10 languages and English
    help_text = " ".join(parser_for("tmft", "electra_layers").format_help().split())
    for language in found:
        assert f"stsb-{language} (" in help_text.replace("stsb- ", "stsb-"), language
    assert "korsts (" in help_text


STAND_IN = "sentence-transformers/all-MiniLM-L6-v2"  # the paper's models cannot be had here


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("preset, task", [("fig7", "korsts"), ("fig8", "stsb-de"), ("fig9", "stsb-es")])
def test_the_papers_multilingual_presets_run_on_the_release_files(preset, task, tmp_path, data_dir):
    """Appendix B's presets, as a user runs them on the shared release files, with all-MiniLM-L6-v2 standing in
    for the paper's models (`embsweep-assets install sentence-transformers/all-MiniLM-L6-v2`) and one layer,
    seed and epoch on a few pairs, so that it finishes: it must run, not score."""
    import subprocess
    import sys

    from trainables.core.paths import PROJECT_ROOT, models_dir

    if not (models_dir() / STAND_IN / "config.json").is_file():
        pytest.fail(f"{STAND_IN} is not installed: embsweep-assets install {STAND_IN}")
    storage, uri = tmp_path / "runs", f"sqlite:///{tmp_path / 'mlflow.db'}"
    command = [sys.executable, str(PROJECT_ROOT / "sweeps" / "electra_layers.py"), "--preset", preset]
    command += ["--models", STAND_IN, "--layers", "6", "--seeds", "0", "--epochs", "1", "--max-train-samples", "64"]
    command += ["--max-eval-samples", "64", "--batch-size", "16", "--gpus-per-trial", "0", "--data-dir", str(data_dir)]
    command += ["--storage-path", str(storage), "--mlflow-uri", uri, "--name", preset]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert [r.data.params.get("task") for r in children] == [task]
    assert children[0].info.status == "FINISHED" and children[0].data.params["model"] == STAND_IN
