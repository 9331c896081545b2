"""The checks every field report passes, on its plain JSON object: one definition, used by the fast
reader (:mod:`probe.reports.base`), by the pydantic model of the file
(:mod:`probe.reports.report_schema`) and by ``probe report add``.

:func:`report_problems` lists what is wrong with one entry (empty: valid); :func:`file_problems` adds
what concerns the file as a whole (schema version, unique ids, no two entries of one thread and
backend).
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from probe.catalog.gpus import catalog
from probe.reports import vocab
from probe.reports.vocab import FIELDS
from probe.versions import version_key

SCHEMA_VERSION = 3
REQUIRED = ("id", "date", "seen_in", "gpus", "kind", "backend", "outcome", "symptom", "root_cause", "checked")
SHAPE_KEYS = ("experts", "top_k", "hidden", "intermediate", "num_heads", "num_kv_heads", "head_dim")
ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+/=-]{2,120}$")
URL = re.compile(r"^https://[A-Za-z0-9.-]+\.[A-Za-z]{2,}(?::\d+)?(?:/[^\s]*)?$")
DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")
LOG_LINE_MAX = 300


def valid_date(text: Any) -> bool:
    """``YYYY-MM-DD`` (or ``YYYY-MM`` / ``YYYY`` when the report gives no day), a real calendar date."""
    if not isinstance(text, str) or not DATE.match(text):
        return False
    parts = [int(x) for x in text.split("-")] + [1, 1]
    try:
        date(parts[0], parts[1], parts[2])
    except ValueError:
        return False
    return 2015 <= parts[0] <= 2100


def _before(a: str, b: str) -> bool:
    """Date ``a`` is before date ``b`` at the precision both give."""
    n = min(len(a), len(b))
    return a[:n] < b[:n]


def _one_line(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and "\n" not in value and "\r" not in value


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, str) and x for x in value)


def _basic_problems(d: dict[str, Any]) -> list[str]:
    out = [f"missing {k!r}" for k in REQUIRED if d.get(k) in (None, "", [])]
    out += [f"unknown field {k!r}" for k in d if k not in FIELDS]
    if d.get("id") is not None and not (isinstance(d["id"], str) and ID.match(d["id"])):
        out.append(f"id {d['id']!r} is not a slug (letters, digits, . _ + / = -)")
    for key in ("symptom", "root_cause", "checked"):
        if d.get(key) is not None and not _one_line(d[key]):
            out.append(f"{key!r} must be one non-empty line")
    if d.get("date") is not None and not valid_date(d["date"]):
        out.append(f"date {d['date']!r} is not YYYY-MM-DD (or YYYY-MM / YYYY)")
    if d.get("seen_in") is not None and d["seen_in"] not in vocab.STACKS:
        out.append(f"seen_in {d['seen_in']!r} is not one of {', '.join(vocab.STACKS)}")
    if d.get("outcome") is not None and d["outcome"] not in vocab.OUTCOMES:
        out.append(f"outcome {d['outcome']!r} is not one of {', '.join(vocab.OUTCOMES)}")
    log_line = d.get("log_line")
    if log_line is not None and not (_one_line(log_line) and len(log_line) <= LOG_LINE_MAX):
        out.append(f"log_line must be a single line of at most {LOG_LINE_MAX} characters")
    return out


def _source_problems(d: dict[str, Any]) -> list[str]:
    out = []
    src = d.get("source")
    if src is None:
        if not _one_line(d.get("citation")):
            out.append("a report without a source URL needs a 'citation'")
    elif not (isinstance(src, str) and URL.match(src)):
        out.append(f"source {src!r} is not an https URL")
    also = d.get("also", [])
    if not _strings(also) or any(not URL.match(u) for u in also):
        out.append("'also' must be a list of https URLs")
    elif src in also or len(set(also)) != len(also):
        out.append("'also' repeats a URL")
    return out


def _gpu_problems(d: dict[str, Any]) -> list[str]:
    gpus = d.get("gpus", [])
    known = {g.sm for g in catalog().gpus}
    if not isinstance(gpus, list) or not all(isinstance(g, int) and not isinstance(g, bool) for g in gpus):
        return ["'gpus' must be a list of compute capabilities as integers (120 for sm_120)"]
    bad = [g for g in gpus if g not in known]
    out = [f"gpus {bad} are not in the GPU catalog"] if bad else []
    if len(set(gpus)) != len(gpus):
        out.append("'gpus' repeats a GPU")
    if not _strings(d.get("gpu_names", [])):
        out.append("'gpu_names' must be a list of names")
    return out


def _backend_problems(d: dict[str, Any]) -> list[str]:
    kind, backend = d.get("kind"), d.get("backend")
    if kind not in vocab.KINDS:
        return [f"kind {kind!r} is not one of {', '.join(vocab.KINDS)}"]
    if not isinstance(backend, str):
        return ["'backend' must be a string"]
    out = [p] if (p := vocab.backend_problem(kind, backend)) else []
    fa = d.get("fa_version")
    if fa is not None and (fa not in (2, 3, 4) or "FLASH_ATTN" not in backend.split("+")):
        out.append("fa_version (2, 3 or 4) only goes with FLASH_ATTN")
    if d.get("quant") is not None and d["quant"] not in vocab.QUANTS:
        out.append(f"quant {d['quant']!r} is not one of {', '.join(vocab.QUANTS)}")
    works = d.get("works_with", [])
    if not _strings(works):
        out.append("'works_with' must be a list of backend names")
    else:
        out += [f"works_with: {w!r} is not a backend name" for w in works if not _works_name(kind, w)]
    return out


def _works_name(kind: str, name: str) -> bool:
    """A backend that worked instead: of the same kind (an engine report: MoE or attention); for the
    other kinds any known backend name or a short lowercase one."""
    if kind in ("moe", "attention"):
        return vocab.backend_problem(kind, name) is None
    if kind == "engine":
        return vocab.backend_problem("engine", name) is None
    known = any(name in vocab.backends(k) for k in ("moe", "attention", "gemm", "sampler", "comm", "compile"))
    return known or vocab.backend_problem("other", name) is None


def _feature_problems(d: dict[str, Any]) -> list[str]:
    feats = d.get("features", {})
    if not isinstance(feats, dict):
        return ["'features' must be an object"]
    out = [p for k, v in feats.items() if (p := vocab.feature_problem(k, v))]
    if not _strings(d.get("models", [])):
        out.append("'models' must be a list of model names")
    if not isinstance(d.get("model_specific", False), bool):
        out.append("'model_specific' must be true or false")
    return out


def _pin_problems(name: str, pin: Any) -> list[str]:
    """``introduced_in`` / ``fixed_in`` / ``last_affected``: {package: exact version, "pr": URL}."""
    if pin is None:
        return []
    if not isinstance(pin, dict) or not pin:
        return [f"{name!r} must be an object of package -> version (and 'pr': URL)"]
    out = []
    for k, v in pin.items():
        if k == "pr":
            if not (isinstance(v, str) and URL.match(v)):
                out.append(f"{name}.pr {v!r} is not an https URL")
        elif k not in vocab.PACKAGES:
            out.append(f"{name}: unknown package {k!r}")
        elif not (isinstance(v, str) and vocab.exact_version(k, v)):
            out.append(f"{name}.{k} {v!r} is not an exact version")
    return out


def _version_problems(d: dict[str, Any]) -> list[str]:
    versions = d.get("versions", {})
    if not isinstance(versions, dict):
        return ["'versions' must be an object of package -> [versions]"]
    out = []
    for pkg, seen in versions.items():
        if pkg not in vocab.PACKAGES:
            out.append(f"versions: unknown package {pkg!r} (known: {', '.join(vocab.PACKAGES)})")
        elif not _strings(seen) or not seen:
            out.append(f"versions.{pkg} must be a non-empty list of version strings")
        else:
            out += [
                f"versions.{pkg}: {v!r} is not an exact version"
                for v in seen
                if not vocab.exact_version(pkg, v)
            ]
    if d.get("versions_text") is not None and not _one_line(d["versions_text"]):
        out.append("'versions_text' must be one line")
    out += _pin_problems("introduced_in", d.get("introduced_in"))
    out += _pin_problems("fixed_in", d.get("fixed_in"))
    out += _pin_problems("last_affected", d.get("last_affected"))
    both = set(d.get("last_affected") or {}) & set(d.get("fixed_in") or {}) - {"pr"}
    if both:  # OSV: a range ends either at its fix or at its last affected release
        out.append(f"last_affected and fixed_in both name {', '.join(sorted(both))}")
    if "pr" in (d.get("last_affected") or {}):
        out.append("last_affected names releases only (a fix PR belongs in fixed_in)")
    return out or _range_problems(d)


def _range_problems(d: dict[str, Any]) -> list[str]:
    """fixed_in after every version seen, introduced_in at or before the first; open xor fixed."""
    out = []
    seen = d.get("versions") or {}
    for name, pin, later in (
        ("fixed_in", d.get("fixed_in"), True),
        ("introduced_in", d.get("introduced_in"), False),
        ("last_affected", d.get("last_affected"), None),
    ):
        for pkg, v in (pin or {}).items():
            keys = [k for s in seen.get(pkg, []) if (k := version_key(s)) is not None] if pkg != "pr" else []
            bound = version_key(v) if pkg != "pr" else None
            if later is None:  # last affected: at or after every version it was seen on
                if bound is not None and keys and max(keys) > bound:
                    out.append(f"{name}.{pkg} {v} is before a version it was seen on")
                continue
            if bound is not None and keys and (min(keys) < bound if not later else max(keys) >= bound):
                out.append(
                    f"{name}.{pkg} {v} is {'not after' if later else 'after'} a version it was seen on"
                )
    failure = d.get("outcome") != "ok"
    open_as_of, fixed = d.get("open_as_of"), d.get("fixed_in")
    if open_as_of is not None and not valid_date(open_as_of):
        out.append(f"open_as_of {open_as_of!r} is not a date")
    elif failure and (open_as_of is None) == (fixed is None):
        out.append("a failure report needs exactly one of 'fixed_in' and 'open_as_of'")
    elif open_as_of and valid_date(d.get("date")) and _before(open_as_of, d["date"]):
        out.append("open_as_of is before the report's date")
    return out


def _extra_problems(d: dict[str, Any]) -> list[str]:
    out = []
    w = d.get("workaround")
    if w is not None:
        ok = isinstance(w, dict) and set(w) <= {"flags", "env", "note"} and w
        if not ok or not _strings(w.get("flags", [])) or not isinstance(w.get("env", {}), dict):
            out.append("'workaround' must be {flags: [...], env: {...}, note: '...'}")
        elif not all(isinstance(k, str) and isinstance(v, str) for k, v in w.get("env", {}).items()):
            out.append("workaround.env must map names to strings")
    shape = d.get("shape")
    if shape is not None and not (isinstance(shape, dict) and set(shape) <= set(SHAPE_KEYS)):
        out.append(f"'shape' takes only {', '.join(SHAPE_KEYS)}")
    timings = d.get("timings")
    if timings is not None and not (
        isinstance(timings, dict) and all(isinstance(v, (int, float)) for v in timings.values())
    ):
        out.append("'timings' must map names to numbers")
    return out


def report_problems(d: Any) -> list[str]:
    """Everything wrong with one report entry (empty: valid)."""
    if not isinstance(d, dict):
        return ["a report is a JSON object"]
    return (
        _basic_problems(d)
        + _source_problems(d)
        + _gpu_problems(d)
        + _backend_problems(d)
        + _feature_problems(d)
        + _version_problems(d)
        + _extra_problems(d)
    )


def duplicate_key(d: dict[str, Any]) -> tuple[str, ...] | None:
    """Two entries with this key say the same thing: one thread, one backend (and FA version) of one
    kind, on the same GPUs and quant. (A thread may give several entries: one per backend, or one per
    GPU x quant it measured — e.g. a regression on sm_90 bf16 and a comparison on sm_120 nvfp4.)"""
    src = d.get("source")
    if not src:
        return None
    gpus = ",".join(str(g) for g in sorted(d.get("gpus") or [], key=str))
    return (
        src,
        str(d.get("kind")),
        str(d.get("backend")),
        str(d.get("fa_version")),
        str(d.get("quant")),
        gpus,
    )


def _name(d: Any, i: int) -> str:
    """An entry's id, else its position."""
    ident = d.get("id") if isinstance(d, dict) else None
    return ident if isinstance(ident, str) else f"#{i}"


