"""Presets of every paper: `--list-presets` on every sweep script lists all papers' presets grouped
by paper (its own first); a preset of another paper's script is refused with its command; the SED
and meta-embedding presets plan the paper's grid, run on tiny models, and their reports put the
published numbers beside ours with the difference; SED refuses teachers of another architecture;
UNSUP's paper variant defaults to SGD, its ablations and the baselines' max pooling."""

import importlib
import os
import re
from argparse import Namespace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from analysis_helpers import log_runs

from analysis.report import build_report
from sweeps import electra_layers, meta_embeddings, sed, tsdae
from sweeps.engine import presets
from sweeps.engine.runner import parser_for, plan_sweep
from sweeps.engine.scripts import scripts_running, sweep_scripts
from trainables.methods import all_presets, get_method
from trainables.methods.meta_embeddings import paper as unsup_paper
from trainables.methods.meta_embeddings.models import MetaModel, paper_loss, sentence_vectors
from trainables.methods.sed import paper as sed_paper
from trainables.methods.tmft import paper as electra_paper
from trainables.methods.tsdae import paper as tsdae_paper

# Every sweep script (a script under sweeps/ that runs a registered method), found, not listed.
SCRIPTS = {name: importlib.import_module(f"sweeps.{name}") for name in sweep_scripts()}


def test_every_preset_names_the_script_that_runs_its_method():
    """`Preset.script` is held equal to the one script found running the preset's method."""
    for preset in all_presets().values():
        assert [preset.script] == scripts_running(preset.method), preset.name


def _listing(script, data_dir, capsys) -> str:
    assert script.main(["--list-presets", "--data-dir", str(data_dir)]) == 0
    return capsys.readouterr().out


@pytest.mark.sweep
def test_every_script_lists_every_papers_presets_grouped_by_paper(capsys, data_dir):
    everything = all_presets()
    assert {"sed-table3", "unsup-table1", "unsup-table2", "table1"} <= set(everything)
    for name, script in SCRIPTS.items():
        text = _listing(script, data_dir, capsys)
        headers = re.findall(r"^== (.+) ==$", text, flags=re.M)
        assert set(headers) == {p.paper for p in everything.values()}, name
        rows = {line.split()[0]: line.split() for line in text.splitlines() if line.split()}
        for preset in everything.values():
            assert rows[preset.name][1] == preset.script, (name, preset.name)
    # the script's own paper first
    assert _listing(sed, data_dir, capsys).startswith(f"== {sed_paper.PAPER} ==")
    assert _listing(meta_embeddings, data_dir, capsys).startswith(f"== {unsup_paper.PAPER} ==")
    text = _listing(electra_layers, data_dir, capsys)
    assert text.startswith(f"== {electra_paper.PAPER} ==")
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.split()}
    # trials of the meta-embedding tables: 8 rows' trials x 2 poolings x 3 seeds; 2 variants x 2 poolings x 3
    assert int(rows["unsup-table1"][2]) == 48 and int(rows["unsup-table2"][2]) == 12
    # SED: 5 CT teachers (the preset's first command), the ensemble, 5 student seeds
    assert int(rows["sed-table3"][2]) == 11 and float(rows["sed-table3"][3]) > 0
    assert sed_paper.TEACHERS_COMMAND in text
    # TSDAE: 4 domains x (4 objectives x 5 seeds + the untrained encoder once); 4 objectives x 5 seeds
    assert int(rows["tsdae-table2"][2]) == 84 and int(rows["tsdae-table11"][2]) == 20
    assert 0 < float(rows["tsdae-table11"][3]) < float(rows["tsdae-table2"][3])
    # Table 9: 4 domains x 4 checkpoints x 3 objectives x 5 seeds; SED's per-set tables count as Table 3
    assert int(rows["tsdae-table9"][2]) == 240 and int(rows["sed-table5-distil"][2]) == 11
    tsdae_rows = [line.split()[0] for line in text.splitlines() if line.startswith("tsdae-")]
    assert sorted(tsdae_rows) == sorted(tsdae_paper.PRESETS) and tsdae_rows[-1] == "tsdae-fig3"  # tables first


def test_another_papers_preset_is_refused_with_its_command(sweep_env, capsys):
    assert sed.main(["--preset", "unsup-table1", *sweep_env["base"]]) == 2
    assert "python sweeps/meta_embeddings.py --preset unsup-table1" in capsys.readouterr().err
    assert meta_embeddings.main(["--preset", "sed-table3", *sweep_env["base"]]) == 2
    assert "python sweeps/sed.py --preset sed-table3" in capsys.readouterr().err
    assert not sweep_env["storage"].exists()


