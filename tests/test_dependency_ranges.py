"""pyproject.toml declares ranges, the lock pins them: every dependency (of the package and of each extra)
has a lower bound (the lowest version CI tests, `.ci/constraints-lowest.txt`) and an upper bound; the lock
(`cluster/constraints.txt`) pins every one of them inside its range; and every third-party module the
package imports comes from a declared distribution, so a plain `pip install` of the wheel brings it."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sweeps", "trainables", "analysis")


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> dict[str, list[Requirement]]:
    """{"": the package's requirements, extra name: that extra's}."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"": project["dependencies"], **project["optional-dependencies"]}
    return {group: [Requirement(r) for r in requirements] for group, requirements in groups.items()}


def pins(path: Path) -> dict[str, str]:
    """{normalised name: version} of a constraints file's `name==version` lines."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            assert normal(name) not in found, f"{path.name}: {name} pinned twice"
            found[normal(name)] = version
    return found


def bounds(requirement: Requirement) -> tuple[str, str]:
    lower = [s.version for s in requirement.specifier if s.operator == ">="]
    upper = [s.version for s in requirement.specifier if s.operator == "<"]
    assert len(lower) == 1 and len(upper) == 1 and len(requirement.specifier) == 2, (
        f"{requirement}: want exactly one lower bound (>=) and one upper bound (<)"
    )
    return lower[0], upper[0]


def all_requirements() -> list[Requirement]:
    return [r for group in declared().values() for r in group]


def test_every_dependency_has_a_range_whose_upper_bound_is_above_its_lower():
    for requirement in all_requirements():
        lower, upper = bounds(requirement)
        assert Version(lower) < Version(upper), requirement


def test_a_dependency_named_twice_has_one_range():
    ranges = {}
    for requirement in all_requirements():
        spec = str(requirement.specifier)
        assert ranges.setdefault(normal(requirement.name), spec) == spec, requirement


def test_the_lowest_constraints_pin_every_lower_bound():
    lows = pins(ROOT / ".ci" / "constraints-lowest.txt")
    wanted = {normal(r.name): bounds(r)[0] for r in all_requirements()}
    assert {name: Version(v) for name, v in lows.items()} == {name: Version(v) for name, v in wanted.items()}


def test_the_lock_pins_every_dependency_inside_its_range():
    lock = pins(ROOT / "cluster" / "constraints.txt")
    for requirement in all_requirements():
        name = normal(requirement.name)
        assert name in lock, f"cluster/constraints.txt does not pin {requirement.name}"
        assert requirement.specifier.contains(lock[name]), f"the lock's {name}=={lock[name]} is outside {requirement}"
    assert {"ray", "aiohttp-cors", "opencensus", "py-spy"} <= set(lock)  # ray[default]: the dashboard


def imported_modules() -> set[str]:
    """Top-level names of the modules the package's code imports (absolute imports only)."""
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - set(PACKAGES)


@pytest.mark.sweep  # about 2 s: out of the fast run, which stays under 3 minutes
def test_every_third_party_import_comes_from_a_declared_distribution():
    names = {normal(r.name) for r in all_requirements()}
    providers = importlib.metadata.packages_distributions()
    modules = imported_modules()
    assert {"torch", "ray", "mlflow", "psutil"} <= modules
    undeclared = {m: providers.get(m) for m in modules if not names & {normal(d) for d in providers.get(m, ())}}
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


@pytest.mark.parametrize("group", ["", "test"])
def test_the_running_environment_satisfies_the_ranges(group):
    """CI installs from the lock, the lows or the newest: whichever it is lies inside the ranges."""
    for requirement in declared()[group]:
        installed = importlib.metadata.version(requirement.name)
        assert requirement.specifier.contains(installed), f"{requirement.name} {installed} is outside {requirement}"
