"""WS+TMFT and DAPT+TMFT (ELECTRA paper, Table 1): upstream stages, then a TMFT layer sweep from them.

    python sweeps/improvements.py                                 # the paper's models, both improvements
    python sweeps/improvements.py --smoke-test                    # a few minutes on a tiny model
    python sweeps/improvements.py --improvement dapt --models sentence-transformers/all-MiniLM-L6-v2 --seeds 0

The same models x layers x seeds and flags as electra_layers.py, plus `--improvement ws|dapt|both`
and the stage settings (`--ws-*`, `--dapt-*`; defaults from METHODS.md M2 and M3). Each stage (WS:
one per model and layer, seed 0; DAPT: one per model) is computed once into the stage store
`<storage-path>/stages/` and reused by every trial and every later sweep that needs it; see
sweeps/stages_plan.py. `--help` lists every flag.
"""
from __future__ import annotations

import sys

from sweeps.cli import build_parser
from trainables.errors import SweepInputError


def parser(prog: str = "improvements", description: str = ""):
    from sweeps.stages_plan import add_stage_arguments

    built = build_parser(prog, description or __doc__.split("\n\n")[0])
    add_stage_arguments(built)
    return built


def main(argv=None, prog: str = "improvements") -> int:
    from sweeps.runner import run_sweep
    from sweeps.stages_plan import StageError, plan_improvements

    args = parser(prog).parse_args(argv)
    try:
        plan = plan_improvements(args, prog=prog)
        results = run_sweep(plan)
    except SweepInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except StageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    failed = any(r.error for r in results) or bool(getattr(plan, "failed_stages", None))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
