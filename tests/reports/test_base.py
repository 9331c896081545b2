"""The packaged field-report base (probe/data/reports.json): schema, citations, URLs, no duplicates,
well-formed version ranges, one-line log lines; and the checks themselves reject what they should."""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

import pytest
from pydantic import ValidationError

from probe.reports import vocab
from probe.reports.base import check_packaged, packaged_reports
from probe.reports.report_schema import ReportsFile, validated
from probe.reports.rules import URL, duplicate_key, file_problems, report_problems
from probe.versions import version_key


def _raw() -> dict[str, Any]:
    return json.loads(resources.files("probe.data").joinpath("reports.json").read_text())


def test_the_base_validates_with_the_pydantic_model_and_the_fast_reader():
    model = validated()
    check_packaged()
    fast = packaged_reports()
    assert len(model.reports) == len(fast) >= 150
    assert file_problems(_raw()) == []


def test_every_report_is_cited_with_an_outcome_and_versions_or_a_note():
    for r in packaged_reports():
        assert r.source or r.citation, r.id
        assert r.outcome in vocab.OUTCOMES, r.id
        assert r.symptom and r.root_cause and r.checked, r.id
    cited = [r for r in packaged_reports() if r.source and URL.match(r.source)]
    assert len(cited) >= 150
    with_versions = [r for r in packaged_reports() if r.versions or r.versions_text]
    assert len(with_versions) >= 150


def test_urls_are_well_formed_https_addresses():
    for r in packaged_reports():
        for url in [r.source, *r.also, r.fixed_in.get("pr"), r.introduced_in.get("pr")]:
            if url is not None:
                assert URL.match(url), (r.id, url)


def test_no_two_entries_say_the_same_thing():
    raw = _raw()["reports"]
    keys = [duplicate_key(d) for d in raw if duplicate_key(d)]
    assert len(keys) == len(set(keys))
    assert len({d["id"] for d in raw}) == len(raw)


def test_version_ranges_are_well_formed():
    for r in packaged_reports():
        for pkg, seen in r.versions.items():
            keys = [version_key(v) for v in seen]
            assert all(k is not None for k in keys), (r.id, pkg, seen)
            fixed, intro = r.fixed_in.get(pkg), r.introduced_in.get(pkg)
            if fixed:
                assert all(k < version_key(fixed) for k in keys), (r.id, pkg)
            if intro:
                assert all(k >= version_key(intro) for k in keys), (r.id, pkg)
        if r.outcome != "ok":
            assert bool(r.fixed_in) != bool(r.open_as_of), r.id  # fixed, or open as of a date


def test_log_lines_are_single_lines():
    lines = [r.log_line for r in packaged_reports() if r.log_line is not None]
    assert lines and all("\n" not in x and "\r" not in x and 0 < len(x) <= 300 for x in lines)


def test_the_base_spans_the_gpus_and_backend_families():
    sms = {sm for r in packaged_reports() for sm in r.gpus}
    assert {80, 86, 89, 90, 100, 103, 110, 120, 121} <= sms
    families = {vocab.backend_family(r.kind, r.backend) for r in packaged_reports()}
    assert {"Marlin MoE", "CUTLASS MoE", "FlashInfer MoE", "Triton MoE", "DeepGEMM MoE"} <= families
    assert {"FlashAttention", "FlashInfer attention", "Triton attention", "MLA"} <= families


# ------------------------------------------------------------------ the checks reject


def _entry(**change: Any) -> dict[str, Any]:
    base = copy.deepcopy(next(d for d in _raw()["reports"] if d.get("fixed_in") and d.get("versions")))
    base.update(change)
    return base


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"source": "http://github.com/x"}, "is not an https URL"),
        ({"also": ["not a url"]}, "'also' must be a list of https URLs"),
        ({"date": "2026-02-30"}, "is not YYYY-MM-DD"),
        ({"outcome": "exploded"}, "outcome 'exploded'"),
        ({"log_line": "first line\nsecond line"}, "log_line must be a single line"),
        ({"backend": "warp_drive"}, "is not a"),
        ({"gpus": ["sm_120"]}, "compute capabilities as integers"),
        ({"gpus": [42]}, "not in the GPU catalog"),
        ({"versions": {"vllm": ["main"]}}, "is not an exact version"),
        ({"versions": {"vllm": ["0.12.0"]}, "fixed_in": {"vllm": "0.12.0"}}, "is not after a version"),
        ({"open_as_of": "2026-11-24"}, "exactly one of 'fixed_in' and 'open_as_of'"),
        ({"features": {"warp": True}}, "unknown feature"),
        ({"seen_in": "llama.cpp"}, "seen_in"),
        ({"symptom": ""}, "missing 'symptom'"),
    ],
)
def test_a_bad_entry_is_rejected_by_both_readers(change, problem):
    entry = _entry(**change)
    assert any(problem in p for p in report_problems(entry)), report_problems(entry)
    doc = {"schema_version": 3, "reports": [entry]}
    with pytest.raises(ValidationError):
        ReportsFile.model_validate(doc)


def test_a_repeated_thread_and_backend_is_a_duplicate():
    a = _entry()
    b = {**copy.deepcopy(a), "id": a["id"] + "-again"}
    problems = file_problems({"schema_version": 3, "reports": [a, b]})
    assert any("same source, backend, GPUs and quant" in p for p in problems)
    with pytest.raises(ValidationError, match="same source"):
        ReportsFile.model_validate({"schema_version": 3, "reports": [a, b]})


def test_another_schema_version_is_refused():
    assert "schema_version 2 is not supported" in file_problems({"schema_version": 2, "reports": []})[0]


def test_the_docs_show_the_current_coverage_table():
    from pathlib import Path

    from probe.decide.report_views import coverage_markdown

    page = (Path(__file__).resolve().parents[2] / "docs" / "reports.md").read_text()
    table = coverage_markdown(packaged_reports())
    assert table.strip() in page, "regenerate: probe reports --coverage --format md (docs/reports.md)"
