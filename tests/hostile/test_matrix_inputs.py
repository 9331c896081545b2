"""``show`` / ``merge`` / ``diff`` / ``gate`` (and ``recommend --matrix``) on hostile matrices and
paths, as whole processes: the documented exit code with the reason, never a traceback, ``internal
error`` or exit 4 for a bad file or path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.hostile.harness import run_probe
from tests.hostile.inputs import MATRIX

VERBS = ("show", "merge", "diff", "gate", "recommend")


def _args(verb: str, path: Path, tmp: Path) -> list[str]:
    return {
        "show": ["show", str(path)],
        "merge": ["merge", str(path), "-o", str(tmp / "fleet.json")],
        "diff": ["diff", str(path), str(MATRIX)],
        "gate": ["gate", "--baseline", str(MATRIX), "--current", str(path)],
        "recommend": ["recommend", "--model", "122b", "--matrix", str(path)],
    }[verb]


def _deep(tmp: Path, where: str, indent: int | None) -> Path:
    """The fixture matrix with a value nested 5,000 levels deep in a cell, in the provenance, or as
    the whole document (indented as probe writes, or compact)."""
    if where == "document":
        text = "[" * 5000 + "]" * 5000
    else:
        doc = json.loads(MATRIX.read_text())
        if where == "cell":
            doc["cells"][0]["details"]["x"] = "DEEP"
        else:
            doc["provenance"]["versions"]["x"] = "DEEP"
        text = json.dumps(doc, indent=indent).replace('"DEEP"', "[" * 5000 + "]" * 5000)
    p = tmp / f"deep-{where}-{indent}.json"
    p.write_text(text)
    return p


@pytest.mark.slow
@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize(
    ("where", "indent"), [("cell", 1), ("cell", None), ("header", 1), ("document", None)]
)
def test_json_nested_thousands_deep_is_exit_6(tmp_path, verb, where, indent):
    """Before: ``internal error: RecursionError`` (exit 4). Ceiling: 512 MB, 30 s."""
    path = _deep(tmp_path, where, indent)
    r = run_probe(*_args(verb, path, tmp_path), timeout=30)
    r.check(6, seconds=30)
    assert str(path) in r.err and ("nested more than 200 levels deep" in r.err or "JSON object" in r.err)


@pytest.mark.slow
@pytest.mark.parametrize(
    "content", [b"\xff\xfe{}", b'{"schema_version": 1, "cells": [1]}', b'{"a": 1} {"b": 2}']
)
def test_not_utf8_not_a_cell_extra_data(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    for verb in ("show", "merge", "diff", "gate"):
        r = run_probe(*_args(verb, path, tmp_path), timeout=30)
        r.check(6, seconds=30)


@pytest.mark.slow
def test_a_fifo_as_a_matrix_is_not_read(tmp_path):
    path = tmp_path / "m.json"
    os.mkfifo(path)
    for verb in ("show", "merge", "diff", "gate"):
        r = run_probe(*_args(verb, path, tmp_path), timeout=20)
        r.check(6, seconds=20)
        assert "not a regular file" in r.err


@pytest.mark.slow
def test_empty_matrix_is_nothing_to_compare(tmp_path):
    """A matrix with no cells is valid: ``gate`` has nothing to compare (exit 3, before: 4),
    ``show`` and ``merge`` work on it."""
    doc = json.loads(MATRIX.read_text())
    doc["cells"] = []
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(doc, indent=1))
    for base, cur in ((MATRIX, empty), (empty, MATRIX), (empty, empty)):
        r = run_probe("gate", "--baseline", str(base), "--current", str(cur), timeout=30)
        r.check(3, seconds=30)
        assert "empty" in r.out
    run_probe("show", str(empty), timeout=30).check(0)
    run_probe("merge", str(empty), "-o", str(tmp_path / "f.json"), timeout=30).check(0)


@pytest.mark.slow
def test_output_paths_that_cannot_be_written_are_usage_errors(tmp_path):
    """``gate --junit`` into a missing folder, ``--summary`` / ``show -o`` / ``merge -o`` naming a
    folder: exit 2 naming the flag (before: internal error)."""
    gate = ["gate", "--baseline", str(MATRIX), "--current", str(MATRIX)]
    cases = [
        ([*gate, "--junit", str(tmp_path / "no" / "such" / "gate.xml")], "--junit", "does not exist"),
        ([*gate, "--summary", str(tmp_path)], "--summary", "is a folder"),
        (["show", str(MATRIX), "-o", str(tmp_path)], "-o", "is a folder"),
        (["merge", str(MATRIX), "-o", str(tmp_path)], "-o", "is a folder"),
        (["show", str(MATRIX), "-o", str(tmp_path / "missing" / "x.html")], "-o", "does not exist"),
    ]
    for args, flag, why in cases:
        r = run_probe(*args, timeout=30)
        r.check(2, seconds=30)
        assert flag in r.err and why in r.err, r.err


@pytest.mark.slow
def test_global_flags_after_the_verb(tmp_path):
    for args in (["show", str(MATRIX), "--debug"], ["show", "-v", str(MATRIX)], ["gpus", "--debug", "-v"]):
        run_probe(*args, timeout=30).check(0)
    r = run_probe("show", str(tmp_path / "nope.json"), "--debug", timeout=30)
    assert r.rc != 0 and "Traceback" in r.err  # --debug after the verb works: the traceback is shown
