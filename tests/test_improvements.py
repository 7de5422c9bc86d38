"""WS+TMFT and DAPT+TMFT as chained stages (sweeps/improvements.py) on a real local Ray and MLflow store.

One DAPT stage per model and one WS stage per (model, layer) are computed, whatever the number of
seeds, and a second sweep with the same storage path computes nothing. Executions are counted in
the stage store's log (`<storage>/stages/executions.jsonl`), written by the computing process."""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow_helpers import runs_by_role
from sweep_helpers import sweep_args

from sweeps.engine.stages_plan import ROLE_STAGE, TAG_STAGE_KEY
from sweeps.improvements import main
from trainables.core import schema
from trainables.stages.store import stage_root
from trainables.stages.upstream import read_executions

STAGE_FLAGS = (  # small WS and DAPT stages
    "--ws-epochs 1 --ws-max-train-samples 64 --dapt-epochs 1 --dapt-max-sentences 48 --dapt-batch-size 16 "
    "--dapt-accumulation 2"
)


def _stage_runs(uri: str, experiment: str = "test") -> list:
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    return client.search_runs(
        [found.experiment_id], filter_string=f"tags.`{schema.TAG_ROLE}` = '{ROLE_STAGE}'", max_results=1000
    )


@pytest.mark.sweep
def test_stages_are_computed_once_and_shared_across_seeds_layers_and_sweeps(sweep_env, tiny_models):
    models = [tiny_models["bert"], tiny_models["electra-generator"]]
    sweep = f"--layers 0,1,2 --seeds 0,1 --epochs 1 --improvement both {STAGE_FLAGS} --name first"
    assert main(sweep_args(",".join(models), sweep, *sweep_env["flags"])) == 0
    stages = Path(sweep_env["storage"]) / "stages"
    executions = read_executions(stages)
    kinds = Counter((e["kind"], e["model"]) for e in executions)
    assert {m: kinds[("dapt", m)] for m in models} == {m: 1 for m in models}, "DAPT must run exactly once per model"
    ws_layers = Counter((e["model"], e["layer"]) for e in executions if e["kind"] == "ws")
    assert ws_layers == Counter({(m, layer): 1 for m in models for layer in (0, 1, 2)}), (
        "one WS stage per model and layer"
    )
    assert len(executions) == 2 + 6

    parents, trials = runs_by_role(sweep_env["uri"])
    stage_runs = {r.info.run_id: r for r in _stage_runs(sweep_env["uri"])}
    assert len(trials) == 2 * 3 * 2 * 2 and len(stage_runs) == 8
    assert Counter(t.data.params["method"] for t in trials) == {"ws+tmft": 12, "dapt+tmft": 12}
    for stage in stage_runs.values():
        assert stage.info.status == "FINISHED" and stage.data.params["method"] in ("ws", "dapt")
        assert stage.data.tags[schema.TAG_PARENT] == parents[0].info.run_id
        assert stage.data.tags[TAG_STAGE_KEY] == stage.data.params["stage_key"]
        assert (stages / stage.data.params["stage_key"] / "stage.json").is_file()
    for trial in trials:
        params = trial.data.params
        upstream = stage_runs[params["upstream_run_id"]]  # an existing run of this store
        assert upstream.data.params["method"] == params["upstream_method"] == params["method"].split("+")[0]
        assert upstream.data.params["stage_key"] == params["stage_key"]
        assert upstream.data.params["model"] == params["model"]
        assert trial.info.status == "FINISHED" and "best_dev_spearman" in trial.data.metrics
        if params["method"] == "ws+tmft":
            assert upstream.data.params["layer"] == params["layer"] and params["ws_selection"] == "cosine"
            assert upstream.data.params["seed"] == "0"  # one WS stage for all seeds, as the paper
        else:
            assert params["dapt_corpus"] == "sick+stsb-train+wiki" and params["dapt_head"] == "auto"
            assert upstream.data.params["head_source"] == "new"
    # WS stages: one per (model, layer), shared by both seeds; DAPT: one per model, shared by all.
    shared = Counter((t.data.params["method"], t.data.params["upstream_run_id"]) for t in trials)
    assert sorted(n for (m, _), n in shared.items() if m == "ws+tmft") == [2] * 6
    assert sorted(n for (m, _), n in shared.items() if m == "dapt+tmft") == [6, 6]

    # The WS trial starts from the stage's weights, not the pretrained ones.
    ws_trial = next(t for t in trials if t.data.params["method"] == "ws+tmft" and t.data.params["layer"] == "2")
    manifest = json.loads((stages / ws_trial.data.params["stage_key"] / "stage.json").read_text())
    assert (
        manifest["metadata"]["config"]["layer"] == 2
        and manifest["result"]["mlflow_run_id"] == ws_trial.data.params["upstream_run_id"]
    )

    # A second sweep with the same storage path reuses every stage: no new execution, same runs.
    sweep = f"--layers 2 --seeds 0 --epochs 0 --improvement both {STAGE_FLAGS} --name second"
    assert main(sweep_args(",".join(models), sweep, *sweep_env["flags"])) == 0
    assert len(read_executions(stages)) == len(executions)
    parents, trials = runs_by_role(sweep_env["uri"])
    assert len(parents) == 2 and len(_stage_runs(sweep_env["uri"])) == 8
    second = [t for t in trials if t.data.params["sweep"] == "second"]
    assert len(second) == 4
    first = {
        (t.data.params["method"], t.data.params["model"]): t.data.params["upstream_run_id"]
        for t in trials
        if t.data.params["sweep"] == "first" and t.data.params["layer"] == "2"
    }
    assert {
        (t.data.params["method"], t.data.params["model"]): t.data.params["upstream_run_id"] for t in second
    } == first