def _applied(method, argv):
    parser = parser_for(method)
    return presets.apply(parser, argv, parser.parse_args(argv), get_method(method))


def test_the_meta_embedding_presets_set_the_papers_grid(sweep_env, tiny_models):
    argv = ["--preset", "unsup-table1", "--sources", f"{tiny_models['bert']},{tiny_models['mpnet']}"]
    argv += ["--max-train-samples", "200", "--width", "16", "--seeds", "0", "--sets", "stsb", *sweep_env["base"]]
    plan = plan_sweep(_applied("meta-embeddings", argv), method="meta-embeddings", prog="meta_embeddings")
    got = {(c["meta"], c["variant"], c["pooling"], c["optimizer"]) for c in plan.configs}
    for pooling in ("max", "mean"):
        assert {("sse", "bert", pooling, ""), ("conc", "-", pooling, ""), ("avg", "zero-pad", pooling, "")} <= got
        assert {("unsup", "paper", pooling, "sgd"), ("sup", "mse", pooling, "sgd")} <= got
    assert len(plan.configs) == 16 and plan.static_params["preset"] == "unsup-table1"
    assert {c["paper_loss"] for c in plan.configs if c["meta"] == "unsup"} == {"literal"}
    assert {c["paper_loss"] for c in plan.configs if c["meta"] != "unsup"} == {""}  # SSE, SUP...: not their flag
    argv = ["--preset", "unsup-table2", "--sources", f"{tiny_models['bert']},{tiny_models['mpnet']}", "--seeds", "0"]
    plan = plan_sweep(_applied("meta-embeddings", [*argv, *sweep_env["base"]]), method="meta-embeddings", prog="m")
    assert {(c["variant"], c["pooling"]) for c in plan.configs} == {
        (v, p) for v in ("paper", "no-weights") for p in ("max", "mean")
    }
    # the released code's variant keeps its AdamW; --optimizer overrides both
    plan = plan_sweep(
        _applied("meta-embeddings", [*argv, "--variants", "authors_code", "--pooling", "max", *sweep_env["base"]]),
        method="meta-embeddings",
        prog="m",
    )
    assert {c["optimizer"] for c in plan.configs} == {"adamw"}
    assert meta_embeddings.main([*argv, "--pooling", "max,min", *sweep_env["base"]]) == 2


def test_no_weights_averages_the_sources_and_a_dropped_term_leaves_the_loss():
    torch.manual_seed(0)
    model = MetaModel([4, 6], 3, "paper", "max", weighted=False)
    assert torch.equal(model.source_weights(), torch.tensor([0.5, 0.5])) and not model.weights.requires_grad
    terms = {name: torch.tensor(float(k + 1)) for k, name in enumerate(("c1", "c2", "c3", "c4", "ortho"))}
    coefficients = torch.tensor([0.5, -2.0, 1.0, 0.25])
    literal = 1 + abs(0.5 * 2) + abs(-2.0 * 3) + abs(1.0 * 4) + abs(0.25 * 5)
    assert float(paper_loss(terms, coefficients, "literal")) == pytest.approx(literal)
    assert float(paper_loss(terms, coefficients, "literal", "c3")) == pytest.approx(literal - 6)
    assert float(paper_loss(terms, coefficients, "hinge", "c1")) == pytest.approx(2 + 3 + 4 + 5)
    words = np.asarray([[1.0, -2.0], [3.0, 0.0], [0.0, 5.0]], dtype=np.float32)
    source = (words, np.asarray([0, 2, 3]))
    pooled = np.asarray([[3.0, 0.0], [0.0, 5.0]])
    np.testing.assert_allclose(sentence_vectors(source, [0, 1], "max"), pooled)  # raw: the paper's eq. 11-14
    np.testing.assert_allclose(sentence_vectors(source, [0, 1], "max", "l2"), pooled / np.asarray([[3.0], [5.0]]))


def _second_bert(tiny_models, tmp_path) -> str:
    """A copy of the tiny BERT in another folder: a second teacher of the student's architecture."""
    import shutil

    return str(shutil.copytree(tiny_models["bert"], tmp_path / "bert-copy"))


