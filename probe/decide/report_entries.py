"""New field reports: from a log (``probe report add``), from a fleet's own ``probe run`` (``probe
reports --from-run``), and the user file they are appended to (never the packaged base).

A log goes through the crash classifier (:mod:`probe.sandbox.classifier`: outcome, the decisive line,
the signature rule); a run's failing cells are grouped one report per kind x backend (x FA
version) x quant, with how many of the measured shapes failed. Every entry is checked by the same
rules as the packaged base (:mod:`probe.reports.rules`) and by its pydantic model before it
is written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from probe.catalog import datafiles
from probe.catalog.gpus import parse_target
from probe.errors import BadInputError, OptionError
from probe.outcomes import OUTCOME_HELP, Outcome
from probe.reports import vocab
from probe.reports.base import provenance_versions
from probe.reports.record import PACKAGED
from probe.reports.rules import FIELDS, SCHEMA_VERSION, report_problems, uniqueness_problems

ABOUT = "Field reports of this site (probe report add / probe reports --from-run); schema: docs/reports.md"


@dataclass(frozen=True)
class LogReport:
    """What ``probe report add`` knows besides the log."""

    gpu: str
    backend: str
    vllm: str | None = None
    model: str | None = None
    url: str | None = None
    citation: str | None = None
    kind: str | None = None
    quant: str | None = None
    fa_version: int | None = None
    versions: dict[str, str] = field(default_factory=dict)
    features: dict[str, Any] = field(default_factory=dict)
    works_with: tuple[str, ...] = ()
    model_specific: bool | None = None
    today: str = field(default_factory=lambda: date.today().isoformat())


def _kind_of(backend: str, kind: str | None) -> str:
    if kind:
        return kind
    parts = backend.split("+")
    if len(parts) > 1:
        return "engine"
    for k in ("moe", "attention", "gemm", "sampler", "comm", "compile"):
        if backend in vocab.backends(k) or backend.upper() in vocab.backends(k):
            return k
    raise OptionError("kind", f"cannot tell the kind of backend {backend!r}", hint="pass --kind")


def _versions(pairs: dict[str, str]) -> tuple[dict[str, list[str]], str | None]:
    """Exact versions per package, and the rest as a note."""
    out: dict[str, list[str]] = {}
    notes = []
    for pkg, text in pairs.items():
        exact, note = vocab.split_version(pkg, text)
        if exact:
            out[pkg] = [exact]
        if note:
            notes.append(note)
    return out, "; ".join(notes) or None


def _classify(path: Path) -> Any:
    from probe.sandbox.classifier import classify_stream
    from probe.sandbox.loginput import open_log

    stream, _size = open_log(str(path))  # a regular file only (a FIFO or /dev/zero is refused unread)
    try:
        with stream as fh:
            return classify_stream(fh)
    except (OSError, EOFError) as exc:
        raise BadInputError(f"cannot read {path}: {exc}") from exc


def _one_line(text: str | None, limit: int = 300) -> str | None:
    if not text:
        return None
    line = " ".join(str(text).split())
    return line[: limit - 1] + "…" if len(line) > limit else line


def _outcome(value: str, degraded: bool) -> str:
    return "degraded" if value == Outcome.OK.value and degraded else value


def _symptom(outcome: str, phase: str | None, degraded_reasons: Iterable[str] = ()) -> str:
    if outcome == "degraded":
        return "ran, but degraded: " + ("; ".join(degraded_reasons) or "slower than expected")
    try:
        words = OUTCOME_HELP[Outcome(outcome)]
    except (ValueError, KeyError):
        words = outcome
    return words + (f" (phase: {phase})" if phase else "")


def entry_from_log(log: Path, info: LogReport) -> dict[str, Any]:
    """A report entry from a log and what the user says about it (checked; ``BadInputError`` /
    ``OptionError`` when it is not valid)."""
    v = _classify(log)
    gpu = parse_target(info.gpu).sm
    kind = _kind_of(info.backend, info.kind)
    backend = vocab.normal_backend(kind, info.backend)[1]
    outcome = _outcome(v.outcome.value, v.degraded)
    versions, text = _versions({**info.versions, **({"vllm": info.vllm} if info.vllm else {})})
    digest = hashlib.sha1(f"{v.root_cause}|{log.name}".encode()).hexdigest()[:8]
    entry: dict[str, Any] = {
        "id": f"local-{info.today}-sm{gpu}-{backend.replace('+', '-')}-{outcome}-{digest}",
        "source": info.url,
        "citation": info.citation or (None if info.url else f"log {log.name}"),
        "date": info.today,
        "seen_in": "vllm",
        "gpus": [gpu],
        "kind": kind,
        "backend": backend,
        "fa_version": info.fa_version,
        "quant": vocab.normal_quant(info.quant),
        "features": dict(info.features),
        "models": [info.model] if info.model else [],
        "versions": versions,
        "versions_text": text,
        "open_as_of": info.today if outcome != "ok" else None,
        "outcome": outcome,
        "symptom": _symptom(outcome, v.phase, v.degraded_reasons),
        "root_cause": _one_line(v.root_cause or v.hint) or "not established by the log",
        "works_with": list(info.works_with),
        "log_line": _one_line(v.root_cause),
        "phase": v.phase,
        "checked": f"classified by probe from {log.name}"
        + (f" (line {v.line_number}, rule {v.signature})" if v.line_number else ""),
    }
    general = outcome in vocab.GENERAL_OUTCOMES or outcome == "ok"
    entry["model_specific"] = (not general) if info.model_specific is None else info.model_specific
    return _checked({k: x for k, x in entry.items() if x not in (None, [], {}) or k == "source"})


def _checked(entry: dict[str, Any]) -> dict[str, Any]:
    entry = {k: entry[k] for k in FIELDS if k in entry}
    problems = report_problems(entry)
    if problems:
        raise BadInputError(f"report {entry.get('id')}: " + "; ".join(problems))
    from pydantic import ValidationError

    from probe.reports.report_schema import ReportModel

    try:
        ReportModel.model_validate(entry)
    except ValidationError as exc:
        raise BadInputError(f"report {entry.get('id')}: {exc}") from exc
    return entry


# ------------------------------------------------------------------ the user's file


def read_user_file(path: Path) -> dict[str, Any]:
    """The user's report file (a new, empty one when it does not exist yet)."""
    if not path.exists():
        return {"schema_version": SCHEMA_VERSION, "about": ABOUT, "reports": []}
    from probe.reports.base import read_report_file

    read_report_file(path)  # checked: BadInputError when it is not a valid report file
    from probe.userfile import read_json

    doc: dict[str, Any] = read_json(path, what="report file")
    return doc


