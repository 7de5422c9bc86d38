"""The sweep scripts, found one way: a script under `sweeps/` hands its command line to the engine
(`functools.partial(runner.main, prog=..., method="<name>")`), so its text names the one method it
runs. `sweep_scripts()` reads every script's text (nothing is imported) and maps the script's name
to that method; `scripts_running(method)` gives the scripts of one method as `sweeps/<name>.py`."""

from __future__ import annotations

import re

from trainables.core.paths import PROJECT_ROOT

SWEEPS = PROJECT_ROOT / "sweeps"
_HANDS_OVER = re.compile(r'runner\.main,.*?\bmethod="([\w-]+)"', re.S)


def sweep_scripts() -> dict[str, str]:
    """{script name (its file's stem): the registered method it runs}, for every sweep script."""
    found = {}
    for path in sorted(SWEEPS.glob("*.py")):
        match = _HANDS_OVER.search(path.read_text())
        if match:
            found[path.stem] = match.group(1)
    return found


def scripts_running(method: str) -> list[str]:
    """The scripts that run `method`, as `sweeps/<name>.py` (the path a preset and a command name)."""
    return [f"sweeps/{name}.py" for name, runs in sweep_scripts().items() if runs == method]
