"""Evidence loading, one source at a time, and the cell rules shared with the matrix schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from probe.errors import BadInputError
from probe.matrix import cell_rules
from probe.recommend.sources import load_evidence, matrix_cells, reported_cells, scan_document_cells

ROOT = Path(__file__).resolve().parents[2]


def _doc(cells: list[dict[str, Any]], static: dict[str, Any] | None = None) -> dict[str, Any]:
    prov = {
        "created_at": "x",
        "probe_version": "0",
        "gpu": {"sm": 90, "name": "H200"},
        "versions": {"vllm": "0.26.0"},
    }
    return {"schema_version": 1, "kind": "matrix", "provenance": prov, "cells": cells, "static": static}


def _cell(i: str, **kw: Any) -> dict[str, Any]:
    return {"id": i, "kind": "moe", "outcome": "ok", **kw}


def test_matrix_cells_are_typed_with_their_origin():
    cells = matrix_cells(_doc([_cell("a")]), Path("m.json"))
    assert len(cells) == 1
    c = cells[0]
    assert (c.source, c.vllm, c.gpu_name, c.evidence, c.get("gpu_sm")) == (
        "m.json",
        "0.26.0",
        "H200",
        "measured",
        90,
    )
    assert not any(k.startswith("_") for k in c.cell)


def test_matrix_static_section_becomes_predicted_cells():
    static = {
        "packages": {"vllm": "0.33.0"},
        "backends": {"marlin": {"sm_120": {"verdict": "sass", "reason": "r"}}},
    }
    cells = matrix_cells(_doc([_cell("a")], static), Path("m.json"))
    predicted = [c for c in cells if c.evidence == "predicted"]
    assert [(c.get("id"), c.get("gpu_sm"), c.vllm) for c in predicted] == [
        ("predicted/marlin/sm_120", 120, "0.33.0")
    ]


def test_other_gpu_without_static_section_is_skipped():
    assert matrix_cells(_doc([_cell("a")]), Path("m.json"), only_sm=120) == []


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ([_cell("a"), _cell("a")], "duplicate cell id 'a'"),
        ([_cell("a", outcome="exploded")], "has outcome 'exploded'"),
        ([_cell("a", evidence="reported")], "reported cell 'a' has no citation"),
        ([{"kind": "moe"}], "every cell needs an 'id'"),
        ([_cell("a", gpu_sm=120)], "is for sm_120 but the provenance GPU is sm_90"),
    ],
)
def test_broken_matrix_is_bad_input(cells, message):
    with pytest.raises(BadInputError, match=message):
        matrix_cells(_doc(cells), Path("m.json"))


@pytest.mark.parametrize(
    "cells",
    [[_cell("a"), _cell("a")], [_cell("a", evidence="reported")], [_cell("a", gpu_sm=120)]],
)
def test_the_schema_enforces_the_same_rules(cells):
    from pydantic import ValidationError

    from probe.matrix.schema import Matrix

    doc = _doc(cells)
    doc.pop("static")
    with pytest.raises(ValidationError):
        Matrix.model_validate(doc)
    with pytest.raises(BadInputError):  # the fast path: cell_rules, as the schema's validators use them
        matrix_cells(doc, Path("m.json"))
    if cells[0].get("gpu_sm") is None:
        with pytest.raises(ValueError):
            cell_rules.check_cell_dicts(cells)


def test_scan_document_cells_take_the_scanned_vllm_version():
    doc = {"kind": "probe.static-predictions", "packages": {"vllm": "0.33.0+cu130"},
           "backends": {"FA3": {"sm_120": {"verdict": "none", "reason": "no sm_120 code"}}}}  # fmt: skip
    (c,) = scan_document_cells(doc, Path("s.json"))
    assert (c.vllm, c.source, c.evidence, c.get("attention_backend"), c.get("fa_version")) == (
        "0.33.0", "s.json", "predicted", "FLASH_ATTN", 3
    )  # fmt: skip
    assert c.failed and c.get("outcome") == "no_kernel_image"


def test_reported_cells_cite_their_source():
    cells = reported_cells()
    assert cells and all(c.evidence == "reported" and c.get("citation") for c in cells)
    assert {c.source for c in cells} == {"probe/data/reports.json"}


def test_load_evidence_reads_folders_and_adds_field_reports(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps(_doc([_cell("a")])))
    (tmp_path / "notes.json").write_text(json.dumps({"hello": 1}))  # not a matrix: skipped
    ev = load_evidence([tmp_path])
    assert ev.files == [str(tmp_path / "m.json")]
    assert [c.get("id") for c in ev.cells if c.evidence == "measured"] == ["a"]
    # the field reports of the measured GPU (sm_90), applied at its vLLM version (0.26.0)
    reported = [c for c in ev.cells if c.evidence == "reported"]
    assert reported and {c.get("gpu_sm") for c in reported} == {90}
    assert len(reported) == len(reported_cells({90: {"vllm": "0.26.0"}}, gpus=[90]))
