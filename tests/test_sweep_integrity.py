"""What a sweep reads from its own folder or from an MLflow store cannot take it elsewhere, and a refusal
writes nothing (issue "Reliability III"): a tampered sweep.json, a copied sweep folder, a crafted
`runs:/` tag, numbers beyond what Ray and numpy hold, a full disk, a preset changed by a flag, a
resume by another script, the resume key file missing or a folder. Most are refused before Ray starts
and need no Ray; the whole sweeps (a copied folder resumed, ENOSPC mid-sweep then --resume) are in
the `sweep` step."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import time
from pathlib import Path

import pytest
from conftest import sweep_environment
from mlflow import MlflowClient
from sweep_helpers import sweep_args

from sweeps import electra_layers, evaluate, sed
from sweeps.engine import presets, runner, seal, stops, storage
from sweeps.engine.cli import given_flags
from trainables.core import schema
from trainables.core.errors import SweepInputError
from trainables.encoders.run_refs import resolve_run
from trainables.methods import get_method

TMFT = "--layers 1 --seeds 0 --epochs 1"


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory) -> Path:
    """An MLflow SQLite store with its tables made (seconds), copied by each test that needs one (milliseconds)."""
    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


def store_at(empty_store: Path, path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(empty_store, path)
    return f"sqlite:///{path}"


@pytest.fixture
def env(tmp_path, data_dir, empty_store):
    """sweep_env's flags without a Ray (everything here is refused or planned before Ray starts)."""
    found = sweep_environment(tmp_path, data_dir)
    store_at(empty_store, tmp_path / "mlflow.db")
    return found


def started(argv: list[str], method="tmft", prog="electra_layers") -> runner.SweepPlan:
    """A sweep stopped during its upstream stages: planned and begun (parent run, sealed sweep.json), no
    Tune state yet."""
    parser = runner.parser_for(method, prog)
    args = presets.apply(parser, argv, parser.parse_args(argv), get_method(method))
    plan = runner.plan_sweep(args, method=method, prog=prog)
    runner.begin(plan)
    return plan


def refused(main, argv, capsys) -> tuple[str, float]:
    """(the one-line error, seconds) of a refused command; it must exit 2 without a traceback."""
    capsys.readouterr()
    start = time.perf_counter()
    assert main(argv) == 2
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "Traceback" not in err and len(err.splitlines()) == 1, err
    print(f"refused in {seconds:.2f} s: {err[:160]}")
    return err, seconds


# --- 1, 3: sweep.json is sealed; a copied folder resumes where it is ----------------------------------------
def test_a_tampered_sweep_json_is_refused_and_nothing_is_written_outside(env, tiny_models, capsys):
    plan = started(sweep_args(tiny_models["bert"], f"{TMFT} --name victim", *env["flags"]))
    sweep_file = Path(plan.sweep_dir, storage.SWEEP_FILE)
    original = sweep_file.read_text()
    for key, value in (("name", "../../escape"), ("mlflow_uri", f"sqlite:///{env['tmp'] / 'other.db'}")):
        saved = json.loads(original)
        saved[key] = value
        sweep_file.write_text(json.dumps(saved, indent=2))
        err, seconds = refused(electra_layers.main, ["--resume", plan.sweep_dir], capsys)
        assert "sweep.json is not the one this sweep's driver wrote" in err and "sweeps.engine.seal" in err
        assert seconds < 10
    assert not (env["storage"].parent.parent / "escape").exists() and not (env["tmp"] / "other.db").exists()
    sweep_file.write_text(original)
    assert runner.plan_sweep(electra_layers_args(["--resume", plan.sweep_dir]), method="tmft").name == "victim"


def electra_layers_args(argv):
    return runner.parser_for("tmft", "electra_layers").parse_args(argv)