def header_problems(doc: Any) -> list[str]:
    """What is wrong with a report file around its entries (the object, the schema version)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("reports"), list):
        return ["a report file is a JSON object with a 'reports' list"]
    if doc.get("schema_version") != SCHEMA_VERSION:
        return [f"schema_version {doc.get('schema_version')!r} is not supported (expected {SCHEMA_VERSION})"]
    return []


def uniqueness_problems(reports: list[Any]) -> list[str]:
    """Repeated ids, and two entries of one thread and backend."""
    out: list[str] = []
    ids: set[str] = set()
    keys: dict[tuple[str, ...], str] = {}
    for i, d in enumerate(reports):
        name = _name(d, i)
        if name in ids:
            out.append(f"{name}: duplicate id")
        ids.add(name)
        key = duplicate_key(d) if isinstance(d, dict) else None
        if key is not None and key in keys:
            out.append(f"{name}: same source, backend, GPUs and quant as {keys[key]}")
        elif key is not None:
            keys[key] = name
    return out


def file_problems(doc: Any) -> list[str]:
    """Everything wrong with a report file: its header, each entry (``<id>: problem``), repeats."""
    head = header_problems(doc)
    if head:
        return head
    out: list[str] = []
    for i, d in enumerate(doc["reports"]):
        out += [f"{_name(d, i)}: {p}" for p in report_problems(d)]
    return out + uniqueness_problems(doc["reports"])