def test_sed_refuses_teachers_of_another_architecture_before_any_compute(sweep_env, tiny_models, capsys):
    flags = ["--student", tiny_models["bert"], "--max-sentences", "32", "--sets", "stsb", *sweep_env["base"]]
    teachers = ["--teachers", f"{tiny_models['electra-discriminator']},{tiny_models['bert']}"]
    assert sed.main([*teachers, "--name", "mixed", *flags]) == 2
    err = capsys.readouterr().err
    assert "§5.1" in err and "electra" in err and "--other-architectures" in err
    assert not sweep_env["storage"].exists()
    args = _applied("sed", [*teachers, "--other-architectures", *flags])
    plan = plan_sweep(args, method="sed", prog="sed")
    assert plan.static_params["paper_setting"].startswith("no: other architectures")
    same = _applied(
        "sed", ["--teachers", f"{tiny_models['bert']},{_second_bert(tiny_models, sweep_env['tmp'])}", *flags]
    )
    assert plan_sweep(same, method="sed", prog="sed").static_params["paper_setting"] == "yes"


def test_the_sed_preset_evaluates_the_papers_sets(sweep_env, tiny_models):
    teachers = [tiny_models["bert"], tiny_models["electra-discriminator"]]
    argv = ["--preset", "sed-table3", "--teachers", ",".join(teachers), "--student", tiny_models["bert"]]
    args = _applied("sed", [*argv, *sweep_env["base"]])
    assert args.sets == ["sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr"] and args.eval_pool_layers == 2
    assert args.seeds == [0, 1, 2, 3, 4] and args.teachers == teachers
    assert parser_for("sed").parse_args([]).sets == list(sed_paper.PAPER_SETS)


def _sed_rows():
    """Runs of a SED sweep: 3 teachers, the ensemble, 3 students; STS12-16 wmean = base + set index."""
    rows = []
    for member, values in (("teacher", [70.0, 72.0, 74.0]), ("ensemble", [76.0]), ("student", [77.0, 77.5, 78.0])):
        for replica, value in enumerate(values):
            metrics = {f"{s}_spearman_wmean": value + i for i, s in enumerate(sed_paper.STS_SETS)}
            rows.append(
                {
                    "method": "sed",
                    "task": "stsb",
                    "member": member,
                    "replica": str(replica),
                    "preset": "sed-table3",
                    "best_dev_spearman": 80.0,
                    "mean_spearman": value,
                    **metrics,
                }
            )
    return rows


def test_the_sed_report_puts_table3_beside_ours(tmp_path):
    contract = get_method("sed").metrics(parser_for("sed").parse_args(["--sets", "stsb"])).params()
    uri = log_runs(tmp_path / "store", contract, _sed_rows())
    report = build_report(uri, tmp_path / "report")
    table = pd.read_csv(tmp_path / "report" / "tables" / "paper_sed-table3.csv")
    teachers = table[table["part"] == "ensemble models"].iloc[0]
    # each run's value: the mean over STS12-16 = base + 2
    assert teachers["Max (ours)"] == pytest.approx(76.0) and teachers["Mean (ours)"] == pytest.approx(74.0)
    assert teachers["STD (ours)"] == pytest.approx(2.0) and teachers["Δ Max"] == pytest.approx(76.0 - 75.22)
    ensemble = table[table["part"] == "full ensemble"].iloc[0]
    assert ensemble["Max (ours)"] == pytest.approx(78.0) and ensemble["Δ Max"] == pytest.approx(78.0 - 77.40)
    assert pd.isna(ensemble["Mean (paper)"])
    students = table[table["part"] == "distillation learners"].iloc[0]
    assert students["Mean (ours)"] == pytest.approx(79.5) and students["runs"] == 3
    text = report.index.read_text()
    assert "SED Table 3" in text and "76.00 ± 2.00" not in text and "74.00 ± 2.00" in text
    assert "What differs" in text and "+0.78" in text


