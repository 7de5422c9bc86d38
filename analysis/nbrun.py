"""Run an analysis notebook headless with new parameters (what the tests and CI do).

The first code cell of each notebook in `analysis/notebooks/` is its parameter cell (tagged
`parameters`): plain `NAME = value` lines. `run_notebook(path, {"MLFLOW_URI": uri})` rewrites
those assignments, executes every cell top to bottom with nbclient, and returns the executed
notebook (and writes it to `output` if given). The kernel is this very Python interpreter
(`sys.executable`, through a throw-away kernelspec), so the notebook sees the same installed
packages whatever kernels Jupyter knows about.

    python -m analysis.nbrun analysis/notebooks/layer_curves.ipynb MLFLOW_URI=sqlite:////abs/mlflow.db
    (writes layer_curves.executed.ipynb beside it; NAME=VALUE values are Python literals or text)
"""

from __future__ import annotations

import ast
import json
import re
import sys
import tempfile
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"
KERNEL_NAME = "embsweep-python"


def parameter_cell(nb):
    """The cell tagged `parameters`, else the first code cell."""
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    for cell in code:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            return cell
    if not code:
        raise ValueError("the notebook has no code cell")
    return code[0]


def set_parameters(nb, parameters: dict) -> None:
    """Replace `NAME = ...` lines of the parameter cell (append names it does not have)."""
    cell = parameter_cell(nb)
    lines = cell.source.splitlines()
    missing = dict(parameters)
    for i, line in enumerate(lines):
        match = re.match(r"^([A-Za-z_]\w*)\s*=", line)
        if match and match.group(1) in missing:
            lines[i] = f"{match.group(1)} = {missing.pop(match.group(1))!r}"
    lines += [f"{name} = {value!r}" for name, value in missing.items()]
    cell.source = "\n".join(lines)


def run_notebook(path, parameters: dict | None = None, cwd=None, timeout: int = 600, output=None):
    """Execute the notebook at `path` with `parameters`; return the executed notebook."""
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(str(path), as_version=4)
    set_parameters(nb, parameters or {})
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / KERNEL_NAME
        spec.mkdir()
        (spec / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "Python (embsweep)",
                    "language": "python",
                }
            )
        )
        specs = KernelSpecManager(kernel_dirs=[tmp])
        manager = AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs)
        client = NotebookClient(
            nb, km=manager, timeout=timeout, resources={"metadata": {"path": str(cwd or Path(path).parent)}}
        )
        client.execute()
    if output is not None:
        nbformat.write(nb, str(output))
    return nb


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(__doc__)
        return 2
    parameters = {}
    for item in args[1:]:
        name, _, value = item.partition("=")
        try:
            parameters[name] = ast.literal_eval(value)  # numbers, None, quoted strings
        except (ValueError, SyntaxError):
            parameters[name] = value
    out = Path(args[0]).with_suffix(".executed.ipynb")
    run_notebook(args[0], parameters, cwd=Path.cwd(), output=out)
    print(f"executed: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
