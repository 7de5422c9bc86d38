"""Command line of the analysis.

    python -m analysis report --mlflow-uri sqlite:////abs/mlflow.db [--experiment NAME]
                              [--where PARAM=VALUE ...] --out DIR|URI [--no-log-artifacts]
    python -m analysis mteb --mlflow-uri URI [--experiment NAME] [--where PARAM=VALUE ...] [--pareto] --out DIR|URI
    python -m analysis mteb-run --models M[,M...] [--layers last|0,3] [--pooling own|mean|cls|max]
                                --tasks T1,T2 --out DIR|URI [--data-dir D|hub] [--mlflow-uri URI]
    python -m analysis methods      (the table of every registered method: its MethodInfo)
    python -m analysis docs [--check]   (write the docs' generated tables: methods, sets, CLI reference, benchmarks)
    python -m analysis cka --models A,B [--checkpoints DIR] [--data-dir D] [--max-sentences N]
                           [--unique-sentences] --out DIR|URI [--mlflow-uri URI] [--experiment cka]

`--out` is a local folder (created) or an object-store URI, e.g.
`s3://bucket/sweeps/report?endpoint_override=127.0.0.1:9000&scheme=http`: the outputs are written to
a temporary folder and uploaded whole (analysis/outputs.py). The report is also logged as MLflow
artifacts under `report/` of the sweeps' parent runs (`--no-log-artifacts`: not); a store that
refuses them prints a warning line, and the report still exits 0.

Bad input (an --out that is a file or cannot be written, a URI whose bucket does not exist or whose
store refuses, no store, no experiment, no runs, unknown model) prints one message and exits 2.
"""

from __future__ import annotations

import argparse
import sys

from trainables.core.errors import SweepInputError

OUT_HELP = "output folder (created), or an object-store URI: s3://bucket/path[?endpoint_override=host:port&scheme=http]"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    report = commands.add_parser("report", help="tables, layer curves, Pareto fronts and an index from MLflow")
    report.add_argument("--mlflow-uri", required=True, help="tracking URI, e.g. sqlite:////abs/path/mlflow.db")
    report.add_argument("--experiment", default=None, help="experiment name (default: every experiment)")
    report.add_argument("--out", required=True, help=OUT_HELP)
    report.add_argument(
        "--log-artifacts",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="log the report as MLflow artifacts under report/ of the sweeps' parent runs (default: on)",
    )
    report.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="PARAM=VALUE",
        help="keep only runs with this param value (repeatable), e.g. --where random_init=False",
    )

    export = commands.add_parser("mteb", help="the runs' suite scores as mteb results (TaskResult JSON per task)")
    export.add_argument("--mlflow-uri", required=True, help="tracking URI, e.g. sqlite:////abs/path/mlflow.db")
    export.add_argument("--experiment", default=None, help="experiment name (default: every experiment)")
    export.add_argument(
        "--out", required=True, help="mteb results folder (results/...), or " + OUT_HELP.split(", or ")[1]
    )
    export.add_argument("--where", action="append", default=[], metavar="PARAM=VALUE", help="as for report")
    export.add_argument(
        "--pareto", action="store_true", help="only the Pareto-optimal runs (parameters against the report metric)"
    )

    run = commands.add_parser("mteb-run", help="mteb's own tasks on chosen encoders (hub ids, folders, runs:/)")
    run.add_argument("--models", required=True, help="comma-separated hub ids, model folders or runs:/<run id>")
    run.add_argument("--layers", default="last", help="'last' or comma-separated layers, e.g. 0,3,last")
    run.add_argument(
        "--pooling",
        default="own",
        choices=["own", "mean", "cls", "max"],
        help="own (default): the model's own pipeline from its sentence-transformers config, its Dense layer "
        "included; or a pooling (the results are then named for it)",
    )
    run.add_argument("--tasks", required=True, help="comma-separated mteb task names, e.g. STS12,SciFact")
    run.add_argument("--out", required=True, help="mteb results folder (results/...), or " + OUT_HELP.split(", or ")[1])
    run.add_argument(
        "--data-dir",
        default=None,
        help="folder holding each task's data in the hub's layout (default: the data dir), or 'hub' (online)",
    )
    run.add_argument("--mlflow-uri", default=None, help="the store of runs:/ references")
    run.add_argument("--batch-size", type=int, default=64)

    commands.add_parser("methods", help="the table of every registered method, from each method's MethodInfo")
    docs = commands.add_parser(
        "docs", help="write the docs' generated tables (methods, evaluation sets, CLI reference, benchmark results)"
    )
    docs.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 naming each page whose tables are stale"
    )
    cka = commands.add_parser("cka", help="linear CKA per layer index between two models")
    cka.add_argument("--models", required=True, help="two hub ids or model folders, comma-separated: A,B")
    cka.add_argument(
        "--checkpoints",
        default=None,
        help="a finished sweep's checkpoint folder (its trials' best-dev weights, */trial.json with best/)",
    )
    cka.add_argument("--data-dir", default=None, help="data root holding stsbenchmark/ (default: ../shared/data)")
    cka.add_argument("--max-sentences", type=int, default=None, help="use only the first N test sentences")
    cka.add_argument(
        "--unique-sentences",
        action="store_true",
        help="the 2,552 unique test sentences (default: all 2,758 with duplicates, as the authors' code)",
    )
    cka.add_argument("--batch-size", type=int, default=64)
    cka.add_argument("--out", required=True, help=OUT_HELP)
    cka.add_argument("--mlflow-uri", default=None, help="log the CSV and plot as artifacts of a run here")
    cka.add_argument("--experiment", default="cka", help="MLflow experiment for the CKA run (default: cka)")
    return parser