def test_bad_stage_flags_stop_before_anything_runs(sweep_env, tiny_models, capsys):
    from trainables.core.errors import SweepInputError

    flags = sweep_args(tiny_models["bert"], "--layers 1 --seeds 0", *sweep_env["flags"])
    assert main([*flags, "--ws-batch-size", "0"]) == 2
    assert "--ws-batch-size must be a positive integer" in capsys.readouterr().err
    assert main([*flags, "--dapt-corpus", "sick,nope"]) == 2
    assert "--dapt-corpus unknown 'nope'; known: sick, stsb-train, wiki" in capsys.readouterr().err
    assert not (Path(sweep_env["storage"]) / "stages").exists()
    with pytest.raises(SweepInputError, match="--stage-dir"):  # an object store without S3's conditional writes
        stage_root(None, "gs://bucket/runs")
    assert stage_root("/mnt/nfs/stages", "s3://bucket/runs") == "/mnt/nfs/stages"


def test_ws_selection_is_recorded_and_keys_the_stage(sweep_env, tiny_models):
    from sweeps.engine.runner import parser_for, plan_sweep

    parser = functools.partial(parser_for, "improvements")
    plan_improvements = functools.partial(plan_sweep, method="improvements")

    sweep = f"--layers 1 --seeds 0,1 --improvement ws --ws-selection max4 {STAGE_FLAGS}"
    args = parser().parse_args(sweep_args(tiny_models["bert"], sweep, *sweep_env["flags"]))
    plan = plan_improvements(args)
    assert {c["ws_selection"] for c in plan.configs} == {"max4"}
    assert len({c["stage_key"] for c in plan.configs}) == 1  # both seeds share the layer's stage
    sweep = f"--layers 1 --seeds 0 --improvement ws {STAGE_FLAGS}"
    args = parser().parse_args(sweep_args(tiny_models["bert"], sweep, *sweep_env["flags"]))
    assert plan_improvements(args).configs[0]["stage_key"] != plan.configs[0]["stage_key"]  # the rule is in the key


def test_authors_variants_of_the_stages_are_flags_recorded_in_params_and_keys(sweep_env, tiny_models):
    """--dapt-schedule authors, --dapt-clip none and --ws-split sklearn-compat reach the stage
    configs (the stages' params) and their keys, and every downstream trial's params."""
    from sweeps.engine.runner import parser_for, plan_sweep

    def plan(*flags):
        sweep = f"--layers 1 --seeds 0 {STAGE_FLAGS}"
        args = parser_for("improvements").parse_args(
            sweep_args(tiny_models["bert"], sweep, *sweep_env["flags"], *flags)
        )
        return plan_sweep(args, method="improvements")

    paper = plan()
    authors = plan("--dapt-schedule", "authors", "--dapt-clip", "none", "--ws-split", "sklearn-compat")
    by_kind = {kind: {s["kind"]: s for s in p.stages.values()} for kind, p in (("paper", paper), ("authors", authors))}
    assert (
        by_kind["paper"]["dapt"]["config"]["schedule"] == "steps" and by_kind["paper"]["dapt"]["config"]["clip"] == 1.0
    )
    assert (
        by_kind["authors"]["dapt"]["config"]["schedule"] == "authors"
        and by_kind["authors"]["dapt"]["config"]["clip"] is None
    )
    assert by_kind["paper"]["ws"]["config"]["split_method"] == "numpy"
    assert by_kind["authors"]["ws"]["config"]["split_method"] == "sklearn-compat"
    assert set(paper.stages).isdisjoint(authors.stages)
    dapt_trial = next(c for c in authors.configs if c["upstream_method"] == "dapt")
    assert dapt_trial["dapt_schedule"] == "authors" and dapt_trial["dapt_clip"] == "none"