@pytest.mark.sweep  # about 2 s: out of the fast run, which stays under 3 minutes
def test_a_copied_sweep_resumes_in_its_copy_with_the_store_beside_it(env, tiny_models, capsys, empty_store):
    store_at(empty_store, env["storage"] / "mlflow.db")
    plan = started(sweep_args(tiny_models["bert"], f"{TMFT} --name orig", *env["flags"][:2], *env["flags"][4:]))
    # (the default MLflow store: <storage>/mlflow.db)
    assert plan.mlflow_uri.endswith(str(env["storage"] / "mlflow.db"))
    copy = env["tmp"] / "copied"
    shutil.copytree(env["storage"], copy, symlinks=True)  # cp -a of the whole storage path
    before = sorted(p.name for p in Path(plan.sweep_dir).iterdir())
    resumed = runner.plan_sweep(electra_layers_args(["--resume", str(copy / "orig")]), method="tmft")
    assert resumed.sweep_dir == str(copy / "orig") and resumed.storage_path == str(copy)
    assert resumed.name == "orig" and resumed.mlflow_uri == f"sqlite:///{copy / 'mlflow.db'}"
    assert resumed.parent_run_id == plan.parent_run_id

    alone = env["tmp"] / "elsewhere"  # only the sweep folder, renamed: its store is not beside it
    alone.mkdir()
    shutil.copytree(plan.sweep_dir, alone / "renamed", symlinks=True)
    err, _ = refused(electra_layers.main, ["--resume", str(alone / "renamed")], capsys)
    assert f"parent run {plan.parent_run_id} is not in" in err and "copy that store beside it" in err
    assert sorted(p.name for p in alone.iterdir()) == ["renamed"], "no MLflow store may be created"
    assert sorted(p.name for p in Path(plan.sweep_dir).iterdir()) == before


@pytest.mark.sweep
def test_a_copied_sweep_stopped_during_its_stages_resumes_without_touching_the_original(sweep_env, tiny_models):
    from mlflow_helpers import runs_by_role

    plan = started(sweep_args(tiny_models["bert"], f"{TMFT} --name orig", *sweep_env["flags"]))
    copy = sweep_env["tmp"] / "copy"
    shutil.copytree(plan.sweep_dir, copy / "orig", symlinks=True)
    original = {p.name: p.stat().st_mtime_ns for p in Path(plan.sweep_dir).iterdir()}
    assert electra_layers.main(["--resume", str(copy / "orig")]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in Path(plan.sweep_dir).iterdir()} == original
    assert (copy / "orig" / "tuner.pkl").is_file() and not (Path(plan.sweep_dir) / "tuner.pkl").exists()
    parents, children = runs_by_role(sweep_env["uri"])
    assert [p.info.status for p in parents] == ["FINISHED"] and [c.info.status for c in children] == ["FINISHED"]


