"""The layout's rules, checked on the code itself: a method package never imports another method's
modules, shared code never imports a method, the shared parts import only the floors below their
own (docs/architecture.md), no two modules import each other (no cycle), no module over 600 lines
nor function over 100, and each method's losses and models (and the shared training loop)
import without Ray."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
METHODS = ROOT / "trainables" / "methods"

# Shared modules the Ray-free parts of the methods build on (an entry that no longer exists fails the import).
RAY_FREE_SHARED = ["trainables.training.pair_training", "trainables.encoders.loading", "trainables.evaluation.sets"]


def ray_free_modules() -> list[str]:
    """Every module of a method package but the ones Ray Tune runs (the method, which registers itself with
    `@register_method`, and its Trainable in trainable.py): losses, models, training loops, stage kinds,
    paper tables. Derived from the tree, so a new module is held to it with no edit here."""
    found = []
    for path in sorted(METHODS.glob("*/*.py")):
        if path.name in ("__init__.py", "trainable.py") or "@register_method" in path.read_text():
            continue
        found.append(f"trainables.methods.{path.parent.name}.{path.stem}")
    return found + RAY_FREE_SHARED


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_no_method_imports_another_method():
    packages = sorted(p.name for p in METHODS.iterdir() if (p / "__init__.py").is_file())
    assert {"tmft", "tsdae", "sed", "meta_embeddings", "evaluate"} <= set(packages)
    crossings = []
    for package in packages:
        for path in (METHODS / package).glob("*.py"):
            for module in imported_modules(path):
                other = module.split(".")[2] if module.startswith("trainables.methods.") else None
                if other and other != package:
                    crossings.append(f"{path.relative_to(ROOT)} imports {module}")
    assert crossings == []


# the shared parts from the bottom floor up (docs/architecture.md): each imports only lower floors
FLOORS = [("core",), ("data", "stages"), ("encoders",), ("evaluation",), ("training",)]


def test_the_shared_parts_import_only_the_floors_below_their_own():
    floor_of = {part: level for level, parts in enumerate(FLOORS) for part in parts}
    shared = {p.name for p in (ROOT / "trainables").iterdir() if (p / "__init__.py").is_file()} - {"methods"}
    assert shared == set(floor_of), "a shared part was added or removed: give it its floor in FLOORS and the docs"
    upward = []
    for part, level in floor_of.items():
        for path in (ROOT / "trainables" / part).rglob("*.py"):
            for module in imported_modules(path):
                target = module.split(".")[1] if module.startswith("trainables.") and module.count(".") else None
                if target in floor_of and target != part and floor_of[target] >= level:
                    upward.append(f"{path.relative_to(ROOT)} imports {module}")
    assert upward == []


def test_shared_code_imports_no_method():
    upward = []
    for path in (ROOT / "trainables").rglob("*.py"):
        if METHODS in path.parents or path.parent == METHODS:
            continue
        upward += [
            f"{path.relative_to(ROOT)} imports {m}"
            for m in imported_modules(path)
            if m.startswith("trainables.methods")
        ]
    assert upward == []


@pytest.mark.sweep
def test_losses_models_and_the_training_loop_import_without_ray():
    modules = ray_free_modules()
    assert "trainables.methods.tsdae.training" in modules and "trainables.methods.tmft.method" not in modules
    code = "import sys\nsys.modules['ray'] = None\n" + "".join(f"import {m}\n" for m in modules)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_architecture_page_names_every_module():
    """docs/architecture.md's package table names every module (`name.py`): a new module that the page
    does not mention fails here, so the table cannot go stale silently."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    missing = [
        str(path.relative_to(ROOT))
        for part in ("trainables", "sweeps", "analysis")
        for path in sorted((ROOT / part).rglob("*.py"))
        if path.name != "__init__.py"
        and "notebooks" not in path.parts
        and f"`{path.name}`" not in page
        and f"{path.parent.name}/{path.name}" not in page
        and f"`{path.stem}`" not in page
    ]
    assert missing == [], f"docs/architecture.md does not name: {', '.join(missing)}"


# Sizes the layout allows outside tests: a module of one purpose fits in 600 lines, a function in 100.
MODULE_LINES, FUNCTION_LINES = 600, 100


def test_no_module_over_600_lines_and_no_function_over_100_outside_tests():
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    over = {}
    for name in listed.stdout.split():
        if name.startswith("tests/") or not (ROOT / name).is_file():
            continue
        text = (ROOT / name).read_text()
        if text.count("\n") > MODULE_LINES:
            over[name] = text.count("\n")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    over[f"{name}:{node.name}"] = lines
    assert not over, f"over {MODULE_LINES} lines a module or {FUNCTION_LINES} a function: {over}"


def module_level_imports(path: Path) -> set[str]:
    """What a module imports when it is itself imported: its top-level `import`s (an import inside a function
    runs later, when it is called)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_no_import_cycles_between_the_projects_modules():
    import graphlib

    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    paths = [ROOT / n for n in listed.stdout.split() if n.split("/")[0] in ("trainables", "sweeps", "analysis")]
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p for p in paths}
    graph = {name: module_level_imports(path) & set(modules) - {name} for name, path in modules.items()}
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        pytest.fail(f"modules import each other in a cycle: {' -> '.join(error.args[1])}")
