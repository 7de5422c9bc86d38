"""What the methods pages (docs/methods/*.md) state about presets, scripts, code and data holds (issue 45's
"Statements"): every preset it names exists and runs through the script it is shown with, every code path it
names exists, SED's runnable tables are the ones with presets, the "no preset" table lists what has none (and
nothing that has one), and the sizes it gives the Wikipedia sample are the sample's."""

from __future__ import annotations

import re

import pytest

from trainables.core.paths import PROJECT_ROOT


def page() -> str:
    return "\n".join(p.read_text() for p in sorted((PROJECT_ROOT / "docs" / "methods").glob("*.md")))


def flat() -> str:
    """The page with its line breaks made spaces (a statement may wrap)."""
    return re.sub(r"\s+", " ", page())


def test_every_preset_the_page_names_exists_and_runs_through_the_script_it_is_shown_with():
    from trainables.methods import all_presets

    presets = all_presets()
    named = re.findall(r"python (sweeps/\w+\.py) --preset ([\w-]+)", page())
    assert len(named) >= 10, named
    for script, name in named:
        assert name in presets, f"docs/methods/ names preset {name}, which does not exist"
        assert presets[name].script == script, (name, presets[name].script, script)
    mentioned = {n for n in re.findall(r"presets? `([\w-]+)`", page())} | {
        n
        for group in re.findall(r"presets ((?:`[\w-]+`(?:, | and )?)+)", page())
        for n in re.findall(r"`([\w-]+)`", group)
    }
    assert mentioned, "the page names no preset in prose"
    for name in mentioned:
        assert name in presets, f"docs/methods/ names preset {name}, which does not exist"
    table = set(re.findall(r"^\| `([\w-]+)`(?:, `([\w-]+)`)? \| `sweeps/", page(), re.M))  # the presets table
    assert table and all(name in presets for row in table for name in row if name), table


def test_every_code_path_the_page_names_exists():
    """Every `path/to/module.py` (and `analysis/...`, `sweeps/...`, `benchmarks/...`) anywhere on the page;
    a bare `module.py` on a line that starts with Code: or a method row exists somewhere in the project."""
    files = {p.name for p in PROJECT_ROOT.rglob("*.py") if ".venv" not in p.parts}
    paths = set(re.findall(r"`((?:trainables|sweeps|analysis|benchmarks)/[\w/]+\.py)", page()))
    assert len(paths) > 20
    missing = sorted(p for p in paths if not (PROJECT_ROOT / p).is_file())
    assert not missing, f"docs/methods/ names code that does not exist: {missing}"
    for line in (x for x in page().splitlines() if x.startswith("Code:") or x.startswith("| M")):
        for name in re.findall(r"`(\w+\.py)`", line):
            assert name in files, (name, line)
    assert "`tasks.py`" not in page()


def test_seds_runnable_tables_are_the_ones_with_presets():
    from trainables.methods.sed.paper import PRESETS

    stated = "only the CT rows of Tables 1, 3 and 5 can be run (presets `sed-table1`, `sed-table3`, `sed-table5-base`, "
    assert stated + "`sed-table5-distil`)" in flat()
    tables = {re.search(r"Table (\d+)", p.reproduces + " " + name.replace("sed-table", "Table ")).group(1)
              for name, p in PRESETS.items()}  # fmt: skip
    assert tables == {"1", "3", "5"} and set(PRESETS) == {"sed-table1", "sed-table3", "sed-table5-base",
                                                          "sed-table5-distil"}  # fmt: skip


def no_preset_rows() -> str:
    text = page()
    start = text.index("Rows of the papers with no preset")
    return text[start : text.index("\n\n", text.index("|---|", start))]


@pytest.mark.parametrize(
    "row", ["TSDAE Table 4", "TSDAE Figures 4 and 7", "Table 10", "TSDAE Figures 2 / 5", "SED Table 7"]
)
def test_the_no_preset_table_lists_what_has_no_preset(row):
    assert row in no_preset_rows()


def test_appendix_as_tables_have_presets_and_are_not_in_the_no_preset_table():
    """Appendix A's Tables 5 to 7 have presets now (`tsdae-table5` ...): the table must not list them."""
    from trainables.methods import all_presets

    assert {"tsdae-table5", "tsdae-table6", "tsdae-table7", "tsdae-tying"} <= set(all_presets())
    rows = no_preset_rows()
    assert not re.search(r"TSDAE Tables? [5-7]\b", rows), rows
    assert not re.search(r"Tables? 5 (to|-|–) 7", rows), rows


def test_the_wiki_sample_is_sized_where_it_matters(data_dir):
    """11,914 lines, 11,548 distinct sentences: SimCSE's epoch at 512 is 23 steps; the SED teachers' 50K CT
    steps of 30 sentences draw each sentence about 130 times."""
    from trainables.methods.tsdae.checks import read_corpus
    from trainables.methods.tsdae.settings import batch_sentences, batching

    lines = (data_dir / "wiki-sentences" / "wiki1m-prefix.txt").read_text().splitlines()
    sentences = read_corpus("wiki", data_dir, None)[0]
    text = flat()
    assert f"{len(lines):,} lines, {len(sentences):,} distinct sentences" in text
    steps = batching("simcse", False, 512, len(sentences))["epoch_steps"]  # the last, smaller batch kept
    assert steps == 23 and f"batch 512 is {steps} steps" in text
    drawn = 50_000 * batch_sentences("ct", True, 16) / len(sentences)  # the CT code's 16 pairs of a step
    assert batch_sentences("ct", True, 16) == 30 and f"about {round(drawn, -1):.0f} times" in text
    assert "--steps 50000 --eval-steps 500 --final-weights best-dev --corpus wiki" in text