def test_authors_dapt_schedule_peaks_at_80_percent_of_training():
    import torch
    from transformers import get_linear_schedule_with_warmup

    from trainables.methods.tmft.dapt import schedule_steps

    config = {"epochs": 10, "warmup_ratio": 0.1}
    batches, steps = 80, 10 * 10  # accumulation 8: 10 optimiser steps per epoch
    assert schedule_steps({**config, "schedule": "steps"}, batches, steps) == (10, 100)
    warmup, total = schedule_steps({**config, "schedule": "authors"}, batches, steps)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup, total)
    rates = []
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        rates.append(optimizer.param_groups[0]["lr"])
    assert max(range(steps), key=rates.__getitem__) == 79  # the peak after 80 of 100 optimiser steps
    assert rates[-1] > 0.95  # and it ends near the peak (docs/methods/electra.md: ~97%)


@pytest.mark.slow  # the default run has the plan and stage-compute tests below
def test_tsdae_stage_is_computed_once_per_model_and_tmft_starts_from_it(sweep_env, tiny_models):
    """`--improvement tsdae`: one TSDAE stage per model whatever the layers and seeds, run by
    trainables/methods/tsdae/method.py's loop; its encoder differs from the pretrained one, and every trial
    names it (upstream_run_id, stage_key) and records the stage's settings."""
    import torch
    from transformers import AutoModel

    model = tiny_models["bert"]
    sweep = "--layers 1,2 --seeds 0,1 --epochs 1 --improvement none,tsdae --name tsdae"
    stage = "--tsdae-steps 3 --tsdae-max-sentences 40 --tsdae-lr 1e-3"
    assert main(sweep_args(model, f"{sweep} {stage}", *sweep_env["flags"])) == 0
    stages = Path(sweep_env["storage"]) / "stages"
    executions = read_executions(stages)
    assert [(e["kind"], e["model"]) for e in executions] == [("tsdae", model)]
    parents, trials = runs_by_role(sweep_env["uri"])
    assert Counter(t.data.params["method"] for t in trials) == {"tmft": 4, "tsdae+tmft": 4}
    stage_run = _stage_runs(sweep_env["uri"])[0]
    assert stage_run.info.status == "FINISHED" and stage_run.data.params["method"] == "tsdae"
    for trial in (t for t in trials if t.data.params["method"] == "tsdae+tmft"):
        params = trial.data.params
        assert params["upstream_run_id"] == stage_run.info.run_id and params["upstream_method"] == "tsdae"
        assert (params["tsdae_steps"], params["tsdae_lr"], params["tsdae_noise"], params["tsdae_pooling"]) == (
            "3",
            "0.001",
            "delete",
            "cls",
        )
        assert trial.info.status == "FINISHED" and "best_dev_spearman" in trial.data.metrics
    manifest = json.loads((stages / stage_run.data.params["stage_key"] / "stage.json").read_text())
    assert manifest["result"]["optimizer_steps"] == 3
    trained = AutoModel.from_pretrained(str(stages / stage_run.data.params["stage_key"] / "encoder"))
    pretrained = AutoModel.from_pretrained(model)
    changed = [n for n, p in trained.state_dict().items() if not torch.equal(p, pretrained.state_dict()[n])]
    assert any("encoder.layer.0" in n for n in changed)


