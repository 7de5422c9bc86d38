"""A sweep folder and MLflow store written before a rename of code are read and resumed by the code after it.

The method `evaluate` lived in the package `trainables/methods/zero_shot/` until it was named after the method
(`trainables/methods/evaluate/`). The test builds a sweep in that old layout: a copy of the project's code
with the package under its old name runs `sweeps/evaluate.py`, one of its trials failing once. The code of
this tree then resumes that sweep (the failed trial runs again, under the same parent run) and reports on it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OLD_PACKAGE, NEW_PACKAGE = "trainables/methods/zero_shot", "trainables/methods/evaluate"
FAIL_ONCE = """
    def step(self) -> dict:
        marker = Path(os.environ["OLD_LAYOUT_FAULT"])
        if self.trial_config["layer"] == 1 and not marker.exists():
            marker.write_text("fired")
            raise RuntimeError("a fault of the old sweep")
        return self._step()

    def _step(self) -> dict:"""


def old_layout(copy: Path) -> Path:
    """The project's code in `copy`, with the evaluate method's package under its old name, and a trial
    that fails once (layer 1, the first time) so that the old sweep ends with one errored trial."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in listed.stdout.split("\0"):
        if name.split("/")[0] in ("trainables", "sweeps", "analysis") and (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    (copy / NEW_PACKAGE).rename(copy / OLD_PACKAGE)
    method = copy / OLD_PACKAGE / "method.py"
    method.write_text(method.read_text().replace("trainables.methods.evaluate.", "trainables.methods.zero_shot."))
    trainable = copy / OLD_PACKAGE / "trainable.py"
    text = trainable.read_text().replace("import json\n", "import json\nimport os\n")
    trainable.write_text(text.replace("\n    def step(self) -> dict:", FAIL_ONCE, 1))
    return copy


def run(code_root: Path, argv: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *argv],
        cwd=code_root,
        env={**env, "PYTHONPATH": str(code_root)},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.sweep
def test_a_sweep_of_the_old_package_layout_resumes_and_reports_with_the_new_code(sweep_env, tmp_path, capsys):
    import mlflow

    from analysis.__main__ import main as analysis_main
    from sweeps.evaluate import main

    old = old_layout(tmp_path / "old-code")
    storage, uri = sweep_env["storage"], sweep_env["uri"]
    env = {**os.environ, "OLD_LAYOUT_FAULT": str(tmp_path / "fault-fired")}
    flags = ["--smoke-test", *sweep_env["base"], "--experiment", "old", "--name", "old", "--max-failures", "0"]

    done = run(old, ["-c", "import trainables.methods.zero_shot.trainable as t; print(t.__file__)"], env)
    assert done.stdout.startswith(str(old / OLD_PACKAGE)), done.stderr[-2000:]
    done = run(old, ["sweeps/evaluate.py", *flags], env)
    assert done.returncode == 1, "the old sweep must end with its one errored trial: " + done.stderr[-3000:]
    assert (tmp_path / "fault-fired").exists()

    capsys.readouterr()
    assert main(["--resume", str(storage / "old")]) == 0
    assert "trials 5/5 done, 0 running, 0 pending, 0 errored" in capsys.readouterr().out

    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("old").experiment_id])
    trials = [r for r in runs if r.data.tags.get("embsweep.role") == "trial"]
    parents = [r for r in runs if r.data.tags.get("embsweep.role") == "sweep"]
    assert len(parents) == 1 and len(trials) == 5
    assert sorted(int(r.data.params["layer"]) for r in trials) == [0, 1, 2, 3, 4]
    assert all(r.info.status == "FINISHED" and "mean_spearman" in r.data.metrics for r in trials)

    out = tmp_path / "report"
    assert analysis_main(["report", "--mlflow-uri", uri, "--out", str(out)]) == 0
    assert "5 trial runs (0 left out)" in capsys.readouterr().out
    table = (out / "tables" / "scores_evaluate_all.csv").read_text().splitlines()
    assert len(table) == 6  # a header and the five layers
