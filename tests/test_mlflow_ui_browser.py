"""A real browser on the MLflow UI: a smoke sweep writes a SQLite store, `python -m
sweeps.mlflow_server` serves it, and headless Debian Chromium (driven by Playwright, never a
browser of Playwright's own) shows the sweep's parent run, its child runs once expanded, and
their `test_spearman_at_best_dev`, on the link the sweep prints: MLflow 3's model-training view (its
Runs page; not GenAI mode, whose pages name a trial an evaluation run). Screenshots go to `test-artifacts/`.

Run with `pytest -m browser` (or `.ci/browser`, which installs Chromium and Playwright first).
"""

import re
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow_helpers import runs_by_role
from server_helpers import MlflowServer
from sweep_helpers import sweep_args

from sweeps.electra_layers import main
from trainables.core.paths import PROJECT_ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = PROJECT_ROOT / "test-artifacts"
METRIC = "test_spearman_at_best_dev"


def test_mlflow_ui_shows_the_sweep_with_its_child_runs_and_their_metrics(sweep_env, tiny_models, tmp_path, capsys):
    if not Path(CHROMIUM).is_file():
        pytest.skip(
            f"Debian's Chromium is not installed ({CHROMIUM} is missing): apt-get install -y chromium chromium-driver"
        )
    from playwright.sync_api import expect, sync_playwright

    sweep = "--layers 0,2 --seeds 0 --epochs 1 --name ui-sweep"
    assert main(sweep_args(tiny_models["bert"], sweep, *sweep_env["flags"])) == 0
    (parent,), children = runs_by_role(sweep_env["uri"])
    assert len(children) == 2
    experiment = MlflowClient(sweep_env["uri"]).get_experiment(parent.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    (link,) = re.findall(r"then open (\S+)\)", capsys.readouterr().out)  # what the sweep printed
    assert link == f"http://127.0.0.1:5000/#/experiments/{experiment.experiment_id}/runs?workflowType=machine_learning"
    ARTIFACTS.mkdir(exist_ok=True)

    server = MlflowServer(tmp_path / "ui-server", extra=["--backend-store-uri", sweep_env["uri"]])
    try:
        server.start()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1800, "height": 900})
                page.set_default_timeout(60_000)
                page.goto(link.replace("http://127.0.0.1:5000", server.uri))
                row = lambda run: page.locator(f'.ag-row[row-id="{run.info.run_id}"]')
                # the model-training view: its Runs page, none of the GenAI pages ("Evaluation runs", "Overview")
                expect(page.get_by_role("link", name="Runs", exact=True)).to_be_visible()
                for genai in ("Evaluation runs", "Overview"):
                    expect(page.get_by_role("link", name=genai, exact=True)).to_have_count(0)

                parent_row = row(parent).filter(has=page.get_by_role("link", name="ui-sweep", exact=True))
                expect(parent_row).to_be_visible()
                assistant = page.get_by_role("button", name="Close")  # the assistant side panel, if open
                if assistant.count():
                    assistant.first.click()
                for child in children:  # children are grouped under the parent, folded
                    expect(row(child)).to_have_count(0)
                parent_row.locator("button").first.click()  # the expander in front of the run name
                for child in children:
                    expect(
                        row(child).filter(has=page.get_by_role("link", name=child.info.run_name, exact=True))
                    ).to_be_visible()

                page.get_by_role("button", name="Columns").click()
                page.keyboard.type(METRIC)
                page.get_by_text("_at_best_dev").first.click()
                page.keyboard.press("Escape")
                cell = lambda run: row(run).locator(f'[col-id="metrics.`{METRIC}`"]')
                for child in children:
                    expect(cell(child)).to_be_visible()
                    shown = float(cell(child).inner_text())
                    assert shown == pytest.approx(child.data.metrics[METRIC], abs=0.01), (child.info.run_name, shown)
                page.screenshot(path=str(ARTIFACTS / "mlflow-ui-sweep-runs.png"), full_page=True)  # training view

                first = children[0]
                row(first).get_by_role("link", name=first.info.run_name, exact=True).click()
                expect(page.get_by_text(METRIC, exact=True).first).to_be_visible()
                page.screenshot(path=str(ARTIFACTS / "mlflow-ui-child-run.png"), full_page=True)
            finally:
                browser.close()
    finally:
        server.kill()