def _plan_flags(tmp_path, data_dir):
    """Where a sweep of these tests (planned, not run) would write, and the data it would read."""
    store = ["--storage-path", str(tmp_path / "runs"), "--mlflow-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    return [*store, "--data-dir", str(data_dir), "--max-train-samples", "48", "--max-eval-samples", "60"]


def test_tsdae_stage_is_planned_once_per_model_with_its_settings_in_every_trial(tmp_path, data_dir, tiny_models):
    from sweeps.engine.runner import parser_for, plan_sweep

    sweep = "--layers 1,2 --seeds 0,1 --improvement tsdae,none --tsdae-steps 5 --tsdae-noise keep"
    args = parser_for("improvements").parse_args(
        sweep_args(tiny_models["bert"], sweep, *_plan_flags(tmp_path, data_dir))
    )
    plan = plan_sweep(args, method="improvements")
    assert [s["kind"] for s in plan.stages.values()] == ["tsdae"]
    spec = next(iter(plan.stages.values()))
    assert (spec["config"]["steps"], spec["config"]["noise"], spec["config"]["lr"]) == (5, "keep", 3e-5)
    staged = [c for c in plan.configs if c.get("stage_key")]
    assert len(staged) == 4 and {c["stage_key"] for c in staged} == {spec["key"]}
    assert {(c["method"], c["upstream_method"], c["tsdae_noise"]) for c in staged} == {("tsdae+tmft", "tsdae", "keep")}
    assert sum(c["method"] == "tmft" for c in plan.configs) == 4
    args.tsdae_steps = 6
    assert next(iter(plan_sweep(args, method="improvements").stages)) != spec["key"]  # the settings key the stage


def test_tsdae_stage_trains_the_encoder_tmft_starts_from(tmp_path, data_dir, tiny_models):
    """The stage's compute (trainables/methods/tsdae/method.py, the trial's loop) writes an encoder folder whose
    weights moved, and TMFT's encoder for `upstream_method` tsdae is that one, truncated."""
    import torch
    from transformers import AutoModel

    from trainables.methods.tmft.encoder import build_encoder
    from trainables.methods.tsdae import stage as tsdae

    config = tsdae.stage_config(
        corpus="wiki", steps=3, batch_size=4, lr=1e-3, pooling="cls", noise="delete", max_length=32, max_sentences=40
    )
    spec = {
        "kind": "tsdae",
        "key": "k",
        "root": str(tmp_path),
        "model": "tiny",
        "model_path": tiny_models["bert"],
        "data_dir": str(data_dir),
        "config": config,
    }
    assert (config["sampling"], config["last_batch"]) == ("epochs", "drop")  # as TSDAE's DataLoader
    result = tsdae.compute(spec, tmp_path / "k")
    assert result["optimizer_steps"] == 3 and result["sentences"] == 40
    trained = AutoModel.from_pretrained(str(tmp_path / "k" / "encoder")).state_dict()
    pretrained = AutoModel.from_pretrained(tiny_models["bert"]).state_dict()
    assert not torch.equal(
        trained["encoder.layer.0.attention.self.query.weight"],
        pretrained["encoder.layer.0.attention.self.query.weight"],
    )
    encoder = build_encoder(tiny_models["bert"], 2, 0, upstream_method="tsdae", upstream_path=str(tmp_path / "k"))
    assert torch.equal(
        encoder.state_dict()["encoder.layer.1.output.dense.weight"], trained["encoder.layer.1.output.dense.weight"]
    )


def test_tsdae_stage_refuses_an_encoder_without_a_decoder(tmp_path, data_dir, tiny_models, capsys):
    sweep = "--layers 1 --seeds 0 --improvement tsdae"
    assert main(sweep_args(tiny_models["mpnet"], sweep, *_plan_flags(tmp_path, data_dir), "--experiment", "test")) == 2
    assert "no causal-LM decoder" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "stages").exists()


@pytest.mark.sweep
def test_two_sweeps_needing_one_stage_at_once_compute_it_once_into_one_run(sweep_env, tiny_models, ray_session):
    """Started together on one storage path and store, both wait for the one computation of their
    shared WS stage, and the store holds one run of it (the waiter's own run is withdrawn). The two sweeps
    train different seeds: equal trials would be linked whole by the trial claims before any stage ran."""
    import os
    import subprocess
    import sys

    from trainables.core.paths import PROJECT_ROOT

    address = ray_session.get_runtime_context().gcs_address
    MlflowClient(sweep_env["uri"]).search_experiments()
    drivers = []
    for name, seed in (("one", 0), ("two", 1)):
        sweep = sweep_args(
            tiny_models["bert"],
            f"--layers 1 --seeds {seed} --epochs 1 --improvement ws --ws-epochs 8 --ws-max-train-samples 128 "
            f"--name {name}",
            *sweep_env["flags"],
        )
        command = [sys.executable, "sweeps/improvements.py", *sweep, "--address", address]
        drivers.append(subprocess.Popen(command, cwd=PROJECT_ROOT, env=os.environ, stdout=subprocess.PIPE, text=True))
    outputs = [driver.communicate(timeout=600)[0] for driver in drivers]
    assert [driver.returncode for driver in drivers] == [0, 0], outputs
    assert sum("computed by another sweep" in out for out in outputs) == 1, outputs  # they did overlap

    assert len(read_executions(sweep_env["storage"] / "stages")) == 1
    client = MlflowClient(sweep_env["uri"])
    runs = client.search_runs([client.get_experiment_by_name("test").experiment_id], max_results=100)
    stage_runs = [r for r in runs if r.data.tags.get(schema.TAG_ROLE) == ROLE_STAGE]
    assert [r.info.status for r in stage_runs] == ["FINISHED"]
    trials = [r for r in runs if r.data.tags.get(schema.TAG_ROLE) == "trial"]
    assert len(trials) == 2 and {t.data.params["upstream_run_id"] for t in trials} == {stage_runs[0].info.run_id}
