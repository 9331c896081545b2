"""The report base as OSV records (https://ossf.github.io/osv-schema/), and back.

One OSV record per report: ``affected`` holds one entry per PyPI package the report names versions of,
its range as OSV writes it (``introduced``, then ``fixed`` or ``last_affected``; an open report's range is
``introduced`` alone) and the exact versions it was seen on; what OSV has no field for — the GPUs, the
backend, the quant, the conditions (``features``), the outcome, the packages outside PyPI (CUDA, the
driver) — is in ``database_specific``. :func:`from_osv` reads such a record back into a report, so an OSV
export can be given to ``--reports`` (``recommend``, ``gate``) as the base it came from.
"""

from __future__ import annotations

import re
from typing import Any

from probe.reports.record import Report, report_from_dict
from probe.reports.vocab import FIELDS

OSV_SCHEMA_VERSION = "1.6.0"
PREFIX = "PROBE-"
#: report packages that are PyPI distributions (the rest go to ``database_specific.versions``)
PYPI = {
    "vllm": "vllm",
    "flashinfer": "flashinfer-python",
    "torch": "torch",
    "triton": "triton",
    "flash_attn": "flash-attn",
    "flash_attn_4": "flash-attn-4",
    "sglang": "sglang",
    "tensorrt_llm": "tensorrt-llm",
    "cutlass_dsl": "nvidia-cutlass-dsl",
    "transformers": "transformers",
}
_PACKAGE_OF = {name: pkg for pkg, name in PYPI.items()}
_RANGE_FIELDS = ("versions", "introduced_in", "fixed_in", "last_affected")
#: report fields kept in ``database_specific`` as they are
_SPECIFIC = tuple(f for f in FIELDS if f not in (*_RANGE_FIELDS, "id", "source", "also"))


def osv_id(report_id: str) -> str:
    return PREFIX + re.sub(r"[^A-Za-z0-9._-]+", "-", report_id)


def _range(r: Report, pkg: str) -> dict[str, Any]:
    events: list[dict[str, str]] = [{"introduced": r.introduced_in.get(pkg, "0")}]
    if pkg in r.fixed_in:
        events.append({"fixed": r.fixed_in[pkg]})
    elif pkg in r.last_affected:
        events.append({"last_affected": r.last_affected[pkg]})
    return {"type": "ECOSYSTEM", "events": events}


def _affected(r: Report) -> list[dict[str, Any]]:
    named = [
        p for p in dict.fromkeys([*r.versions, *r.introduced_in, *r.fixed_in, *r.last_affected]) if p in PYPI
    ]
    return [
        {
            "package": {"ecosystem": "PyPI", "name": PYPI[pkg]},
            "ranges": [_range(r, pkg)],
            "versions": list(r.versions.get(pkg, ())),
        }
        for pkg in named
    ]


def _references(r: Report) -> list[dict[str, str]]:
    refs = [{"type": "REPORT", "url": r.source}] if r.source else []
    if r.fixed_in.get("pr"):
        refs.append({"type": "FIX", "url": r.fixed_in["pr"]})
    return refs + [{"type": "WEB", "url": u} for u in r.also if u.startswith("https://")]


def to_osv(r: Report) -> dict[str, Any]:
    """One report as an OSV record."""
    d = r.to_dict()
    other = {k: {p: v for p, v in d.get(k, {}).items() if p not in PYPI} for k in _RANGE_FIELDS}
    specific = {k: d[k] for k in _SPECIFIC if k in d}
    specific.update({"probe_id": r.id, "gpus": [f"sm_{g}" for g in r.gpus]})
    specific.update({f"other_{k}": v for k, v in other.items() if v})
    if "pr" in r.fixed_in and not any(p in PYPI for p in r.fixed_in if p != "pr"):
        specific["fixed_by"] = r.fixed_in["pr"]  # merged, release not recorded: never "open"
    stamp = f"{r.date}T00:00:00Z" if len(r.date) == 10 else f"{r.date[:4]}-{r.date[5:7] or '01'}-01T00:00:00Z"
    return {
        "schema_version": OSV_SCHEMA_VERSION,
        "id": osv_id(r.id),
        "published": stamp,
        "modified": f"{r.open_as_of}T00:00:00Z" if r.open_as_of and len(r.open_as_of) == 10 else stamp,
        "summary": r.symptom[:200],
        "details": f"{r.symptom}\n\nRoot cause: {r.root_cause}",
        "affected": _affected(r),
        "references": _references(r),
        "database_specific": specific,
    }


def osv_document(reports: list[Report]) -> list[dict[str, Any]]:
    """The base as a list of OSV records (what ``probe reports --format osv`` prints)."""
    return [to_osv(r) for r in reports]


def is_osv(doc: Any) -> bool:
    """Whether a parsed file is an OSV export of probe's reports."""
    first = doc[0] if isinstance(doc, list) and doc else doc
    return isinstance(first, dict) and "probe_id" in (first.get("database_specific") or {})


def _ranges_back(rec: dict[str, Any], d: dict[str, Any]) -> None:
    for aff in rec.get("affected") or []:
        pkg = _PACKAGE_OF.get((aff.get("package") or {}).get("name", ""))
        if pkg is None:
            continue
        if aff.get("versions"):
            d["versions"][pkg] = list(aff["versions"])
        for rng in aff.get("ranges") or []:
            for ev in rng.get("events") or []:
                if ev.get("introduced") not in (None, "0"):
                    d["introduced_in"][pkg] = ev["introduced"]
                if "fixed" in ev:
                    d["fixed_in"][pkg] = ev["fixed"]
                if "last_affected" in ev:
                    d["last_affected"][pkg] = ev["last_affected"]


def from_osv(rec: dict[str, Any], origin: str) -> Report:
    """A report read back from one of probe's OSV records."""
    spec = dict(rec.get("database_specific") or {})
    d: dict[str, Any] = {k: spec[k] for k in _SPECIFIC if k in spec}
    d.update(id=spec["probe_id"], date=spec.get("date") or str(rec.get("published", ""))[:10])
    d["gpus"] = [int(str(g).removeprefix("sm_")) for g in spec.get("gpus", [])]
    refs = rec.get("references") or []
    d["source"] = next((x["url"] for x in refs if x.get("type") == "REPORT"), None)
    d["also"] = [x["url"] for x in refs if x.get("type") == "WEB"]
    for k in _RANGE_FIELDS:
        d[k] = dict(spec.get(f"other_{k}") or {})
    _ranges_back(rec, d)
    fix_pr = next((x["url"] for x in refs if x.get("type") == "FIX"), None) or spec.get("fixed_by")
    if fix_pr:
        d["fixed_in"]["pr"] = fix_pr
    return report_from_dict({k: v for k, v in d.items() if v not in ({}, None) or k == "source"}, origin)
