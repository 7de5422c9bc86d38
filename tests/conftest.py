"""Shared fixtures: tiny random encoders built from configs, the real STS-B data, one local Ray
(2 CPUs, 4 logical GPUs) for the whole session, and a fresh storage path + MLflow store per test."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("EMBSWEEP_RESUME_KEY", "embsweep-tests")  # seals of Tune state: not the user's key file
if "EMBSWEEP_CACHE_DIR" not in os.environ:  # the tokenised-data cache of this test session, not the user's
    import tempfile

    os.environ["EMBSWEEP_CACHE_DIR"] = tempfile.mkdtemp(prefix="embsweep-test-cache-")

from trainables.core.paths import default_data_dir  # noqa: E402

# Tests that take 3 s or more on two cores (measured with --durations): whole sweeps, and the few slower
# checks (notebooks run headless, every script's preset listing, a toy method's plan, bf16 against fp32,
# a few short trainings). Each runs in the `sweep` step (`pytest -m sweep`), not in the fast default run,
# which stays under 3 minutes; every behaviour they check keeps a quicker test in the default run or is
# only visible in a whole sweep.
SWEEP_TESTS = {
    "test_sed.py::test_the_targets_are_the_mean_of_the_teachers_pooled_embeddings",
    "test_tsdae.py::test_tsdae_learns_to_reconstruct_held_out_sentences_through_the_tied_decoder",
    "test_speed.py::test_tokenised_data_is_cached_across_sweeps_and_keyed_by_what_changes_it",
    "test_sqlite_store.py::test_a_half_migrated_store_is_rebuilt_when_it_holds_no_runs_and_named_when_it_does",
    "test_add_a_method.py::test_a_new_package_and_script_are_a_method_the_engine_finds_and_plans",
    "test_paper_presets.py::test_every_script_lists_every_papers_presets_grouped_by_paper",
    "test_analysis_notebooks.py::test_cka_notebook_runs_headless",
    "test_analysis_notebooks.py::test_store_notebooks_run_headless[pareto]",
    "test_analysis_notebooks.py::test_store_notebooks_run_headless[layer_curves]",
    "test_precision.py::test_bf16_on_cpu_is_applied_and_close_to_fp32",
    "test_adaptive_layer.py::test_the_dry_run_prices_models_x_seeds_without_loading_a_model",
    "test_mlflow_server.py::test_spooled_writes_are_replayed_once_however_often_sync_runs",
    "test_cluster_config.py::test_node_checks_of_torch_fail_setup_with_one_line_on_a_cpu_only_build",
    "test_tsdae_fidelity.py::test_every_tsdae_preset_is_listed_dry_run_and_checked_alike[tsdae-fig3]",
    "test_quiet_terminal.py::test_a_successful_sweep_leaves_the_terminal_to_the_sweep",
    "test_dry_run_plans.py::test_a_smoke_tests_dry_run_plans_the_trials_the_smoke_test_runs[adaptive_layer]",
    "test_dry_run_plans.py::test_a_dry_run_of_a_resume_plans_what_is_left_of_the_named_sweep",
    "test_storage_keys.py::test_a_finished_sweep_writes_the_secret_nowhere",
    "test_simulate.py::test_simulated_sweep_end_to_end_tags_its_runs_resumes_only_simulated_and_is_marked_in_the_report",
    "test_seeds_by_need.py::test_a_killed_seeds_by_need_sweep_resumes_and_reports_seeds_and_intervals",
    "test_sweep_tmft.py::test_smoke_sweep_writes_one_parent_and_four_children_with_the_schema",
    "test_failures.py::test_diverged_training_fails_its_trial_once_with_the_reason",
    "test_stage_progress.py::test_the_driver_prints_a_running_stages_progress",
    "test_failures.py::test_resume_refuses_changed_flags",
    "test_failures.py::test_sweeps_started_together_on_a_fresh_store_both_start",
    "test_resume_seal.py::test_a_tampered_sweep_folder_is_refused_before_anything_is_unpickled",
    "test_sweep_tmft.py::test_zero_epochs_evaluates_the_pretrained_truncated_encoder",
    "test_sweep_tmft.py::test_a_sweep_saved_before_newer_flags_existed_resumes",
    "test_sweep_tasks.py::test_sick_sweep_logs_macro_f1",
    "test_nothing_learned.py::test_a_diverged_tsdae_objective_fails_its_trial_once_with_the_reason",
    "test_failures.py::test_an_address_where_something_else_answers_is_refused_not_a_traceback",
    "test_checkpoints.py::test_best_dev_checkpoint_is_a_sentence_transformer_and_evaluates_as_in_the_trial",
    "test_checkpoints.py::test_eval_sets_score_the_best_dev_weights_into_the_trials_own_run",
    "test_checkpoints.py::test_a_run_without_a_checkpoint_is_refused",
    "test_sweep_integrity.py::test_a_copied_sweep_stopped_during_its_stages_resumes_without_touching_the_original",
    "test_sweep_integrity.py::test_a_full_disk_mid_sweep_ends_in_one_line_and_resume_completes",
    "test_paper_presets.py::test_a_tsdae_preset_runs_on_tiny_models_and_its_report_names_what_differs",
    "test_tsdae_fidelity.py::test_the_corpus_size_figure_runs_every_objective_at_128_sentences",
    "test_tsdae_fidelity.py::test_the_appendix_presets_run_on_a_tiny_model_and_the_report_shows_tables_5_to_7",
    "test_domain_sets.py::test_a_training_sweep_scores_its_best_weights_on_domain_sets_and_the_report_shows_them",
    "test_paper_presets.py::test_a_sed_preset_runs_on_tiny_models",
    "test_paper_presets.py::test_a_meta_embedding_preset_runs_on_tiny_models",
    "test_improvements.py::test_stages_are_computed_once_and_shared_across_seeds_layers_and_sweeps",
    "test_sweep_scripts.py::test_smoke_test_runs_end_to_end[meta_embeddings]",
    "test_sweep_scripts.py::test_smoke_test_runs_end_to_end[improvements]",
    "test_sweep_scripts.py::test_smoke_test_runs_end_to_end[sed]",
    "test_sweep_scripts.py::test_smoke_test_runs_end_to_end[tsdae]",
    "test_sweep_scripts.py::test_smoke_test_runs_end_to_end[evaluate]",
    "test_sweep_tmft.py::test_resume_reruns_errored_trials_under_the_same_parent",
    "test_mlflow_server.py::test_server_outage_mid_sweep_loses_no_metric",
    "test_mlflow_server.py::test_smoke_sweep_against_a_real_tracking_server",
    "test_packing.py::test_auto_packing_on_logical_gpus",
    "test_sweep_tmft.py::test_four_half_gpu_trials_share_two_logical_gpus",
    "test_sweep_tmft.py::test_zero_epochs_score_every_layer_from_one_forward_pass",
    "test_sweep_tmft.py::test_deberta_sweeps_from_layer_zero_pretrained_and_random",
    "test_sweep_tmft.py::test_optuna_search_tunes_lr_batch_and_warmup",
    "test_sweep_tmft.py::test_trial_failing_in_epoch_two_is_retried_from_its_checkpoint_without_a_duplicate_run[kill]",
    "test_driver_killed.py::test_killed_driver_resumes_without_rerunning_or_duplicating",
    "test_analysis_contracts.py::test_report_of_a_real_evaluation_sweep_beside_a_one_seed_layer_sweep",
    "test_speed.py::test_the_costliest_trials_start_first",
    "test_presets.py::test_a_preset_sweep_records_its_name_and_the_report_names_the_figure",
    "test_precision.py::test_sweep_records_precision",
    "test_sweep_tasks.py::test_mrpc_sweep_logs_f1_and_random_init_differs_from_pretrained",
    "test_sweep_tmft.py::test_trial_failing_in_epoch_two_is_retried_from_its_checkpoint_without_a_duplicate_run[raise]",
    "test_sweep_scripts.py::test_smoke_test_runs_end_to_end[electra_layers]",
    "test_sweep_tmft.py::test_the_test_set_scored_once_at_the_end_equals_its_score_at_the_best_dev_epoch[stsb]",
    "test_pareto_sweep.py::test_a_pareto_search_resumes_after_a_kill_and_its_report_marks_the_front",
    "test_sweep_scripts.py::test_smoke_test_runs_end_to_end[adaptive_layer]",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.removeprefix("tests/") in SWEEP_TESTS:
            item.add_marker(pytest.mark.sweep)


@pytest.fixture(scope="session")
def data_dir():
    path = default_data_dir()
    if not (path / "stsbenchmark" / "sts-train.csv").is_file():
        pytest.fail(f"The real STS-B data is expected at {path} (set EMBSWEEP_DATA_DIR)")
    return path


@pytest.fixture(scope="session")
def stsb_sentences(data_dir):
    from trainables.data.stsb import load_stsb

    return [e.sentence1 for e in load_stsb(data_dir, splits=("train",))["train"][:2000]]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, stsb_sentences):
    """{kind: model folder} for bert, electra-discriminator, electra-generator, mpnet (4 layers)."""
    from trainables.encoders.tiny import KINDS, build_tiny_model

    root = tmp_path_factory.mktemp("tiny-models")
    return {kind: str(build_tiny_model(kind, root / kind, sentences=stsb_sentences)) for kind in KINDS}


@pytest.fixture(scope="session")
def tiny_task(tiny_models, data_dir):
    """STS-B tokenised for the tiny BERT: 320 training pairs, 300 dev and test pairs."""
    from trainables.training.tokenized import load_task, subset, tokenize_task

    examples, checksums = load_task("stsb", data_dir)
    examples = {s: rows if s == "train" else subset(rows, 300) for s, rows in examples.items()}
    return tokenize_task("stsb", tiny_models["bert"], examples, checksums, 320)


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from sweeps.engine.runner import QUIET_ENV

    os.environ.update(QUIET_ENV)
    # the workers upload checkpoints to the tests' S3 server with the credentials of their environment,
    # as a cloud node does with its own (never through Ray's runtime environment)
    from s3_helpers import EXTERNAL_ENV, TEST_CREDENTIALS

    if not os.environ.get(EXTERNAL_ENV):
        for key, value in TEST_CREDENTIALS.items():
            os.environ.setdefault(key, value)
    ray.init(address="local", num_cpus=2, num_gpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def sweep_env(tmp_path, ray_session, data_dir):
    """Common flags for a fast sweep into a fresh storage path and MLflow store: `flags`, and `base`, the
    same without the sample and batch-size limits (for scripts and methods that set their own)."""
    return sweep_environment(tmp_path, data_dir)


def sweep_environment(tmp_path, data_dir) -> dict:
    """What `sweep_env` gives, in a folder of the caller's (a module-scoped fixture's, say)."""
    storage = tmp_path / "runs"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    base = ["--storage-path", str(storage), "--mlflow-uri", uri, "--experiment", "test", "--data-dir", str(data_dir)]
    base += ["--cpus-per-trial", "0.5", "--gpus-per-trial", "0"]
    limits = ["--max-train-samples", "48", "--max-eval-samples", "60", "--batch-size", "16"]
    return {"storage": storage, "uri": uri, "flags": [*base, *limits], "base": base, "tmp": tmp_path}


@pytest.fixture
def edit_trials(monkeypatch):
    """`edit_trials(fn)`: the next sweeps call `fn(plan)` on their plan before they start (to
    inject faults, or hold trials so that they overlap)."""
    import sweeps.engine.runner as runner

    original = runner.plan_sweep

    def install(edit):
        def planned(args, **kwargs):
            plan = original(args, **kwargs)
            edit(plan)
            return plan

        monkeypatch.setattr(runner, "plan_sweep", planned)

    return install


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """The tests' S3 server (tests/s3_server.py, moto), or None when EMBSWEEP_TEST_S3_ENDPOINT names an external one."""
    from s3_helpers import EXTERNAL_ENV, S3Server

    if os.environ.get(EXTERNAL_ENV):
        yield None
        return
    server = S3Server(tmp_path_factory.mktemp("s3") / "server.log").start()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """A fresh bucket on the tests' S3 server; this process gets its credentials (never an endpoint
    variable: the endpoint travels in each URI's query)."""
    from s3_helpers import EXTERNAL_ENV, TEST_CREDENTIALS, S3Store

    endpoint = os.environ.get(EXTERNAL_ENV) or s3_server.endpoint
    if not os.environ.get(EXTERNAL_ENV):
        for key, value in TEST_CREDENTIALS.items():
            monkeypatch.setenv(key, value)
    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    return S3Store(endpoint, s3_server)
