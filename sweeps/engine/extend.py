"""`--extend SWEEP`: grow a finished sweep along its axes and run only the new cells.

`extended_args(args, method_cls, parser, given)` reads the sweep's `sweep.json` (its folder, or its name
under --storage-path) and returns the arguments of the new sweep: every setting as the old sweep ran it,
but for its axes (`Setting.axis`: --seeds, --layers, --models), which hold the old values and the values
given on the command line together, and the settings given that do not change a trial's result (where it
runs, with what resources). A setting given that changes the result and is not an axis is refused by
name: that is a new sweep, not a larger one. The new sweep is a sweep of its own (its own name, parent run
and report), which links the old sweep's trials by their keys (sweeps/engine/reuse.py) and runs the rest,
so its table and its report cover every cell. Every refusal is one `SweepInputError` before anything is
written: a sweep that does not exist, another method's sweep, a changed setting, `--recompute` beside it.
"""

from __future__ import annotations

from argparse import Namespace

from sweeps.engine import storage
from trainables.core.errors import SweepInputError
from trainables.core.settings import resolve, shown

# the new sweep's own: never the old sweep's values
OWN = ("name", "extend", "resume", "dry_run", "recompute", "reuse_from", "instance_type", "list_presets")


def locate(args) -> tuple[str, dict]:
    """(the sweep folder, its sweep.json) of --extend: a folder or URI holding sweep.json, else a name under
    --storage-path."""
    given = str(args.extend)
    candidates = [storage.absolute(given)]
    if "/" not in given:
        candidates.append(storage.join(storage.absolute(args.storage_path), given))
    for folder in candidates:
        saved = storage.read_json(storage.join(folder, storage.SWEEP_FILE))
        if isinstance(saved, dict) and isinstance(saved.get("args"), dict):
            return folder, saved
    raise SweepInputError(
        f"--extend {given}: no sweep there (no {storage.SWEEP_FILE} in {' or '.join(candidates)}); name a finished "
        "sweep's folder, or its name under --storage-path"
    )


def extended_args(args: Namespace, method_cls, parser, given: set) -> Namespace:
    """The arguments of the sweep that extends `args.extend` (module docstring)."""
    if args.recompute:
        raise SweepInputError(
            "--recompute with --extend: an extended sweep links the finished trials it grows from; drop --recompute, "
            "or start a new sweep with --recompute"
        )
    if args.resume:
        raise SweepInputError("--resume with --extend: resume the extending sweep alone (--resume SWEEP_DIR)")
    folder, saved = locate(args)
    made_by = saved.get("method_class")
    if made_by != method_cls.name:
        raise SweepInputError(
            f"--extend {args.extend}: that sweep ran the method {made_by!r} (script {saved.get('script')}), not "
            f"{method_cls.name!r}; extend it with its own script"
        )
    old = {method_cls.renamed.get(k, k): v for k, v in saved["args"].items()}
    settings = {s.name: s for s in parser.settings}
    out = dict(vars(args))
    for name, setting in settings.items():
        if name in OWN or name not in old:
            continue
        before = setting.parse(old[name])
        if setting.axis:
            now = setting.parse(out[name]) if name in given else before
            out[name] = _union(before, now)
        elif name not in given:
            out[name] = before
        elif setting.result and setting.parse(out[name]) != before:
            raise SweepInputError(
                f"--extend {args.extend}: {setting.option} {shown(setting.parse(out[name]))} differs from the "
                f"sweep's {shown(before)}; a changed setting that is not an axis makes a new sweep: drop "
                f"{setting.option}, or start a new sweep without --extend"
            )
    out["extend"] = folder
    return resolve(Namespace(**out), parser.settings)


def _union(before, now):
    """An axis's old values and the new ones: a list holds both, in order, once each; None (e.g. `all`
    layers) holds every value already."""
    if before is None or now is None:
        return None
    if isinstance(before, list) and isinstance(now, list):
        merged = list(dict.fromkeys([*before, *now]))
        return sorted(merged) if all(isinstance(v, int) for v in merged) else merged
    return now