# --- 2: runs:/ references follow only trial checkpoints of their sweep ---------------------------------------
def _store_with_trial(tmp_path: Path, empty_store: Path, checkpoint: Path | None = None, sweep_json: bool = True):
    """A local MLflow store with a sweep's parent run and one trial run whose checkpoint tag names
    `checkpoint` (default: <sweep>/trial_0/checkpoint_000001, with best/ in it)."""
    uri = store_at(empty_store, tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    experiment = client.create_experiment("refs")
    parent = client.create_run(experiment).info.run_id
    sweep = tmp_path / "runs" / "s"
    if checkpoint is None:
        checkpoint = sweep / "trial_0" / "checkpoint_000001"
    if sweep_json:
        sweep.mkdir(parents=True, exist_ok=True)
        (sweep / storage.SWEEP_FILE).write_text(json.dumps({"parent_run_id": parent, "args": {}}))
    (checkpoint / "best").mkdir(parents=True, exist_ok=True)
    (checkpoint / "best" / "config.json").write_text('{"model_type": "bert"}')
    run = client.create_run(experiment, tags={schema.TAG_PARENT: parent, schema.TAG_CHECKPOINT: str(checkpoint)})
    return uri, run.info.run_id, sweep


def test_a_run_reference_resolves_a_trial_checkpoint_of_its_sweep(tmp_path, empty_store):
    uri, run_id, sweep = _store_with_trial(tmp_path, empty_store)
    assert resolve_run(f"runs:/{run_id}", uri) == sweep / "trial_0" / "checkpoint_000001" / "best"
    assert resolve_run(f"runs:/{run_id}/", uri) == sweep / "trial_0" / "checkpoint_000001" / "best"
    with pytest.raises(SweepInputError, match=f"the path 'best' after the id cannot be followed: pass runs:/{run_id}"):
        resolve_run(f"runs:/{run_id}/best", uri)


@pytest.mark.parametrize("where", ["outside", "no-sweep-json", "other-parent", "dotdot", "symlink"])
def test_a_crafted_checkpoint_tag_is_refused(tmp_path, empty_store, where):
    outside = tmp_path / "anywhere" / "checkpoint_000001"
    (outside / "best").mkdir(parents=True)
    (outside / "best" / "config.json").write_text('{"model_type": "bert"}')
    if where == "outside":
        uri, run_id, _ = _store_with_trial(tmp_path, empty_store, outside)
    elif where == "no-sweep-json":
        uri, run_id, _ = _store_with_trial(tmp_path, empty_store, sweep_json=False)
    elif where == "other-parent":
        uri, run_id, sweep = _store_with_trial(tmp_path, empty_store)
        (sweep / storage.SWEEP_FILE).write_text(json.dumps({"parent_run_id": "another", "args": {}}))
    elif where == "dotdot":
        uri, run_id, sweep = _store_with_trial(tmp_path, empty_store)
        MlflowClient(uri).set_tag(run_id, schema.TAG_CHECKPOINT, f"{sweep}/trial_0/../../../anywhere/checkpoint_000001")
    else:  # the checkpoint is in the sweep, its best/ a link out of it
        uri, run_id, sweep = _store_with_trial(tmp_path, empty_store)
        best = sweep / "trial_0" / "checkpoint_000001" / "best"
        shutil.rmtree(best)
        best.symlink_to(outside / "best")
    with pytest.raises(SweepInputError, match="is not a trial checkpoint of its sweep") as error:
        resolve_run(f"runs:/{run_id}", uri)
    assert "\n" not in str(error.value)


def test_evaluate_refuses_a_run_whose_tag_points_outside_every_sweep(
    tmp_path, data_dir, tiny_models, capsys, empty_store
):
    outside = tmp_path / "anywhere" / "checkpoint_000001"
    uri, run_id, _ = _store_with_trial(tmp_path, empty_store, outside)
    shutil.rmtree(outside / "best")
    shutil.copytree(tiny_models["bert"], outside / "best")  # a loadable model: today it is scored, exit 0
    argv = ["--models", f"runs:/{run_id}", "--sets", "stsb", "--storage-path", str(tmp_path / "s"), "--mlflow-uri", uri]
    err, seconds = refused(evaluate.main, [*argv, "--data-dir", str(data_dir)], capsys)
    assert "is not a trial checkpoint of its sweep" in err and seconds < 10


def test_a_run_reference_into_a_missing_sqlite_store_creates_nothing(tmp_path):
    with pytest.raises(SweepInputError, match="there is no MLflow store at"):
        resolve_run("runs:/abc", f"sqlite:///{tmp_path / 'none.db'}")
    assert not (tmp_path / "none.db").exists()


# --- 4: numbers are bounded before Ray starts --------------------------------------------------------------
@pytest.mark.parametrize(
    "flags, message",
    [
        (("--forward-chunk", "99999999999999999999"), "99999999999999999999 is beyond the largest whole number"),
        (
            ("--seeds", "99999999999999999999"),
            "--seeds holds 99999999999999999999: a seed must be within 0..4294967295",
        ),
        (("--seeds", "4294967296"), "--seeds holds 4294967296: a seed must be within 0..4294967295"),
        (("--seeds", "0-99999999999999999999"), "holds more than 100000 values"),
        (("--max-train-samples", "9223372036854775808"), "is beyond the largest whole number"),
    ],
)
def test_numbers_beyond_what_ray_and_numpy_hold_are_refused(env, tiny_models, capsys, flags, message):
    argv = sweep_args(tiny_models["bert"], "--layers 1 --epochs 1", *env["flags"], *flags)
    err, seconds = refused(electra_layers.main, argv, capsys)
    assert message in err and seconds < 10
    assert not env["storage"].exists()


def test_the_largest_seed_is_accepted(env, tiny_models):
    plan = runner.plan_sweep(
        electra_layers_args(sweep_args(tiny_models["bert"], "--layers 1 --seeds 4294967295", *env["flags"])),
        method="tmft",
    )
    assert [c["seed"] for c in plan.configs] == [4294967295]


# --- 5: free space against the plan's disk figure; ENOSPC ends in one line ---------------------------------
def test_a_storage_path_without_room_for_the_plan_is_refused_unless_forced(env, tiny_models, capsys, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 1000))
    argv = sweep_args(tiny_models["bert"], TMFT, *env["flags"])
    err, seconds = refused(electra_layers.main, argv, capsys)
    assert "0.00 GB free at" in err and "--force to start anyway" in err and seconds < 10
    assert not env["storage"].exists()
    plan = runner.plan_sweep(electra_layers_args([*argv, "--force"]), method="tmft")
    assert "starting anyway (--force)" in capsys.readouterr().err and plan.configs


