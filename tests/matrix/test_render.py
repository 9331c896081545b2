"""show: table, Markdown, JUnit, HTML (string-level checks; the browser test renders the page)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from probe.matrix.fleet import merge
from probe.matrix.io import load_document
from probe.matrix.render_html import render_html
from probe.matrix.render_junit import render_junit
from probe.matrix.render_text import render_markdown, render_table
from probe.outcomes import Outcome


def test_table_and_markdown(data_dir, probe_cli):
    doc = load_document(data_dir / "baseline.json")
    table = render_table(doc)
    assert "NVIDIA Thor sm_110" in table and "api_mismatch" in table and "0.41 ms b1" in table
    md = render_markdown(doc)
    assert "| kind" in md and "<script>" not in md and "&lt;script&gt;" in md
    r = probe_cli("show", str(data_dir / "baseline.json"), "--format", "md")
    assert r.returncode == 0 and r.stdout == md


def test_junit_one_case_per_cell(data_dir, tmp_path, probe_cli):
    doc = load_document(data_dir / "baseline.json")
    out = tmp_path / "cells.xml"
    assert (
        probe_cli("show", str(data_dir / "baseline.json"), "--format", "junit", "-o", str(out)).returncode
        == 0
    )
    root = ET.fromstring(out.read_text())
    cases = root.findall(".//testcase")
    assert len(cases) == len(doc.cells)
    failed = {c.get("name").split(" ")[0] for c in cases if c.find("failure") is not None}
    assert failed == {c.id for c in doc.cells if c.outcome.failed}
    assert root.get("failures") == str(len(failed))
    assert render_junit(doc) == out.read_text()


def test_junit_skipped_and_control_chars(data_dir):
    doc = load_document(data_dir / "baseline.json")
    cells = list(doc.cells)
    cells[0] = cells[0].model_copy(update={"outcome": Outcome.SKIPPED, "root_cause": "no vLLM\x1b[31m here"})
    xml = render_junit(doc.model_copy(update={"cells": cells}))
    root = ET.fromstring(xml)
    assert len(root.findall(".//skipped")) == 1


def test_html_escapes_log_strings(data_dir):
    html = render_html(load_document(data_dir / "baseline.json"))
    assert "<script>" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "http://" not in html and "https://" not in html  # no external resources
    for outcome in ("o-ok", "o-crashed", "o-api_mismatch", "o-no_kernel_image", "o-device_fault"):
        assert outcome in html


def test_fleet_renders(data_dir):
    fleet = merge(
        [load_document(data_dir / "baseline.json"), load_document(data_dir / "current-regression.json")]
    )
    assert len(fleet.columns) == 2 and fleet.columns[0] != fleet.columns[1]
    table = render_table(fleet)
    assert fleet.columns[0] in table and fleet.columns[1] in table
    html = render_html(fleet)
    assert html.count('data-cell-id="moe/cutlass/nvfp4/E=256/H=3072/I=1024/tp=1"') == 2
    again = merge([fleet, load_document(data_dir / "baseline.json")])  # same GPU + image: one column
    assert again.columns == fleet.columns


def test_engine_args_tell_variants_apart():
    from probe.decide.compare import RecChange
    from probe.matrix.render_text import backend_label
    from probe.matrix.schema import Cell

    plain = Cell(id="e1", kind="engine", moe_backend="marlin", attention_backend="TRITON_ATTN", outcome="ok")
    gdn = plain.model_copy(update={"id": "e2", "engine_args": {"gdn_prefill_backend": "triton"}})
    assert backend_label(plain) == "marlin+TRITON_ATTN"
    assert backend_label(gdn) == "marlin+TRITON_ATTN gdn_prefill_backend=triton"
    old = {"moe_backend": "marlin", "attention_backend": "TRITON_ATTN", "engine_args": {}}
    new = {**old, "engine_args": {"gdn_prefill_backend": "triton"}}
    rc = RecChange("122b", old, new)
    assert rc.pair("old") != rc.pair("new") and rc.pair("new").endswith("gdn_prefill_backend=triton")
