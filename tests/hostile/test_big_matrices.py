"""Matrices read cell by cell: a 200 MB matrix through ``show`` / ``merge`` / ``diff`` / ``gate``
within the memory ceiling, and the streamed reading and writing equal to reading and writing the
document whole. (Times of the big case: ``benchmarks/bench_matrix.py``; here only "no hang".)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe.matrix.io import dump_document, load_document
from probe.matrix.lazy import StoredCells, summaries
from probe.matrix.schema import Fleet, Matrix
from tests.hostile.harness import run_probe
from tests.hostile.inputs import MATRIX, write_big_matrix

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "tests" / "matrix" / "data").glob("*.json")) + sorted(
    (ROOT / "matrices" / "measured").glob("*.json")
)


def _whole(path: Path) -> Matrix | Fleet:
    doc = json.loads(path.read_text())
    return (Fleet if doc.get("kind") == "fleet" else Matrix).model_validate(doc)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_streamed_reading_equals_reading_whole(path):
    """Cells left in the file, read back on demand, equal the cells of the document read whole;
    writing them again gives the bytes ``json.dumps(model_dump, indent=1)`` gives."""
    lazy, whole = load_document(path), _whole(path)
    assert isinstance(lazy.cells, StoredCells)  # type: ignore[union-attr]
    assert lazy == whole
    expected = json.dumps(whole.model_dump(mode="json", exclude_none=False), indent=1) + "\n"
    assert dump_document(lazy) == expected == path.read_text()


@pytest.mark.parametrize("indent", [None, 4, "\t"])
def test_other_layouts_read_the_same(tmp_path, indent):
    """Compact, 4-space and tab-indented files (cells found by the standard parser, or by their
    own indentation) read as the fixture does; written back in probe's layout."""
    whole = _whole(MATRIX)
    p = tmp_path / "m.json"
    p.write_text(json.dumps(json.loads(MATRIX.read_text()), indent=indent))
    lazy = load_document(p)
    assert lazy == whole and dump_document(lazy) == MATRIX.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in DOCS if "measured" in str(p)] + [MATRIX], ids=lambda p: p.name)
def test_recommendations_from_summaries_are_those_from_full_cells(path):
    """``gate`` / ``diff`` recommend from the cells' summaries (no ``log_excerpt`` / ``params`` /
    most of ``details``): the recommender answers exactly as from the full cells."""
    from probe.catalog.models import load_profiles
    from probe.decide.compare import evidence_of, recommendation_for
    from probe.recommend.recommender import recommend
    from probe.recommend.sources import evidence_versions, mark_superseded, matrix_cells, reported_cells
    from probe.recommend.types import LoadedEvidence

    m = load_document(path)
    assert isinstance(m, Matrix) and m.provenance.gpu is not None
    cells = matrix_cells(json.loads(path.read_text()), Path("<matrix>"))
    cells += reported_cells(evidence_versions(cells), gpus=[m.provenance.gpu.sm])
    mark_superseded(cells)
    full = LoadedEvidence(cells, ["<matrix>"])
    slim = evidence_of(m)
    for profile in load_profiles():
        try:
            want = recommend(profile.name, gpu=str(m.provenance.gpu.sm), loaded=full).to_dict()
        except Exception:
            want = None
        assert recommendation_for(m, profile.name, slim) == want, profile.name


def test_summaries_of_cells_in_memory_and_read_agree():
    m, whole = load_document(MATRIX), _whole(MATRIX)
    assert summaries(m.cells) == summaries(whole.cells)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """Two 200 MB matrices (~95,000 cells each: the published H200 matrix's cells, cycled under new
    ids); the second has every 97th passing cell crashed."""
    d = tmp_path_factory.mktemp("big")
    old, new = d / "old.json", d / "new.json"
    base = ROOT / "matrices" / "measured" / "nvidia-h200-sm90-vllm-0.26.0.json"
    write_big_matrix(old, 200, base=base)
    write_big_matrix(new, 200, base=base, flip_every=97)
    return old, new


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["show", "show-json", "merge", "diff", "gate"])
def test_200_mb_matrix_within_the_memory_ceiling(big, tmp_path, verb):
    """Before: diff 57 s / 1.0 GB, merge 1.8 GB, show 0.8 GB, gate exit 4. Ceiling: 512 MB; no hang
    (600 s: the recommender's time grows with the cells, see benchmarks/bench_matrix.py)."""
    old, new = big
    args = {
        "show": ["show", str(old), "-o", str(tmp_path / "t.txt")],
        "show-json": ["show", str(old), "--format", "json", "-o", str(tmp_path / "m.json")],
        "merge": ["merge", str(old), str(new), "-o", str(tmp_path / "f.json")],
        "diff": ["diff", str(old), str(new)],
        "gate": ["gate", "--baseline", str(old), "--current", str(new)],
    }[verb]
    r = run_probe(*args, timeout=600)
    r.check(1 if verb == "gate" else 0)
    if verb == "show-json":
        assert (tmp_path / "m.json").read_bytes() == old.read_bytes()
    if verb == "gate":
        assert "regression" in r.out