class Full:
    """seal.record_files that fails with ENOSPC once the sweep's Tune state is being sealed."""

    def __init__(self, original):
        self.original, self.calls = original, 0

    def __call__(self, sweep_dir, files):
        if any(name.startswith("experiment_state") for name in files):
            self.calls += 1
            raise OSError(errno.ENOSPC, "No space left on device", str(Path(sweep_dir, seal.SEAL_FILE)))
        return self.original(sweep_dir, files)


@pytest.mark.sweep
def test_a_full_disk_mid_sweep_ends_in_one_line_and_resume_completes(sweep_env, tiny_models, monkeypatch, capsys):
    from mlflow_helpers import runs_by_role

    full = Full(seal.record_files)
    monkeypatch.setattr(seal, "record_files", full)
    argv = sweep_args(tiny_models["bert"], "--layers 1 --seeds 0,1 --epochs 1 --name full", *sweep_env["flags"])
    assert electra_layers.main(argv) == 1 and full.calls
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: no space left on the device holding ") and "--resume" in err[-1], err
    assert not any("Traceback" in line for line in err)
    parents, children = runs_by_role(sweep_env["uri"])
    assert {r.info.status for r in [*parents, *children]} <= {"FAILED", "FINISHED"}
    assert [p.info.status for p in parents] == ["FAILED"]
    sweep_dir = sweep_env["storage"] / "full"
    assert not list(sweep_dir.glob(".*.tmp")), "a temporary seal file was left"
    monkeypatch.setattr(seal, "record_files", full.original)  # space freed
    assert electra_layers.main(["--resume", str(sweep_dir)]) == 0
    parents, children = runs_by_role(sweep_env["uri"])
    assert [p.info.status for p in parents] == ["FINISHED"]
    assert sorted(c.data.params["seed"] for c in children) == ["0", "1"]
    assert {c.info.status for c in children} == {"FINISHED"}


def test_enospc_when_the_sweep_begins_marks_its_run_failed_and_frees_the_name(env, tiny_models, monkeypatch):
    argv = sweep_args(tiny_models["bert"], f"{TMFT} --name begun", *env["flags"])
    plan = runner.plan_sweep(electra_layers_args(argv), method="tmft")

    def full(sweep_dir, files):
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(sweep_dir, seal.SEAL_FILE)))

    monkeypatch.setattr(seal, "record_files", full)
    with pytest.raises(OSError) as error:
        runner.begin(plan)
    line = stops.stopped_for_space(plan, stops.no_space(error.value))
    assert f"no space left on the device holding {plan.sweep_dir}" in line and "--name begun is free" in line
    assert MlflowClient(env["uri"]).get_run(plan.parent_run_id).info.status == "FAILED"
    assert sorted(p.name for p in Path(plan.sweep_dir).iterdir()) == []  # no claim, no temporary seal


def test_enospc_while_planning_is_one_line(monkeypatch, capsys):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "/data/cache/tokens.pt")

    monkeypatch.setattr(runner, "plan_sweep", full)
    assert electra_layers.main(["--models", "m"]) == 1
    assert capsys.readouterr().err.strip() == (
        "error: no space left on the device holding /data/cache; free space there, run again"
    )


# --- 8: a flag that changes what a preset reproduces ---------------------------------------------------------
def _preset_args(method, argv, capsys):
    parser = runner.parser_for(method)
    args = presets.apply(parser, argv, parser.parse_args(argv), get_method(method), given_flags(parser, argv))
    return args, capsys.readouterr().err


def test_a_flag_that_changes_what_a_preset_reproduces_drops_its_label(capsys):
    args, err = _preset_args("tmft", ["--preset", "fig5", "--task", "stsb"], capsys)
    assert args.preset is None and args.task == "stsb"
    assert "warning: --task stsb (the preset's: mrpc)" in err and "not labelled fig5" in err
    args, err = _preset_args("tmft", ["--preset", "fig5", "--models", "m", "--seeds", "0", "--task", "mrpc"], capsys)
    assert args.preset == "fig5" and not err  # models, seeds and the preset's own task keep the label
    args, err = _preset_args("tsdae", ["--preset", "tsdae-table2", "--corpus", "twitterpara"], capsys)
    assert args.preset == "tsdae-table2" and not err  # a part of its grid
    args, err = _preset_args("tsdae", ["--preset", "tsdae-table2", "--corpus", "wiki"], capsys)
    assert args.preset is None and "--corpus wiki" in err