@pytest.mark.sweep
def test_the_unsup_report_compares_spearman_wmean_and_says_what_is_not_run(tmp_path):
    args = parser_for("meta-embeddings").parse_args(["--sets", "sts15,sts16,stsb"])
    contract = get_method("meta-embeddings").metrics(args).params()
    rows = []
    for seed in range(2):
        for meta, variant, pooling, value in (
            ("unsup", "paper", "max", 85.0),
            ("conc", "-", "mean", 84.0),
            ("sse", "bert", "mean", 83.0),
        ):
            rows.append(
                {
                    "method": "meta-embeddings",
                    "task": "stsb",
                    "meta": meta,
                    "variant": variant,
                    "pooling": pooling,
                    "source_index": "0" if meta == "sse" else "-1",
                    "seed": str(seed),
                    "preset": "unsup-table1",
                    "best_dev_pearson": 80.0,
                    "test_spearman_at_best_dev": value,
                    "stsb_spearman": value - 50,  # the pooled score is not what the paper's table reads
                    "stsb_spearman_wmean": value + seed,
                    "sts15_spearman_wmean": value + 1,
                    "sts16_spearman_wmean": value + 2,
                }
            )
    uri = log_runs(tmp_path / "store", contract, rows)
    build_report(uri, tmp_path / "report")
    table = pd.read_csv(tmp_path / "report" / "tables" / "paper_unsup-table1.csv").set_index("row")
    assert len(table) == len(unsup_paper.TABLE1)
    assert table.loc["UNSUP", "STS-B (ours)"] == pytest.approx(85.5)
    assert table.loc["UNSUP", "Δ STS-B"] == pytest.approx(85.5 - 86.08)
    assert table.loc["CONC (b)", "STS-15 (ours)"] == pytest.approx(85.0)
    assert table.loc["SSE BERT (b)", "Δ STS-16"] == pytest.approx(85.0 - 84.02)
    assert pd.isna(table.loc["CONC (a)", "STS-B (ours)"]) and table.loc["CONC (a)", "runs"] == 0
    text = (tmp_path / "report" / "README.md").read_text()
    assert "not run" in text and "spearman_wmean" in text


def test_the_table1_report_names_the_dapt_corpus_that_ran(tmp_path):
    from trainables.methods.tmft.method import TMFT

    contract = TMFT.metrics(Namespace(task="stsb", eval_sets=[])).params()
    rows = [
        {
            "method": "dapt+tmft",
            "task": "stsb",
            "model": "bert-base-cased",
            "layer": "12",
            "seed": str(seed),
            "preset": "table1",
            "dapt_corpus": "sick+stsb-train+wiki",
            "best_dev_spearman": 85.0,
            "test_spearman_at_best_dev": 82.0,
            "test_pearson_at_best_dev": 82.0,
        }
        for seed in range(2)
    ]
    uri = log_runs(tmp_path / "store", contract, rows)
    text = build_report(uri, tmp_path / "report").index.read_text()
    section = text[text.index("(preset `table1`)") :]
    corpus = section.index("DAPT corpus of this sweep: `sick+stsb-train+wiki`")
    assert corpus < section.index("| method") and "SNLI + MultiNLI" in section[: section.index("| method")]


@pytest.mark.sweep
def test_a_sed_preset_runs_on_tiny_models(sweep_env, tiny_models):
    from mlflow_helpers import runs_by_role

    argv = [
        "--preset",
        "sed-table3",
        "--teachers",
        f"{tiny_models['bert']},{_second_bert(tiny_models, sweep_env['tmp'])}",
    ]
    argv += ["--student", tiny_models["bert"], "--seeds", "0", "--max-sentences", "48", "--sets", "stsb,sts15"]
    argv += ["--batch-size", "16", "--name", "sed-preset", *sweep_env["base"]]
    assert sed.main(argv) == 0
    _, children = runs_by_role(sweep_env["uri"])
    assert {c.data.params["preset"] for c in children} == {"sed-table3"}
    student = next(c for c in children if c.data.params["member"] == "student")
    assert {"folder_stsb_spearman", "sts15_spearman_wmean", "stsb_spearman"} <= set(student.data.metrics)
    assert student.data.params["eval_pool_layers"] == "2"
    report = build_report(sweep_env["uri"], sweep_env["tmp"] / "report")
    assert "SED Table 3" in report.index.read_text()


@pytest.mark.sweep
def test_a_meta_embedding_preset_runs_on_tiny_models(sweep_env, tiny_models):
    from mlflow_helpers import runs_by_role

    argv = ["--preset", "unsup-table2", "--sources", f"{tiny_models['bert']},{tiny_models['mpnet']}"]
    argv += ["--seeds", "0", "--max-train-samples", "128", "--width", "8", "--epochs", "1", "--name", "unsup-preset"]
    assert meta_embeddings.main([*argv, *sweep_env["base"]]) == 0
    _, children = runs_by_role(sweep_env["uri"])
    assert len(children) == 4 and {c.data.params["optimizer"] for c in children} == {"sgd"}
    report = build_report(sweep_env["uri"], sweep_env["tmp"] / "report")
    table = pd.read_csv(sweep_env["tmp"] / "report" / "tables" / "paper_unsup-table2.csv")
    assert (table["runs"] == 1).all() and table["STS-B (ours)"].notna().all()
    assert "UNSUP Table 2" in report.index.read_text()


MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def test_the_tsdae_table2_report_averages_the_four_tasks_each_from_its_own_corpus_runs(tmp_path):

    args = parser_for("tsdae").parse_args(["--eval-sets", "in-domain", "--corpus", ",".join(tsdae_paper.DOMAIN_SETS)])
    contract = get_method("tsdae").metrics(args).params()
    main = {"askubuntu": "askubuntu_map", "cqadupstack": "cqadupstack_useb_map_at_100"}
    main.update(twitterpara="twitterpara_ap", scidocs="scidocs_map")
    rows = []
    for seed in range(2):
        for offset, corpus in enumerate(tsdae_paper.DOMAIN_SETS[:3]):  # scidocs not run: Avg. stays empty for MLM
            for objective, base in (("tsdae", 60.0), ("mlm", 50.0)):
                if objective == "mlm" and corpus == "cqadupstack":
                    continue
                rows.append(
                    {
                        "method": "tsdae", "task": "stsb", "corpus": corpus, "model": MINILM,
                        "objective": objective, "settings": "paper", "seed": str(seed), "preset": "tsdae-table2",
                        "best_dev_spearman": 70.0, main[corpus]: base + 10 * offset + seed,
                    }
                )  # fmt: skip
    rows.append({**rows[0], "corpus": "scidocs", "askubuntu_map": None, "scidocs_map": 80.0})
    rows[-1].pop("askubuntu_map")
    uri = log_runs(tmp_path / "store", contract, rows)
    build_report(uri, tmp_path / "report")
    table = pd.read_csv(tmp_path / "report" / "tables" / "paper_tsdae-table2.csv").set_index("row")
    tsdae = table.loc["TSDAE"]
    assert tsdae["AskU. (ours)"] == pytest.approx(60.5) and tsdae["TwitterP. Avg. (ours)"] == pytest.approx(80.5)
    assert tsdae["Avg. (ours)"] == pytest.approx((60.5 + 70.5 + 80.5 + 80.0) / 4)
    assert tsdae["Δ Avg."] == pytest.approx((60.5 + 70.5 + 80.5 + 80.0) / 4 - 55.2)
    assert pd.isna(table.loc["MLM", "Avg. (ours)"])  # MLM has no CQADupStack or SciDocs runs
    text = (tmp_path / "report" / "README.md").read_text()
    assert f"base model (the paper's: bert-base-uncased): `{MINILM}`" in text  # compared, and named


@pytest.mark.sweep
def test_a_tsdae_preset_runs_on_tiny_models_and_its_report_names_what_differs(sweep_env, tiny_models):
    from mlflow_helpers import runs_by_role

    argv = ["--preset", "tsdae-table2", "--models", tiny_models["bert"], "--corpus", "twitterpara"]
    argv += ["--method", "none,ct", "--seeds", "0", "--steps", "4", "--eval-steps", "2", "--batch-size", "8"]
    data = sweep_env["tmp"] / "data"
    data.mkdir()
    for folder in Path(sweep_env["base"][sweep_env["base"].index("--data-dir") + 1]).iterdir():
        os.symlink(folder, data / folder.name)
    from test_domain_sets import write_pit, write_turl

    write_turl(data / "twitter" / "url")
    write_pit(data / "twitter" / "pit")
    rows = [(f"dev tweet {i}", f"another dev tweet {i}", 4) for i in range(10)]
    write_pit(data / "twitter" / "pit", rows, split="dev")
    assert tsdae.main([*argv, "--name", "t2", *sweep_env["base"], "--data-dir", str(data)]) == 0
    _, children = runs_by_role(sweep_env["uri"])
    assert {c.data.params["preset"] for c in children} == {"tsdae-table2"}
    assert all("twitterpara_ap" in c.data.metrics for c in children)
    report = build_report(sweep_env["uri"], sweep_env["tmp"] / "report")
    text = report.index.read_text()
    assert "TSDAE Table 2" in text and "base model (the paper's: bert-base-uncased)" in text
    table = pd.read_csv(sweep_env["tmp"] / "report" / "tables" / "paper_tsdae-table2.csv").set_index("row")
    assert table.loc["CT", "runs"] == 1 and not pd.isna(table.loc["CT", "TwitterP. Avg. (ours)"])
