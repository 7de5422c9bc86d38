"""`--dry-run` is the real plan minus its execution: for every script its trials are the real plan's
(`plan_sweep`'s configs), its refusals the real run's (the same one line, exit 2), `--smoke-test`
plans the tiny model and `--resume` the named sweep with the trials it has left."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sweeps.engine import presets, resume, runner
from sweeps.engine.cli import build_parser, given_flags
from sweeps.engine.scripts import sweep_scripts
from trainables.core.errors import SweepInputError
from trainables.methods import get_method

ROOT = Path(__file__).resolve().parents[1]


def _scripts():
    for script, method in sweep_scripts().items():
        slow = script == "adaptive_layer"  # it loads its models' configs: 3 s or more
        yield pytest.param(script, method, id=script, marks=[pytest.mark.sweep] if slow else [])


def _dry(method, prog, argv, capsys):
    code = runner.main(["--dry-run", *argv], method=method, prog=prog)
    out = capsys.readouterr()
    return code, out.out, out.err


def _real_plan(method, prog, argv):
    """What `runner.main` plans before it starts Ray: the same parse, presets and smoke values."""
    method_cls = get_method(method)
    parser = build_parser(prog, "", method_cls)
    args = parser.parse_args(argv)
    given = given_flags(parser, argv)
    args = presets.apply(parser, argv, args, method_cls, given)
    return runner.plan_sweep(args, method=method_cls, prog=prog, given=given)


@pytest.mark.parametrize(("script", "method"), list(_scripts()))
def test_a_smoke_tests_dry_run_plans_the_trials_the_smoke_test_runs(script, method, tmp_path, data_dir, capsys):
    argv = ["--smoke-test", "--data-dir", str(data_dir), "--storage-path", str(tmp_path / "runs")]
    argv += ["--mlflow-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    code, out, err = _dry(method, script, argv, capsys)
    assert code == 0, err
    assert not (tmp_path / "runs").exists(), "the dry run wrote"
    planned = int(re.search(r"trials: (\d+)", out).group(1))
    plan = _real_plan(method, script, argv)
    assert planned == len(plan.configs), out
    if script in ("electra_layers", "improvements", "adaptive_layer", "tsdae", "evaluate"):  # --models' default
        assert "model: the smoke test's tiny random BERT" in out, out


def _refusal_cases(tmp_path, data_dir):
    runs = tmp_path / "runs"
    base = ["--data-dir", str(data_dir), "--storage-path", str(runs), "--mlflow-uri", f"sqlite:///{tmp_path / 'm.db'}"]
    taken = runs / "taken"
    taken.mkdir(parents=True)
    (taken / "sweep.json").write_text("{}")
    return {
        "layer beyond the tiny model": [*base, "--smoke-test", "--layers", "9"],
        "layer beyond a local model": [*base, "--models", "{bert}", "--layers", "9"],
        "a name taken": [*base, "--smoke-test", "--name", "taken"],
        "no such resume folder": [*base, "--resume", str(tmp_path / "nothing-here")],
        "a key with ..": [*base[:2], "--storage-path", "s3://bucket/a/../b", "--mlflow-uri", "sqlite:///x.db"],
        "a bad name": [*base, "--name", "../out"],
    }


@pytest.mark.parametrize(
    "case",
    [
        "layer beyond the tiny model",
        "layer beyond a local model",
        "a name taken",
        "no such resume folder",
        "a key with ..",
        "a bad name",
    ],
)
def test_a_dry_run_refuses_what_the_real_plan_refuses_with_the_same_line(
    case, tmp_path, data_dir, tiny_models, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("{bert}", tiny_models["bert"]) for a in _refusal_cases(tmp_path, data_dir)[case]]
    code, out, err = _dry("tmft", "electra_layers", argv, capsys)
    with pytest.raises(SweepInputError) as real:
        _real_plan("tmft", "electra_layers", argv)
    assert code == 2 and out == "", out
    assert err.strip() == f"error: {real.value}", (err, str(real.value))


@pytest.mark.sweep
def test_a_dry_run_of_a_resume_plans_what_is_left_of_the_named_sweep(sweep_env, tiny_models, capsys):
    from sweeps.electra_layers import main

    flags = [*sweep_env["flags"], "--models", tiny_models["bert"], "--layers", "0,1", "--seeds", "0", "--epochs", "1"]
    assert main([*flags, "--name", "done"]) == 0
    capsys.readouterr()
    folder = sweep_env["storage"] / "done"
    code, out, err = _dry("tmft", "electra_layers", [*sweep_env["base"], "--resume", str(folder)], capsys)
    assert code == 0, err
    assert f"resuming {folder}: 0 of its 2 trials left (2 finished)" in out, out
    assert f"it would resume {folder} and log to {sweep_env['uri']}" in out, out
    assert "trials: 2" in out and "260" not in out


@pytest.mark.parametrize(
    ("recorded", "made_by", "run_by", "suggested"),
    [
        ("electra_layers", "improvements", "electra_layers", "sweeps/improvements.py"),  # the record disagrees
        ("improvements", "improvements", "electra_layers", "sweeps/improvements.py"),
        ("electra_layers", "no-such-method", "electra_layers", None),
    ],
)
def test_a_resume_of_another_scripts_sweep_never_suggests_the_command_just_refused(
    recorded, made_by, run_by, suggested
):
    with pytest.raises(SweepInputError) as refused:
        resume.refuse_other_method("/x/sweep", {"script": recorded}, made_by, run_by)
    message = str(refused.value)
    assert f"python sweeps/{run_by}.py" not in message, message
    if suggested:
        assert f"resume it with: python {suggested} --resume /x/sweep" in message
    else:
        assert "does not match the code that made it" in message


def test_a_dry_run_names_the_mlflow_store_the_sweep_would_use(tmp_path, data_dir, capsys):
    storage = tmp_path / "runs"
    argv = ["--smoke-test", "--data-dir", str(data_dir), "--storage-path", str(storage), "--name", "n"]
    code, out, err = _dry("tmft", "electra_layers", argv, capsys)
    assert code == 0, err
    assert f"it would write to {storage}/n and log to sqlite:///{storage}/mlflow.db" in out, out
    assert "<storage-path>" not in out and not storage.exists()


def _sealed_sweep(tmp_path, data_dir, model, method: str, script: str, name: str):
    """A sweep folder as its driver writes it (sealed sweep.json), without running it."""
    from sweeps.engine import seal

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = ["--models", model, "--layers", "0,1", "--seeds", "0", "--epochs", "1", "--data-dir", str(data_dir)]
    argv += ["--storage-path", str(tmp_path / "runs"), "--mlflow-uri", uri]
    args = vars(runner.parser_for(method, script).parse_args(argv))
    folder = tmp_path / "runs" / name
    folder.mkdir(parents=True)
    saved = {"name": name, "script": script, "method": method, "method_class": method, "parent_run_id": "0" * 32}
    seal.record_sweep_file(str(folder), {**saved, "mlflow_uri": uri, "experiment": "test", "args": args})
    return folder, argv


def _suggested(message: str) -> list[str]:
    import shlex

    command = re.search(r"(?:resume it with: python \S+|continue it with) (--resume \S+)", message)
    return shlex.split(command.group(1))


def test_the_command_a_refusal_suggests_differs_from_the_refused_one_and_works(
    tmp_path, data_dir, tiny_models, capsys, monkeypatch
):
    """A name taken suggests --resume of that sweep; a sweep of another script suggests that script: each
    suggestion, run (as a dry run), is not refused."""
    monkeypatch.chdir(tmp_path)
    folder, argv = _sealed_sweep(tmp_path, data_dir, tiny_models["bert"], "tmft", "electra_layers", "taken")
    code, _, err = _dry("tmft", "electra_layers", [*argv, "--name", "taken"], capsys)
    assert code == 2 and "already exists" in err
    suggested = _suggested(err)
    assert suggested == ["--resume", str(folder)]
    code, out, err = _dry("tmft", "electra_layers", suggested, capsys)
    assert code == 0 and f"it would resume {folder}" in out, err

    other, argv = _sealed_sweep(tmp_path, data_dir, tiny_models["bert"], "improvements", "improvements", "ws")
    code, _, err = _dry("tmft", "electra_layers", ["--resume", str(other)], capsys)
    assert code == 2 and "resume it with: python sweeps/improvements.py" in err, err
    assert "python sweeps/electra_layers.py" not in err
    code, out, err = _dry("improvements", "improvements", _suggested(err), capsys)
    assert code == 0 and f"it would resume {other}" in out, err
