"""Static sections of a matrix: a ``probe scan`` document reduced to files, arches and verdicts, and a
published static-predictions file read as a matrix of ``predicted`` cells."""

from __future__ import annotations

from typing import Any

from probe import __version__
from probe.matrix.scan_predictions import iter_verdict_rows, predicted_cell_dicts
from probe.matrix.schema import (
    Cell,
    Matrix,
    Provenance,
    StaticFile,
    StaticKernel,
    StaticSection,
    StaticVerdict,
)


def _labels(values: Any) -> list[str]:
    if isinstance(values, str):
        return [values]
    if isinstance(values, dict):  # {"sass": [...], "ptx": [...]}
        out: list[str] = []
        for v in values.values():
            out.extend(_labels(v))
        return out
    if isinstance(values, (list, tuple)):
        out = []
        for v in values:
            if isinstance(v, str):
                out.append(v)
            elif isinstance(v, dict) and (lab := v.get("label") or v.get("arch") or v.get("target")):
                out.append(str(lab))
        return out
    return []


def _file_arches(entry: dict[str, Any]) -> list[str]:
    if isinstance(entry.get("entries"), list):  # a `probe scan` FileRecord
        return sorted(
            {
                str(e["arch"])
                for e in entry["entries"]
                if isinstance(e, dict) and e.get("arch") and e.get("kind") in ("sass", "ptx")
            }
        )
    for key in ("arches", "targets", "codes"):
        if key in entry:
            return sorted(set(_labels(entry[key])))
    return sorted(set(_labels(entry.get("sass", [])) + _labels(entry.get("ptx", []))))


def static_from_scan(data: dict[str, Any] | StaticSection) -> StaticSection:
    """Reduce a ``probe scan`` JSON document (or an already-reduced section) to the static section.

    Accepted input shapes: ``files`` as a list of ``{path|file, package?, arches|targets|sass+ptx,
    kernels?: [{name, arches|targets}]}``; ``backends``/``verdicts`` either as ``{backend: {target:
    {verdict, reason, via?, files?}}}`` or a list of ``{backend, target, verdict, reason}``.
    """
    if isinstance(data, StaticSection):
        return data
    if isinstance(data.get("scan"), dict):  # {"scan": ScanReport, "backends": backend view, ...}
        merged = dict(data["scan"])
        merged.update({k: v for k, v in data.items() if k != "scan"})
        data = merged
    files: list[StaticFile] = []
    for entry in data.get("files", []) or []:
        if not isinstance(entry, dict):
            continue
        path = entry.get("path") or entry.get("file") or entry.get("name")
        if not path:
            continue
        kernels = []
        raw_kernels = entry.get("kernels")
        for k in raw_kernels if isinstance(raw_kernels, list) else []:
            if isinstance(k, dict) and k.get("name"):
                kernels.append(StaticKernel(name=str(k["name"]), arches=sorted(set(_file_arches(k)))))
        files.append(
            StaticFile(
                path=str(path),
                package=entry.get("package") or entry.get("distribution"),
                arches=_file_arches(entry),
                kernels=kernels,
                error=entry.get("error"),
            )
        )
    table: dict[str, dict[str, StaticVerdict]] = {}
    rows = list(iter_verdict_rows(data))
    for backend, target, v in rows:
        table.setdefault(backend, {})[target] = StaticVerdict(
            verdict=v["verdict"],
            reason=str(v.get("reason") or v["verdict"]),
            via=v.get("via"),
            files=[str(f) for f in v.get("files", []) or []],
        )
    targets = [t.get("target") if isinstance(t, dict) else t for t in data.get("targets") or []] or sorted(
        {t for per in table.values() for t in per}
    )
    packages = data.get("packages") or data.get("backend_catalog_reference") or {}
    if isinstance(packages, list):
        packages = {str(x.get("name")): str(x.get("version")) for x in packages if isinstance(x, dict)}
    if not packages and isinstance(data.get("provenance"), list):  # static predictions: the scanned wheels
        packages = {
            str(w.get("package")): str(w.get("wheel")) for w in data["provenance"] if isinstance(w, dict)
        }
    source = data.get("source") or data.get("name")
    return StaticSection(
        source=str(source) if source else None,
        packages={str(k): str(v) for k, v in packages.items()},
        targets=[str(t) for t in targets],
        files=files,
        backends=table,
    )


def predicted_cells(static: StaticSection) -> list[Cell]:
    """One ``predicted`` cell per backend and target of the static verdict table."""
    return [Cell.model_validate(c) for c in predicted_cell_dicts(static.model_dump())]


def static_predictions_matrix(doc: dict[str, Any]) -> Matrix:
    """A published static-predictions file (``matrices/static/``) as a matrix of ``predicted`` cells.

    No GPU ran anything: ``provenance.gpu`` is empty and every cell carries its own ``gpu_sm``.
    """
    gen: dict[str, Any] = doc["generated_by"] if isinstance(doc.get("generated_by"), dict) else {}
    static = static_from_scan(doc)
    prov = Provenance(
        created_at=str(doc.get("created_at") or "unknown"),
        probe_version=str(gen.get("probe_version") or __version__),
        label=str(doc.get("name") or "static predictions"),
        note=(str(doc.get("what")) if doc.get("what") else None),
    )
    return Matrix(provenance=prov, static=static, cells=predicted_cells(static))