def _where(items: list[str]) -> dict[str, str]:
    where = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SweepInputError(f"--where takes PARAM=VALUE, got {item!r}")
        where[key] = value
    return where


def _report(args) -> None:
    from analysis.outputs import local_folder, location
    from analysis.report import build_report, log_to_parent_runs

    where = _where(args.where)
    logged, warning = [], None
    with local_folder(args.out) as folder:
        report = build_report(args.mlflow_uri, folder, args.experiment, where)
        if args.log_artifacts:
            logged, warning = log_to_parent_runs(args.mlflow_uri, report)
    index = location(args.out, folder, report.index)
    print(f"{len(report.runs)} trial runs ({len(report.excluded)} left out); report: {index}")
    if logged:
        print(f"MLflow: the report is in the artifacts report/ of parent run(s) {', '.join(logged)}")
    if warning:
        print(f"warning: {warning}", file=sys.stderr)


def _mteb(args) -> None:
    from analysis.loader import load_runs
    from analysis.mteb_export import export_runs, pareto_runs
    from analysis.outputs import local_folder

    where = _where(args.where)
    runs = load_runs(args.mlflow_uri, args.experiment)
    for key, value in where.items():
        runs = runs[runs[key].astype(str) == value] if key in runs else runs.iloc[0:0]
    if args.pareto:
        runs = pareto_runs(runs)
    with local_folder(args.out) as folder:
        export = export_runs(runs, folder)
    print(f"{len(export.files)} mteb result files for {export.runs} of {len(runs)} runs under {args.out}/results")
    if export.skipped:
        print(f"not MTEB tasks, not written: {', '.join(sorted(export.skipped))}")


def _mteb_run(args) -> None:
    from analysis.mteb_run import check_run_references, mteb_tasks, parse_layers, run_mteb
    from analysis.outputs import local_folder
    from trainables.core.paths import default_data_dir

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    layers = parse_layers(args.layers)
    check_run_references(models, args.mlflow_uri)  # the models first: a missing run is the problem to name
    tasks = mteb_tasks([t.strip() for t in args.tasks.split(",") if t.strip()], args.data_dir or default_data_dir())
    with local_folder(args.out) as folder:
        names = run_mteb(
            models, layers, args.pooling, tasks, folder, mlflow_uri=args.mlflow_uri, batch_size=args.batch_size
        )
    print(f"mteb results of {', '.join(names)} on {len(tasks)} task(s) under {args.out}/results")


def _cka(args) -> None:
    from analysis.cka import run_cka

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    frame, files, run_id = run_cka(
        models,
        args.out,
        data_dir=args.data_dir,
        checkpoints=args.checkpoints,
        max_sentences=args.max_sentences,
        unique=args.unique_sentences,
        tracking_uri=args.mlflow_uri,
        experiment=args.experiment,
        batch_size=args.batch_size,
    )
    print(frame.to_string(index=False))
    print("wrote " + ", ".join(str(f) for f in files) + (f"; MLflow run {run_id}" if run_id else ""))


def _docs(check: bool) -> int:
    from analysis.docs_tables import stale, write
    from trainables.core.paths import PROJECT_ROOT

    docs = PROJECT_ROOT / "docs"
    if not docs.is_dir():
        print(f"{docs} not found: `python -m analysis docs` writes a checkout's docs/; run it in one", file=sys.stderr)
        return 2
    if check:
        pages = stale(docs)
        for page in pages:
            print(f"docs/{page}: its generated tables are stale; run: python -m analysis docs", file=sys.stderr)
        return 1 if pages else 0
    print("\n".join(f"wrote docs/{page}" for page in write(docs)) or "docs tables are up to date")
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "methods":
        from analysis.methods_table import markdown

        print(markdown())
        return 0
    if args.command == "docs":
        return _docs(args.check)
    try:
        from analysis.outputs import check_out

        check_out(args.out)  # before reading anything
        if args.mlflow_uri:
            from trainables.core.endpoints import mlflow_store

            args.mlflow_uri = mlflow_store(args.mlflow_uri)
        {"report": _report, "mteb": _mteb, "mteb-run": _mteb_run, "cka": _cka}[args.command](args)
    except SweepInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
