"""The committed JSON Schemas match the pydantic models, and real output validates against them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from probe.matrix.schema import SCHEMA_FILES, render_schema, schema_dir
from tests.matrix import fixtures

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(SCHEMA_FILES))
def test_committed_schema_is_current(name):
    committed = (schema_dir() / name).read_text(encoding="utf-8")
    assert committed == render_schema(SCHEMA_FILES[name]), (
        f"probe/schema/{name} is stale: run `python3 -m probe.matrix.schema` and commit the result"
    )


def _validator(name: str) -> jsonschema.protocols.Validator:
    schema = json.loads((schema_dir() / name).read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_committed_fixtures_are_what_build_matrix_writes(tmp_path):
    for name, make in fixtures.FILES.items():
        from probe.matrix.build import write_matrix

        write_matrix(make(), tmp_path / name)
        assert (tmp_path / name).read_text() == (fixtures.DATA / name).read_text(), (
            f"tests/matrix/data/{name} is stale: run `python3 -m tests.matrix.fixtures`"
        )


@pytest.mark.parametrize("name", sorted(fixtures.FILES))
def test_real_matrix_validates(name):
    doc = json.loads((fixtures.DATA / name).read_text())
    _validator("matrix-v1.json").validate(doc)


def test_fleet_validates(tmp_path, probe_cli, data_dir):
    out = tmp_path / "fleet.json"
    r = probe_cli(
        "merge", str(data_dir / "baseline.json"), str(data_dir / "current-regression.json"), "-o", str(out)
    )
    assert r.returncode == 0, r.stderr
    _validator("fleet-v1.json").validate(json.loads(out.read_text()))


def test_schema_rejects_unknown_outcome():
    doc = json.loads((fixtures.DATA / "baseline.json").read_text())
    doc["cells"][1]["outcome"] = "exploded"
    with pytest.raises(jsonschema.ValidationError):
        _validator("matrix-v1.json").validate(doc)


def _published() -> list[Path]:
    root = ROOT / "matrices"
    return sorted(root.rglob("*.json")) if root.is_dir() else []


PUBLISHED = _published()


@pytest.mark.slow
@pytest.mark.skipif(not PUBLISHED, reason="nothing published under matrices/ yet")
@pytest.mark.parametrize("path", PUBLISHED, ids=[p.name for p in PUBLISHED])
def test_published_matrices_validate(path):
    """Every published file loads (matrices, fleets, and static predictions as predicted-cell matrices)
    and what probe makes of it validates against the committed JSON Schema."""
    from probe.matrix.io import load_document
    from probe.matrix.schema import Fleet

    doc = load_document(path)
    name = "fleet-v1.json" if isinstance(doc, Fleet) else "matrix-v1.json"
    _validator(name).validate(doc.model_dump(mode="json"))
    raw = json.loads(path.read_text())
    if raw.get("kind") in ("matrix", "fleet") and isinstance(raw.get("provenance", {}), dict):
        _validator(name).validate(raw)  # a published matrix file itself, not only probe's reading of it
    assert doc.cells if not isinstance(doc, Fleet) else doc.matrices
