"""Bad input stops before any trial starts, with a message naming the problem, and leaves
what is already written untouched (exit status 2, no Ray, no MLflow store created)."""

from pathlib import Path

import pytest

from sweeps.electra_layers import main


@pytest.fixture
def run(tmp_path, data_dir, capsys):
    storage = tmp_path / "runs"

    def invoke(*flags, data=None):
        code = main(
            [
                "--storage-path",
                str(storage),
                "--data-dir",
                str(data or data_dir),
                "--seeds",
                "0",
                "--epochs",
                "1",
                *flags,
            ]
        )
        return code, capsys.readouterr().err

    invoke.storage = storage
    return invoke


def _assert_nothing_written(storage: Path):
    assert not storage.exists() or not any(storage.rglob("*.db")), "no MLflow store may be created for bad input"


def test_layer_beyond_depth(run, tiny_models):
    code, err = run("--models", tiny_models["bert"], "--layers", "0,5")
    assert code == 2 and "layer 5 is beyond" in err and "valid 0..4" in err
    _assert_nothing_written(run.storage)


def test_unknown_model_offline(run, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, err = run("--models", "google/electra-base-discriminator")
    assert code == 2 and "Could not fetch model 'google/electra-base-discriminator'" in err and "--models" in err
    _assert_nothing_written(run.storage)


def test_missing_local_model_directory(run, tmp_path):
    code, err = run("--models", str(tmp_path / "nope"))
    assert code == 2 and "does not exist" in err and "nope" in err


def test_malformed_data_file_names_file_and_line(run, tmp_path, tiny_models, data_dir):
    folder = tmp_path / "data" / "stsbenchmark"
    folder.mkdir(parents=True)
    for name in ("sts-dev.csv", "sts-test.csv"):
        (folder / name).write_text((data_dir / "stsbenchmark" / name).read_text())
    lines = (data_dir / "stsbenchmark" / "sts-train.csv").read_text().splitlines(keepends=True)[:10]
    fields = lines[6].split("\t")
    fields[4] = "n/a"
    lines[6] = "\t".join(fields)
    (folder / "sts-train.csv").write_text("".join(lines))
    code, err = run("--models", tiny_models["bert"], data=tmp_path / "data")
    assert code == 2 and "sts-train.csv, line 7" in err and "'n/a' is not a number" in err


def test_missing_data_file(run, tmp_path, tiny_models):
    code, err = run("--models", tiny_models["bert"], data=tmp_path / "empty")
    assert code == 2 and "sts-train.csv" in err and "not found" in err


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--lr", "0"), "--lr must be positive"),
        (("--lr=-1e-5",), "--lr must be positive"),
        (("--batch-size", "0"), "--batch-size must be a positive integer"),
        (("--batch-size=-4",), "--batch-size must be a positive integer"),
        (("--forward-chunk=-1",), "--forward-chunk must be 0 or more, got -1 (or auto)"),
        (("--forward-chunk", "half"), "--forward-chunk must be a whole number, got 'half' (or auto)"),
        (("--layers", "a,b"), "--layers 'a,b' is not a comma-separated list"),
        (("--gpus-per-trial", "1.5"), "--gpus-per-trial must be a fraction"),
        (("--gpus-per-trial", "nan"), "--gpus-per-trial must be a fraction"),
        (("--cpus-per-trial", "nan"), "--cpus-per-trial must be a finite number"),
        (("--lr", "inf"), "--lr must be a finite number"),
        (("--weight-decay", "nan"), "--weight-decay must be a finite number"),
        (("--seeds", "2-0"), "the range 2-0 runs backwards; write 0-2"),
        (("--name", "../../escape"), "must be a single folder name"),
        (("--name", "/tmp/abs"), "must be a single folder name"),
    ],
)
def test_bad_numbers(run, tiny_models, flags, message):
    code, err = run("--models", tiny_models["bert"], *flags)
    assert code == 2 and message in err
    _assert_nothing_written(run.storage)


def test_a_model_named_twice_is_refused(run, tiny_models):
    code, err = run("--models", f"{tiny_models['bert']},{tiny_models['bert']}")
    assert code == 2 and "more than once" in err
    _assert_nothing_written(run.storage)


def test_resume_path_without_a_sweep(run, tmp_path):
    (tmp_path / "not-a-sweep").mkdir()
    (tmp_path / "not-a-sweep" / "keep.txt").write_text("precious")
    code, err = run("--resume", str(tmp_path / "not-a-sweep"))
    assert code == 2 and "holds no sweep" in err
    assert (tmp_path / "not-a-sweep" / "keep.txt").read_text() == "precious"
    code, err = run("--resume")
    assert code == 2 and "no sweep found" in err


def test_existing_sweep_name_is_not_overwritten(run, tiny_models, tmp_path):
    existing = run.storage / "taken"
    existing.mkdir(parents=True)
    (existing / "sweep.json").write_text('{"name": "taken"}')
    code, err = run("--models", tiny_models["bert"], "--name", "taken")
    assert code == 2 and "already exists" in err and "--resume" in err
    assert (existing / "sweep.json").read_text() == '{"name": "taken"}'


@pytest.mark.sweep  # about 2 s: out of the fast run, which stays under 3 minutes
def test_gpus_requested_on_a_machine_without_gpus(tmp_path, data_dir, tiny_models, capsys):
    """A local Ray without GPUs cannot run GPU trials: refused before the sweep starts.
    Uses the planning step only (the session's Ray has logical GPUs)."""
    import sweeps.engine.runner as runner

    args = runner.parser_for("tmft").parse_args(
        [
            "--models",
            tiny_models["bert"],
            "--gpus-per-trial",
            "0.5",
            "--storage-path",
            str(tmp_path),
            "--data-dir",
            str(data_dir),
            "--seeds",
            "0",
            "--layers",
            "0",
        ]
    )
    plan = runner.plan_sweep(args, method="tmft")
    from unittest import mock

    with mock.patch("ray.cluster_resources", return_value={"CPU": 2.0}):
        with pytest.raises(runner.SweepInputError, match="asks for GPUs but this Ray has none"):
            runner._check_resources(plan)


def test_generated_sweep_names_differ_within_one_second():
    from sweeps.engine.cli import default_name

    names = {default_name("sweeps/electra_layers.py") for _ in range(50)}
    assert len(names) > 45 and all(n.startswith("electra-layers-") for n in names)


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--layers", "0,5"), "layer 5 is beyond"),  # refused by the method's plan()
        (("--max-eval-samples", "1"), "--max-eval-samples 1 leaves the stsb dev split with 1 scored pair"),
    ],
)
def test_a_refused_sweep_writes_nothing(tmp_path, data_dir, tiny_models, capsys, flags, message):
    """No storage folder (not even an empty one), so no mlflow.db, no stages, no sweep folder."""
    import time

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    argv = ["--storage-path", str(fresh / "runs" / "deeper"), "--data-dir", str(data_dir), "--seeds", "0"]
    started = time.perf_counter()
    code = main([*argv, "--epochs", "1", "--models", tiny_models["bert"], *flags])
    err = capsys.readouterr().err
    print(f"refused in {time.perf_counter() - started:.2f} s: {err.strip()}")
    assert code == 2 and message in err
    assert list(fresh.iterdir()) == []
