"""mteb's own tasks run on chosen encoders of the project, written as mteb results.

    python -m analysis mteb-run --models M[,M...] [--layers last|0,3,last] [--pooling own|mean|cls|max]
                                --tasks STS12,SciFact --out DIR [--data-dir D|hub] [--mlflow-uri URI]

A model is a hub id, a folder (a trial's best-dev folder among them) or `runs:/<run id>`; each
(model, layer) becomes an mteb encoder through trainables/evaluation/mteb_encoder.py (scored as the suite
scores it, `own` by default: the model's own pipeline, its kept Dense layer included; so its STS scores are
the suite's) and mteb's `evaluate` writes `<out>/results/<model>/...`, named by the hub id only for a hub
model's own pipeline at its last layer (`embsweep/...-L<layer>` or `-<pooling>` otherwise).
With `--data-dir hub` mteb fetches each task's data from the hub (online). Otherwise each task's data
is read from a folder in the hub's layout under the data dir, named after the task's dataset repository
(`stsbenchmark-sts` for `mteb/stsbenchmark-sts`: what `huggingface-cli download --repo-type dataset
mteb/stsbenchmark-sts --local-dir <data dir>/stsbenchmark-sts` writes); a task without one, an unknown
task and an aggregate task (offline: run its parts) are refused, all named, before any model loads.
"""

from __future__ import annotations

from trainables.core.errors import SweepInputError
from trainables.data._io import find_under
from trainables.evaluation.hub_copies import is_hub


def mteb_tasks(names: list[str], data_dir) -> list:
    """mteb's tasks by name; offline, each pointed at its local copy (see the module docstring)."""
    import mteb

    tasks, problems = [], []
    for name in names:
        try:
            task = mteb.get_task(name)
        except (KeyError, ValueError) as error:
            problems.append(f"{name}: not an mteb task ({str(error.args[0]).splitlines()[0][:120]})")
            continue
        if not is_hub(data_dir):
            if getattr(task, "is_aggregate", False):
                problems.append(f"{name}: an aggregate of other tasks; name its parts")
                continue
            repo = task.metadata.dataset["path"]
            found = find_under(data_dir, repo.split("/")[-1], folder=True)
            if not found:
                name_only = repo.split("/")[-1]
                problems.append(
                    f"{name}: no local copy {name_only}/ under {data_dir} (huggingface-cli download "
                    f"--repo-type dataset {repo} --local-dir <data dir>/{name_only}, or --data-dir hub online)"
                )
                continue
            task.metadata.dataset["path"] = str(found[0])
        tasks.append(task)
    if problems:
        raise SweepInputError("mteb tasks refused, nothing was run: " + "; ".join(problems))
    return tasks


def check_run_references(models: list[str], mlflow_uri: str | None) -> None:
    """Each `runs:/<id>` among `models` names a run of the store that is there (not deleted), checked before the
    tasks' data: a run that does not exist is the problem to name, not a task's missing local copy."""
    from trainables.encoders.run_refs import existing_run, is_run_reference

    for model in models:
        if is_run_reference(model):
            existing_run(model, mlflow_uri)


def parse_layers(text: str) -> list[int | None]:
    """`last` -> None (the model's own last layer); otherwise comma-separated layers and `last`."""
    layers = []
    for item in (part.strip() for part in str(text).split(",") if part.strip()):
        if item == "last":
            layers.append(None)
        elif item.isdigit():
            layers.append(int(item))
        else:
            raise SweepInputError(f"--layers takes 'last' or comma-separated layers, e.g. 0,3,last; got {item!r}")
    if not layers:
        raise SweepInputError("--layers is empty; give 'last' or layers such as 0,3")
    return layers


def run_mteb(models, layers, pooling, tasks, out, *, mlflow_uri=None, batch_size: int = 64) -> list[str]:
    """Evaluate every (model, layer) on the tasks into mteb's cache at `out`; the model names written."""
    import mteb
    from mteb.cache import ResultCache

    from trainables.evaluation.mteb_encoder import from_reference

    cache, names = ResultCache(out), []
    for model in models:
        for layer in layers:
            encoder = from_reference(model, layer, pooling, mlflow_uri=mlflow_uri, batch_size=batch_size)
            mteb.evaluate(
                encoder,
                tasks,
                cache=cache,
                encode_kwargs={"batch_size": batch_size},
                overwrite_strategy="always",
                show_progress_bar=False,
            )
            names.append(encoder.mteb_model_meta.name)
    return names
