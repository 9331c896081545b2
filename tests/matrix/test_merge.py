"""``probe merge``: one column per GPU + image; runs of the same column are unioned."""

from __future__ import annotations

from probe.matrix.fleet import merge
from probe.matrix.schema import Cell, Matrix
from probe.outcomes import Outcome

from . import fixtures


def _run(created_at: str, cells: list[Cell], image: str = "vllm:0.26") -> Matrix:
    base = fixtures.matrix("baseline")
    prov = base.provenance.model_copy(update={"created_at": created_at, "image": image, "label": None})
    return base.model_copy(update={"provenance": prov, "cells": cells})


def _cell(cid: str, outcome: Outcome, cause: str | None = None) -> Cell:
    return Cell(id=cid, kind="moe", backend="marlin", quant="nvfp4", outcome=outcome, root_cause=cause)


def test_two_runs_of_one_gpu_and_image_are_one_column():
    first = _run("2026-11-01T00:00:00Z", [_cell("a", Outcome.OK), _cell("b", Outcome.OK)])
    second = _run("2026-11-02T00:00:00Z", [_cell("b", Outcome.CRASHED, "exit 255"), _cell("c", Outcome.OK)])
    fleet = merge([second, first])
    assert len(fleet.columns) == 1 and "#2" not in fleet.columns[0]
    (col,) = fleet.matrices
    by_id = {c.id: c for c in col.cells}
    assert sorted(by_id) == ["a", "b", "c"]
    assert by_id["b"].outcome is Outcome.CRASHED  # the newer run wins ...
    assert by_id["b"].details["superseded"] == [  # ... and the older result is kept
        {"run": "2026-11-01T00:00:00Z", "outcome": "ok", "root_cause": None}
    ]
    assert col.provenance.created_at == "2026-11-02T00:00:00Z"
    assert "union of 2 runs" in (col.provenance.note or "")


def test_other_images_stay_separate_columns():
    a = _run("2026-11-01T00:00:00Z", [_cell("a", Outcome.OK)], image="vllm:0.26")
    b = _run("2026-11-01T00:00:00Z", [_cell("a", Outcome.CRASHED)], image="vllm:0.33")
    fleet = merge([a, b])
    assert len(fleet.columns) == 2
    assert [m.cells[0].outcome for m in fleet.matrices] == [Outcome.OK, Outcome.CRASHED]


def test_identical_results_carry_no_history():
    a = _run("2026-11-01T00:00:00Z", [_cell("a", Outcome.OK)])
    b = _run("2026-11-03T00:00:00Z", [_cell("a", Outcome.OK)])
    (col,) = merge([a, b]).matrices
    assert "superseded" not in col.cells[0].details
