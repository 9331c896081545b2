"""The report base as OSV records: every record follows the OSV format's rules, and reads back as the
report it came from (``--reports`` takes an export, so ``gate`` and ``recommend`` read the same records)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from probe.reports.base import packaged_reports, read_report_file
from probe.reports.osv import osv_document, to_osv

# The OSV format's rules (https://ossf.github.io/osv-schema/, "validation/schema.json" of ossf/osv-schema),
# restated: required id and modified, RFC 3339 times, affected packages with an ecosystem and a name,
# ranges of a known type whose events start with an introduced one, hold one kind of event each, and
# never end both at a fix and at a last affected release; references of a known type with a URL.
_EVENT = {
    "type": "object",
    "oneOf": [
        {"required": ["introduced"], "properties": {"introduced": {"type": "string"}}},
        {"required": ["fixed"], "properties": {"fixed": {"type": "string"}}},
        {"required": ["last_affected"], "properties": {"last_affected": {"type": "string"}}},
        {"required": ["limit"], "properties": {"limit": {"type": "string"}}},
    ],
}
_RANGE = {
    "type": "object",
    "required": ["type", "events"],
    "properties": {
        "type": {"enum": ["GIT", "SEMVER", "ECOSYSTEM"]},
        "events": {"type": "array", "minItems": 1, "items": _EVENT, "contains": {"required": ["introduced"]}},
    },
    "if": {"properties": {"events": {"contains": {"required": ["last_affected"]}}}},
    "then": {"not": {"properties": {"events": {"contains": {"required": ["fixed"]}}}}},
}
OSV_RULES = {
    "type": "object",
    "required": ["id", "modified"],
    "properties": {
        "schema_version": {"type": "string"},
        "id": {"type": "string", "pattern": r"^[A-Za-z0-9._-]+$"},
        "modified": {"type": "string", "format": "date-time"},
        "published": {"type": "string", "format": "date-time"},
        "summary": {"type": "string"},
        "details": {"type": "string"},
        "affected": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "package": {
                        "type": "object",
                        "required": ["ecosystem", "name"],
                        "properties": {"ecosystem": {"type": "string"}, "name": {"type": "string"}},
                    },
                    "ranges": {"type": "array", "items": _RANGE},
                    "versions": {"type": "array", "items": {"type": "string"}},
                    "database_specific": {"type": "object"},
                },
            },
        },
        "references": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["type", "url"],
                "properties": {
                    "type": {
                        "enum": [
                            "ADVISORY",
                            "ARTICLE",
                            "DETECTION",
                            "DISCUSSION",
                            "REPORT",
                            "FIX",
                            "INTRODUCED",
                            "GIT",
                            "PACKAGE",
                            "EVIDENCE",
                            "WEB",
                        ]
                    },
                    "url": {"type": "string", "format": "uri"},
                },
            },
        },
        "database_specific": {"type": "object"},
    },
}
CHECKER = jsonschema.Draft202012Validator(OSV_RULES, format_checker=jsonschema.FormatChecker())


def test_every_packaged_report_is_a_valid_osv_record():
    records = osv_document(list(packaged_reports()))
    assert len(records) == len(packaged_reports()) >= 400
    problems = [f"{r['id']}: {e.message}" for r in records for e in CHECKER.iter_errors(r)]
    assert problems == []
    assert len({r["id"] for r in records}) == len(records)


def test_the_rules_catch_a_broken_record():
    rec = to_osv(packaged_reports()[0])
    events = [{"fixed": "1"}, {"last_affected": "2"}]
    rec["affected"] = [
        {
            "package": {"ecosystem": "PyPI", "name": "vllm"},
            "ranges": [{"type": "ECOSYSTEM", "events": events}],
        }
    ]
    assert list(CHECKER.iter_errors(rec))  # no introduced event, and both a fix and a last affected


@pytest.mark.parametrize("pick", ["fixed", "open", "last_affected"])
def test_an_export_reads_back_as_the_reports_it_came_from(tmp_path, pick):
    chosen = {
        "fixed": lambda r: bool(r.fixed_in),
        "open": lambda r: r.open_as_of is not None,
        "last_affected": lambda r: bool(r.last_affected),
    }[pick]
    reports = [r for r in packaged_reports() if chosen(r)][:25]
    assert reports
    path = tmp_path / "base.osv.json"
    path.write_text(json.dumps(osv_document(reports)))
    back = read_report_file(path)
    assert [b.to_dict() for b in back] == [r.to_dict() for r in reports]


def test_a_merged_fix_without_a_release_is_never_open():
    merged = [r for r in packaged_reports() if "pr" in r.fixed_in and len(r.fixed_in) == 1]
    for r in merged:
        rec = to_osv(r)
        assert rec["database_specific"].get("fixed_by") == r.fixed_in["pr"]
        assert "open_as_of" not in rec["database_specific"]


def test_the_cli_exports_what_applies(probe_cli):
    r = probe_cli("reports", "--gpu", "sm_121", "--format", "osv")
    assert r.returncode == 0, r.stderr
    records = json.loads(r.stdout)
    assert records and all("sm_121" in rec["database_specific"]["gpus"] for rec in records)
