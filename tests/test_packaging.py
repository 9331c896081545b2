"""The wheel ships what an installed probe reads: every published evidence file is package data."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from probe.recommend.sources import json_files

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "probe"


def _package_data() -> set[Path]:
    """The files the ``[tool.setuptools.package-data]`` globs of pyproject.toml select (symlinks
    followed, as setuptools' glob does)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["probe"]
    found = (Path(p) for pattern in patterns for p in glob.glob(str(PACKAGE / pattern), recursive=True))
    return {p.resolve() for p in found if p.is_file()}


def test_every_published_evidence_file_is_package_data() -> None:
    shipped = PACKAGE / "data" / "matrices"
    wanted = set()
    for sm in (None, 80, 89, 90, 100, 103, 110, 120, 121):
        folders = sorted(p.name.removeprefix("vllm-") for p in (shipped / "predicted").iterdir())
        for version in (None, *folders):
            wanted.update(f.resolve() for f in json_files([shipped], sm, version))
    assert any(f.name.endswith(".json.gz") for f in wanted)  # the per-GPU prediction sets
    missing = sorted(str(f.relative_to(ROOT / "matrices")) for f in wanted - _package_data())
    assert not missing, f"read by recommend but left out of the wheel: {missing[:5]}"


def test_data_files_are_package_data() -> None:
    data = {p.resolve() for p in (PACKAGE / "data").glob("*.json")}
    data |= {p.resolve() for p in (PACKAGE / "data" / "models").glob("*.json")}
    data |= {p.resolve() for p in (PACKAGE / "schema").glob("*.json")}
    assert data and data <= _package_data()
