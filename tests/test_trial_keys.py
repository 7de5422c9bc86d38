"""Trial keys (sweeps/engine/trial_keys.py): what changes a trial's result changes its key, what does not
leaves it; a key is recomputed from what a run recorded; and the choice of a run to reuse
(sweeps/engine/reuse.py) refuses a deleted run, a lost checkpoint and a key the recorded settings do not give."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sweeps.engine import reuse, trial_keys
from sweeps.engine.cli import build_parser
from sweeps.engine.tracking import trial_params
from trainables.core import schema
from trainables.methods import get_method

CONFIG = {
    "method": "tmft",
    "model": "org/model",
    "layer": 3,
    "seed": 0,
    "epochs": 2,
    "lr": 2e-5,
    "precision": "fp32",
    "keep_checkpoints": "best",
    "best_dtype": "float16",
    "stage_key": "abc",
    "upstream_run_id": "r1",
    "_upstream_path": "/somewhere",
}


def _facts(**changes) -> trial_keys.KeyFacts:
    settings = build_parser("x", "", get_method("tmft")).settings
    base = dict(
        not_result=frozenset(s.name for s in settings if not s.result),
        models={"org/model": "org/model@rev1"},
        data={"stsb": "sha-1"},
        code="sha256:code-1",
        device="cuda",
    )
    return trial_keys.KeyFacts(**{**base, **changes})


def _key(config=CONFIG, **facts) -> str:
    return trial_keys.trial_key(config, _facts(**facts))[0]


def test_the_settings_registry_says_which_settings_change_the_result():
    settings = {s.name: s for s in build_parser("x", "", get_method("tmft")).settings}
    assert settings["lr"].result and settings["epochs"].result and settings["precision"].result
    for name in ("keep_checkpoints", "max_concurrent", "cpus_per_trial", "storage_path", "name", "resume"):
        assert not settings[name].result, name


@pytest.mark.parametrize(
    "change",
    [
        {"lr": 3e-5},
        {"seed": 1},
        {"layer": 4},
        {"epochs": 3},
        {"precision": "bf16"},
        {"stage_key": "abd"},
        {"method": "other"},
    ],
)
def test_a_setting_that_changes_the_result_changes_the_key(change):
    assert _key({**CONFIG, **change}) != _key()


@pytest.mark.parametrize("change", [{"keep_checkpoints": "all"}, {"upstream_run_id": "r2"}, {"_upstream_path": "/x"}])
def test_what_does_not_change_the_result_leaves_the_key(change):
    assert _key({**CONFIG, **change}) == _key()


@pytest.mark.parametrize(
    "facts",
    [
        {"models": {"org/model": "org/model@rev2"}},
        {"data": {"stsb": "sha-2"}},
        {"data": {"stsb": "sha-1", "eval_sick": "sha-3"}},
        {"code": "sha256:code-2"},
        {"device": "cpu"},
    ],
)
def test_another_model_revision_data_byte_code_or_device_changes_the_key(facts):
    assert _key(**facts) != _key()


def test_a_local_model_is_its_files_whatever_its_folder(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "config.json").write_text('{"layers": 2}')
        (tmp_path / folder / "model.safetensors").write_bytes(b"\x00" * 64)
    same = trial_keys.folder_digest(tmp_path / "a")
    assert trial_keys.folder_digest(tmp_path / "b") == same
    (tmp_path / "b" / "model.safetensors").write_bytes(b"\x00" * 63 + b"\x01")  # one byte
    assert trial_keys.folder_digest(tmp_path / "b") != same
    a = dict(CONFIG, model=str(tmp_path / "a"))
    b = dict(CONFIG, model=str(tmp_path / "b"))
    facts = {str(tmp_path / "a"): f"sha256:{same}", str(tmp_path / "b"): f"sha256:{same}"}
    assert _key(a, models=facts) == _key(b, models=facts)


def test_a_hub_copy_is_its_id_and_revision(tmp_path):
    snapshot = tmp_path / "models--org--model" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    assert trial_keys.hub_revision(snapshot) == "0123abc"
    assert trial_keys.hub_revision(tmp_path) is None


def test_the_code_hash_follows_the_trainables_imports_and_nothing_else(tmp_path, monkeypatch):
    package = tmp_path / "trainables"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "trial.py").write_text("from . import helper\n\ndef f():\n    import trainables.lazy\n")
    (package / "helper.py").write_text("X = 1\n")
    (package / "lazy.py").write_text("Y = 1\n")
    (package / "unrelated.py").write_text("Z = 1\n")
    monkeypatch.setattr(trial_keys, "PROJECT_ROOT", tmp_path)

    def digest():
        trial_keys.code_hash.cache_clear()
        return trial_keys.code_hash("trainables.trial")

    assert set(trial_keys.project_modules("trainables.trial")) == {
        "trainables",
        "trainables.trial",
        "trainables.helper",
        "trainables.lazy",
    }
    before = digest()
    (package / "unrelated.py").write_text("Z = 2\n")
    assert digest() == before
    (package / "lazy.py").write_text("Y = 2\n")  # imported inside a function: still the trial's code
    assert digest() != before
    trial_keys.code_hash.cache_clear()


def _run(config, facts, *, run_id="r", deleted=False, tags=None, params=None):
    key, record = trial_keys.trial_key(config, facts)
    recorded = {
        **{k: str(v) for k, v in trial_params(config, {"sweep": "old"}).items()},
        **{f"data_sha_{k}": v for k, v in facts.data.items()},
        **record,
        **(params or {}),
    }
    return SimpleNamespace(
        info=SimpleNamespace(run_id=run_id, lifecycle_stage="deleted" if deleted else "active"),
        data=SimpleNamespace(params=recorded, tags={schema.TAG_TRIAL_KEY: key, **(tags or {})}, metrics={}),
    )


def test_a_key_read_from_a_store_is_recomputed_from_the_runs_recorded_settings():
    facts = _facts()
    run = _run(CONFIG, facts)
    assert trial_keys.key_of_run(run) == _key()
    run.data.params["lr"] = "3e-05"  # a recorded setting that does not give the key it is tagged with
    assert trial_keys.key_of_run(run) != trial_keys.recorded_key(run)
    del run.data.params["code_hash"]
    assert trial_keys.key_of_run(run) is None


def test_the_run_to_reuse_is_refused_when_deleted_tampered_or_without_its_checkpoint(tmp_path):
    facts, key = _facts(), _key()
    checkpoint = tmp_path / "checkpoint_000001"
    checkpoint.mkdir()
    where = {schema.TAG_CHECKPOINT: str(checkpoint)}

    good = _run(CONFIG, facts, run_id="good", tags=where)
    assert reuse.choose(key, [("store", good)], None)[0] is good

    deleted = _run(CONFIG, facts, run_id="gone", deleted=True, tags=where)
    run, _, why = reuse.choose(key, [("store", deleted)], None)
    assert run is None and "gone (sweep old) was deleted" in why

    tampered = _run(CONFIG, facts, run_id="t", tags=where, params={"epochs": "5"})
    run, _, why = reuse.choose(key, [("store", tampered)], None)
    assert run is None and "do not give its key" in why

    lost = _run(CONFIG, facts, run_id="lost", tags={schema.TAG_CHECKPOINT: str(tmp_path / "nothing")})
    run, _, why = reuse.choose(key, [("store", lost)], None)
    assert run is None and "checkpoint of run lost is gone" in why

    assert reuse.choose(key, [("store", lost), ("store", good)], None)[0] is good  # the next one that qualifies
    own = _run(CONFIG, facts, run_id="mine", tags={**where, schema.TAG_PARENT: "p"})
    assert reuse.choose(key, [("store", own)], "p")[0] is None  # never a run of the sweep itself


def test_the_report_counts_a_reused_trial_once():
    import pandas as pd

    from analysis.loader import _count_once

    frame = pd.DataFrame(
        {"run_id": ["a", "b", "c", "d"], "reused_from": [None, "a", None, "elsewhere"], "x": [1, 1, 2, 3]}
    )
    assert list(_count_once(frame)["run_id"]) == ["a", "c", "d"]


def test_a_trial_one_preset_reused_from_another_is_in_both_presets_tables_once():
    """TSDAE's Table 6 reuses Table 5's deletion at ratio 0.3: counted once, and still a row of Table 6."""
    import pandas as pd

    from analysis.loader import _count_once, of_preset
    from analysis.published import preset_names

    frame = pd.DataFrame(
        {
            "run_id": ["t5-delete", "t6-0.3", "t6-0.5", "t7-mean"],
            "reused_from": [None, "t5-delete", None, None],
            "preset": ["tsdae-table5", "tsdae-table6", "tsdae-table6", "tsdae-table7"],
        }
    )
    once = _count_once(frame)
    assert list(once["run_id"]) == ["t5-delete", "t6-0.5", "t7-mean"]
    assert list(of_preset(once, "tsdae-table6")["run_id"]) == ["t5-delete", "t6-0.5"]
    assert list(of_preset(once, "tsdae-table5")["run_id"]) == ["t5-delete"]
    assert list(of_preset(once, "tsdae-table7")["run_id"]) == ["t7-mean"]
    only_linked = _count_once(frame.assign(preset=["tsdae-table5", "tsdae-tying", "tsdae-table6", "tsdae-table7"]))
    assert preset_names(only_linked) == ["tsdae-table5", "tsdae-table6", "tsdae-table7", "tsdae-tying"]


def _dead_pid() -> int:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def _check_claims(root: str):
    import json
    import os
    import socket

    from sweeps.engine import trial_claims
    from trainables.core import conditional_writes

    assert trial_claims.claim(root, "k1", "first") is None  # new: ours
    assert trial_claims.still_held(root, "k1") is None  # held by this process: nothing to wait for
    other = {"host": socket.gethostname(), "pid": os.getppid(), "sweep": "other", "time": 0}
    conditional_writes.create_if_absent(trial_claims.location(root, "k2"), json.dumps(other).encode())
    assert trial_claims.claim(root, "k2", "second")["sweep"] == "other"  # a live driver's: wait for it
    assert trial_claims.still_held(root, "k2")["sweep"] == "other"
    dead = {**other, "pid": _dead_pid()}
    conditional_writes.create_if_absent(trial_claims.location(root, "k3"), json.dumps(dead).encode())
    assert trial_claims.claim(root, "k3", "second") is None  # a driver that is gone: taken over
    assert json.loads(conditional_writes.read_versioned(trial_claims.location(root, "k3"))[0])["sweep"] == "second"
    far = {"host": "another-host", "pid": 1, "sweep": "far", "time": 0}  # from another host, a day old
    conditional_writes.create_if_absent(trial_claims.location(root, "k4"), json.dumps(far).encode())
    assert trial_claims.claim(root, "k4", "second") is None


def test_a_key_is_claimed_once_waited_for_while_its_driver_runs_and_taken_over_when_it_is_gone(tmp_path):
    _check_claims(str(tmp_path))


def test_claims_on_an_object_store(s3):
    _check_claims(s3.uri("claims"))


def test_seeds_by_need_continues_its_rounds_where_reused_trials_leave_them():
    from sweeps.engine.seed_search import SeedsByNeed, config_key
    from trainables.core.method import MetricContract

    contract = MetricContract(
        primary="best_dev_spearman", report="test_spearman_at_best_dev", axes=("model", "layer", "seed"), select="layer"
    )
    configs = [{"model": "m", "layer": layer, "seed": seed} for layer in (0, 1) for seed in (0, 1, 2, 3)]
    score = {0: [50.0, 50.1, 50.2, 50.3], 1: [70.0, 70.2, 70.1, 70.3]}
    known = {config_key(c, ""): score[c["layer"]][c["seed"]] for c in configs if c["seed"] < 2}  # the old sweep's
    searcher = SeedsByNeed(configs, contract, initial=2, width=0.5, pooled=False, known=known)
    first = [searcher.suggest("a"), searcher.suggest("b")]
    assert [(c["layer"], c["seed"]) for c in first] == [(0, 2), (1, 2)]  # round 0 decided on the reused values
    assert searcher.suggest("c") is None and [h["round"] for h in searcher.history] == [0]
    for trial, config in zip("ab", first):
        searcher.on_trial_complete(trial, {"best_dev_spearman": score[config["layer"]][config["seed"]]})
    assert searcher.suggest("d") == "FINISHED"  # as a sweep that ran every trial itself would


def test_every_model_a_config_names_counts_by_its_identity():
    config = {"method": "meta", "sources": "a,b", "seed": 0}
    before = _key(config, models={"a": "sha256:1", "b": "sha256:2"})
    assert _key(config, models={"a": "sha256:1", "b": "sha256:3"}) != before  # one source's files changed


def test_one_byte_of_a_data_file_changes_the_plans_checksums_so_the_key(data_dir, tmp_path):
    import shutil

    from trainables.training.tokenized import load_task

    shutil.copytree(data_dir / "stsbenchmark", tmp_path / "stsbenchmark")
    _, before = load_task("stsb", tmp_path)
    dev = tmp_path / "stsbenchmark" / "sts-dev.csv"
    data = bytearray(dev.read_bytes())
    data[-2] = ord("0") if data[-2] != ord("0") else ord("1")
    dev.write_bytes(bytes(data))
    _, after = load_task("stsb", tmp_path)
    assert after != before and _key(data=after) != _key(data=before)


@pytest.mark.parametrize("capability, kind", [((9, 0), "cuda:tf32"), ((7, 0), "cuda:fp16")])
def test_the_device_kind_says_what_precision_auto_runs_under_on_this_gpu(monkeypatch, capability, kind):
    import torch

    from trainables.encoders import precision

    monkeypatch.setattr(precision, "trials_on_gpu", lambda args: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert trial_keys.device_kind({"gpus_per_trial": "auto"}) == kind
    monkeypatch.setattr(precision, "trials_on_gpu", lambda args: None)
    assert trial_keys.device_kind({}) == "cluster"
    assert trial_keys.device_kind({"simulate": True}) == "simulated"