# --- 10, 13: the resume key ----------------------------------------------------------------------------------
def test_a_resume_key_that_is_a_folder_or_deleted_is_named(env, tiny_models, monkeypatch, capsys):
    monkeypatch.delenv(seal.KEY_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(env["tmp"] / "config"))
    plan = started(sweep_args(tiny_models["bert"], f"{TMFT} --name keyed", *env["flags"]))
    key = env["tmp"] / "config" / "embsweep" / "resume.key"
    assert key.is_file()
    key.unlink()
    err, seconds = refused(electra_layers.main, ["--resume", plan.sweep_dir], capsys)
    assert f"the resume key file {key} is missing (deleted?)" in err and seconds < 10
    assert not key.exists(), "a deleted key is not silently made anew"
    key.mkdir()
    err, _ = refused(electra_layers.main, ["--resume", plan.sweep_dir], capsys)
    assert f"the resume key {key} is not a file" in err


def test_the_claim_file_is_not_world_writable(tmp_path):
    old = os.umask(0)
    try:
        storage.claim(str(tmp_path / "s"), "s")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "s" / storage.CLAIM_FILE).stat().st_mode) == 0o644


# --- 11: a refusal writes nothing ----------------------------------------------------------------------------
def test_a_smoke_test_refusal_leaves_no_smoke_models(env, capsys):
    argv = ["--smoke-test", "--layers", "9", "--storage-path", str(env["storage"]), "--data-dir", env["base"][7]]
    err, seconds = refused(electra_layers.main, argv, capsys)
    assert "layer 9 is beyond" in err and seconds < 10
    assert not env["storage"].exists()


def test_a_sed_preset_without_its_teachers_sweep_creates_no_store(env, capsys):
    argv = ["--preset", "sed-table3", "--storage-path", str(env["storage"]), "--data-dir", env["base"][7]]
    err, seconds = refused(sed.main, argv, capsys)
    assert "there is no MLflow store at" in err and seconds < 10
    assert not env["storage"].exists()


# --- 12: resume messages --------------------------------------------------------------------------------------
def test_a_sweep_resumed_by_another_script_names_the_script_that_made_it(env, tiny_models, capsys):
    plan = started(
        ["--models", tiny_models["bert"], "--sets", "stsb", "--name", "ev", *env["base"]],
        method="evaluate",
        prog="evaluate",
    )
    err, seconds = refused(electra_layers.main, ["--resume", plan.sweep_dir], capsys)
    assert "made by sweeps/evaluate.py (method evaluate)" in err and "--models" not in err and seconds < 10
    assert f"python sweeps/evaluate.py --resume {plan.sweep_dir}" in err


def test_flags_left_unset_are_no_difference_on_resume(env, tiny_models, capsys):
    plan = started(
        ["--models", tiny_models["bert"], "--method", "ct", "--steps", "2", "--name", "t", *env["base"]],
        method="tsdae",
        prog="tsdae",
    )
    parser = runner.parser_for("tsdae", "tsdae")
    argv = ["--resume", plan.sweep_dir]
    resumed = runner.plan_sweep(parser.parse_args(argv), method="tsdae", given=given_flags(parser, argv))
    assert resumed.parent_run_id == plan.parent_run_id
    argv = ["--resume", plan.sweep_dir, "--steps", "3"]
    with pytest.raises(SweepInputError, match="these differ: --steps 3 \\(the sweep has 2\\)") as error:
        runner.plan_sweep(parser.parse_args(argv), method="tsdae", given=given_flags(parser, argv))
    assert "None" not in str(error.value)


def test_sed_counts_only_trials_that_kept_a_model(tmp_path, empty_store):
    from trainables.methods.sed.targets import _sweep_teachers

    uri = store_at(empty_store, tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    experiment = client.create_experiment("t")
    parent = client.create_run(experiment, tags={schema.TAG_ROLE: "sweep", schema.TAG_SWEEP: "teach"}).info.run_id
    for seed in (0, 1):
        tags = {schema.TAG_ROLE: "trial", schema.TAG_PARENT: parent, schema.TAG_CHECKPOINT: str(tmp_path / "c")}
        run = client.create_run(experiment, tags=tags).info.run_id
        client.log_param(run, "keep_checkpoints", "none" if seed else "best")
        client.set_terminated(run, "FINISHED")
    with pytest.raises(SweepInputError) as error:
        _sweep_teachers("sweep:teach", uri)
    assert "1 finished trial(s) that kept a model found (1 more ran with --keep-checkpoints none" in str(error.value)
