"""The STS-B loader reads the original release and names the file and line of a bad row."""

import pytest

from trainables.core.errors import DataFormatError
from trainables.data.stsb import load_stsb


def test_real_release_has_the_published_sizes(data_dir):
    splits = load_stsb(data_dir)
    assert {k: len(v) for k, v in splits.items()} == {"train": 5749, "dev": 1500, "test": 1379}
    assert all(0.0 <= e.score <= 5.0 for rows in splits.values() for e in rows)
    assert any('"' in e.sentence1 + e.sentence2 for e in splits["train"]), "quotes must survive (quoting disabled)"


def _write_release(folder, train_lines):
    folder.mkdir(parents=True, exist_ok=True)
    good = "main-captions\tMSRvid\t2012test\t0001\t5.000\tA plane is taking off.\tAn air plane is taking off.\n"
    (folder / "sts-train.csv").write_text("".join(train_lines))
    (folder / "sts-dev.csv").write_text(good)
    (folder / "sts-test.csv").write_text(good)


def test_extra_fields_are_ignored(tmp_path):
    line = 'g\tf\t2012\t1\t3.5\tFirst "quoted" one.\tSecond one.\textra\tmore\n'
    _write_release(tmp_path / "stsbenchmark", [line])
    example = load_stsb(tmp_path)["train"][0]
    assert (example.sentence1, example.sentence2, example.score) == ('First "quoted" one.', "Second one.", 3.5)


def test_non_numeric_score_names_file_and_line(tmp_path):
    good = "g\tf\t2012\t1\t3.5\tA.\tB.\n"
    _write_release(tmp_path / "stsbenchmark", [good, good, "g\tf\t2012\t1\tabc\tA.\tB.\n"])
    with pytest.raises(DataFormatError) as error:
        load_stsb(tmp_path)
    assert "sts-train.csv, line 3" in str(error.value) and "'abc'" in str(error.value)


def test_too_few_fields_and_missing_file(tmp_path):
    _write_release(tmp_path / "stsbenchmark", ["g\tf\t2012\t1\t3.5\tonly one sentence\n"])
    with pytest.raises(DataFormatError, match="line 1: expected at least 7"):
        load_stsb(tmp_path)
    with pytest.raises(DataFormatError, match="file not found"):
        load_stsb(tmp_path / "nowhere")


def test_hub_copy_is_rescaled_to_the_release_scale(monkeypatch):
    """Offline here, so `datasets.load_dataset` is replaced by an in-memory DatasetDict with the
    hub copy's layout (sentence1, sentence2, score in [0, 1]; train/validation/test)."""
    import datasets

    rows = {"sentence1": ["a", "b"], "sentence2": ["c", "d"], "score": [0.5, 1.0]}
    fake = datasets.DatasetDict({s: datasets.Dataset.from_dict(rows) for s in ("train", "validation", "test")})
    requested = []
    monkeypatch.setattr(datasets, "load_dataset", lambda name, *a, **k: requested.append(name) or fake)
    splits = load_stsb("hub")
    assert requested == ["sentence-transformers/stsb"]
    assert [e.score for e in splits["dev"]] == [2.5, 5.0]
    assert set(splits) == {"train", "dev", "test"}
