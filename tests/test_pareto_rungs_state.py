"""The Pareto search's rung records (`pareto-rungs.state`), read back on --resume, are checked as strictly as
sweep.json: a damaged or unreadable file is refused with one line before anything starts (and by the
dry run alike), never treated as empty and overwritten."""

from __future__ import annotations

import json
import os

import pytest

from sweeps.engine import pareto_asha, runner, seal
from trainables.core.errors import SweepInputError

GOOD = {"rungs": {"1": {"abc": [-80.0, 1000.0]}}, "eta": 2, "max_t": 3}
DAMAGED = {
    "rungs not an object": json.dumps({"rungs": "x", "eta": 2, "max_t": 3}),
    "a record not numeric": json.dumps({"rungs": {"1": {"abc": ["x", 1.0]}}, "eta": 2, "max_t": 3}),
    "a record not finite": json.dumps({"rungs": {"1": {"abc": [float("nan"), 1.0]}}, "eta": 2, "max_t": 3}),
    "a rung the search has not": json.dumps({"rungs": {"7": {}}, "eta": 2, "max_t": 3}),
    "another eta": json.dumps({**GOOD, "eta": 3}),
    "not JSON": "{not json",
}


def test_good_records_are_read_and_a_missing_file_is_no_records(tmp_path):
    path = tmp_path / "pareto-rungs.state"
    assert pareto_asha.read_rungs(str(path), 2, 3) == {}
    path.write_text(json.dumps(GOOD))
    assert pareto_asha.read_rungs(str(path), 2, 3) == GOOD["rungs"]


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_damaged_records_are_refused_with_one_line_and_never_overwritten(case, tmp_path):
    path = tmp_path / "pareto-rungs.state"
    path.write_text(DAMAGED[case])
    scheduler = pareto_asha.ParetoASHA("best_dev_spearman", "max", "params_truncated", 3, 2, state_path=str(path))
    with pytest.raises(SweepInputError, match="the Pareto search's rung records are damaged") as refused:
        scheduler._load()
    assert len(str(refused.value).splitlines()) == 1
    assert path.read_text() == DAMAGED[case]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_refused_not_taken_as_empty(tmp_path):
    path = tmp_path / "pareto-rungs.state"
    path.write_text(json.dumps(GOOD))
    path.chmod(0)
    with pytest.raises(SweepInputError, match="cannot be read"):
        pareto_asha.read_rungs(str(path), 2, 3)


def test_an_unreadable_file_is_refused_when_reading_fails(tmp_path, monkeypatch):
    from trainables.core import object_storage

    def unreadable(location):
        raise PermissionError(13, "Permission denied", str(location))

    monkeypatch.setattr(object_storage, "read_bytes", unreadable)
    with pytest.raises(SweepInputError, match=r"rung records cannot be read \(Permission denied\)"):
        pareto_asha.read_rungs(str(tmp_path / "pareto-rungs.state"), 2, 3)


def _pareto_folder(tmp_path, data_dir, model, rungs_text):
    """A sealed pareto sweep folder, as its driver writes it, with the given rung records."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = ["--models", model, "--layers", "0,1", "--seeds", "0", "--epochs", "3", "--search", "pareto"]
    argv += ["--pareto-eta", "2", "--storage-path", str(tmp_path / "runs"), "--mlflow-uri", uri]
    argv += ["--data-dir", str(data_dir)]
    args = vars(runner.parser_for("tmft", "electra_layers").parse_args(argv))
    folder = tmp_path / "runs" / "front"
    folder.mkdir(parents=True)
    saved = {"name": "front", "script": "electra_layers", "method": "tmft", "method_class": "tmft"}
    saved.update(parent_run_id="0" * 32, mlflow_uri=uri, experiment="test", created="", data_checksums=None)
    seal.record_sweep_file(str(folder), {**saved, "args": args})
    (folder / pareto_asha.RUNGS_FILE).write_text(rungs_text)
    return folder


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "resume"])
def test_a_resume_over_damaged_rung_records_is_refused_before_anything_starts(
    dry, tmp_path, data_dir, tiny_models, capsys
):
    import ray

    ray.shutdown()
    folder = _pareto_folder(tmp_path, data_dir, tiny_models["bert"], DAMAGED["rungs not an object"])
    code = runner.main([*(["--dry-run"] if dry else []), "--resume", str(folder)], method="tmft", prog="electra_layers")
    err = capsys.readouterr().err.strip()
    assert code == 2 and "rung records are damaged (not a JSON object" in err and len(err.splitlines()) == 1, err
    assert not ray.is_initialized()
    assert (folder / pareto_asha.RUNGS_FILE).read_text() == DAMAGED["rungs not an object"]