def append_entries(path: Path, entries: list[dict[str, Any]]) -> int:
    """Append checked entries to the user file at ``path`` (not the packaged base); an entry whose id
    is already there gets a ``-2``, ``-3`` … suffix. Returns how many were written."""
    if path.resolve() == (datafiles.DATA / "reports.json").resolve():
        raise OptionError("out", f"refusing to write to the packaged base ({PACKAGED})")
    doc = read_user_file(path)
    ids = {d["id"] for d in doc["reports"]}
    for e in entries:
        base, n = e["id"], 2
        while e["id"] in ids:
            e["id"], n = f"{base}-{n}", n + 1
        ids.add(e["id"])
        doc["reports"].append(e)
    problems = uniqueness_problems(doc["reports"])
    if problems:
        raise BadInputError(f"{path}: " + "; ".join(problems), hint="this report is already in the file")
    from probe.matrix.io import write_text_atomic

    write_text_atomic(path, json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    return len(entries)


# ------------------------------------------------------------------ a fleet's own run


def _load_run(path: Path) -> list[Any]:
    """The matrices of a matrix / fleet file, or the one a journal's cells make."""
    from probe.matrix.io import load_document
    from probe.matrix.schema import Fleet

    if path.suffix == ".json":
        doc = load_document(path)
        return list(doc.matrices) if isinstance(doc, Fleet) else [doc]
    from probe.matrix.build import build_matrix
    from probe.sandbox.journal import read_journal

    if path.suffix == ".gz":  # published journals are gzipped
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            plain = Path(tmp) / path.stem
            from probe.sandbox.journal import MAX_JOURNAL
            from probe.userfile import read_bytes

            plain.write_bytes(read_bytes(path, what="journal", limit=MAX_JOURNAL, gz=True))
            _, results, _ = read_journal(plain)
    else:
        _, results, _ = read_journal(path)
    if not results:
        raise BadInputError(f"{path}: not a matrix file and no journal cells in it")
    return [build_matrix(results, provenance={})]


def _with_facts(m: Any, gpu_sm: int | None, versions: dict[str, str]) -> Any:
    """The matrix with the GPU and versions the user named where the run does not record them
    (a journal without its import cell)."""
    from probe.matrix.schema import GpuInfo

    p = m.provenance
    gpu = p.gpu if p.gpu is not None and p.gpu.sm is not None else (GpuInfo(sm=gpu_sm) if gpu_sm else p.gpu)
    known = p.versions.model_dump()
    fill = {k: v for k, v in versions.items() if not known.get(k)}
    prov = p.model_copy(update={"gpu": gpu, "versions": p.versions.model_copy(update=fill)})
    return m.model_copy(update={"provenance": prov})


def _group_key(c: Any) -> tuple[Any, ...]:
    kind = getattr(c.kind, "value", c.kind)
    return kind, c.backend or "", c.fa_version, c.quant


def _run_entry(m: Any, cells: list[Any], total: int, where: dict[str, str | None]) -> dict[str, Any]:
    first = cells[0]
    p = m.provenance
    kind, backend, fa, quant = _group_key(first)
    outcome = _outcome(first.outcome.value, first.degraded)
    day = (p.created_at or "")[:10] or date.today().isoformat()
    versions, text = _versions(provenance_versions(p.versions.model_dump()))
    models = sorted({c.model for c in cells if c.model})
    shapes = f"{len(cells)} of {total} measured cells" if total > 1 else "the measured cell"
    return {
        "id": f"run-{day}-sm{p.gpu.sm}-{kind}-{backend.replace('+', '-')}"
        + (f"-fa{fa}" if fa else "")
        + (f"-{quant}" if quant else ""),
        "source": where.get("url"),
        "citation": None if where.get("url") else f"probe run {where['path']} ({m.column_label()})",
        "date": day,
        "seen_in": "vllm",
        "gpus": [p.gpu.sm],
        "gpu_names": [p.gpu.name] if p.gpu.name else [],
        "kind": kind if kind in vocab.KINDS else "other",
        "backend": backend,
        "fa_version": fa,
        "quant": quant,
        "features": {"tp": first.tp} if first.tp else {},
        "models": models,
        "model_specific": outcome not in vocab.GENERAL_OUTCOMES,
        "versions": versions,
        "versions_text": text or (f"image {p.image}" if p.image else None),
        "open_as_of": day,
        "outcome": outcome,
        "symptom": f"{_symptom(outcome, first.phase, first.degraded_reasons)}: {shapes}",
        "root_cause": _one_line(first.root_cause or first.hint or "; ".join(first.degraded_reasons))
        or "not established by the run",
        "log_line": _one_line(first.root_cause),
        "phase": first.phase,
        "checked": f"measured by probe run {p.probe_version} (cell {first.id}"
        + (f", image {p.image_digest}" if p.image_digest else "")
        + ")",
    }


def entries_from_run(
    path: Path, url: str | None = None, gpu_sm: int | None = None, versions: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """One report per kind x backend (x FA version) x quant that failed (or ran degraded) in the
    measured cells of a matrix, fleet or journal; each checked. Clean refusals (``unsupported``) and
    cells run with vLLM's own pick (``auto``) are left out."""
    out = []
    for m in _load_run(path):
        m = _with_facts(m, gpu_sm, versions or {})
        if m.provenance.gpu is None or m.provenance.gpu.sm is None:
            raise BadInputError(f"{path}: the run does not say which GPU it measured", hint="pass --gpu")
        groups: dict[tuple[Any, ...], list[Any]] = {}
        for c in m.cells:
            named = c.backend and "auto" not in str(c.backend).split("+")  # not vLLM's own pick
            if c.evidence == "measured" and named and getattr(c.kind, "value", c.kind) != "import":
                groups.setdefault(_group_key(c), []).append(c)
        for cells in groups.values():
            # a clean refusal is what vLLM's own check says (``probe predict``): not a field report
            bad = [c for c in cells if (c.outcome.failed and c.outcome.value != "unsupported") or c.degraded]
            if bad:
                entry = _run_entry(m, bad, len(cells), {"url": url, "path": path.name})
                out.append(
                    _checked({k: x for k, x in entry.items() if x not in (None, [], {}) or k == "source"})
                )
    return out
