"""The backend view: which vLLM / FlashInfer kernel backend can load on which GPU, from a scan report.

For every backend of ``probe/data/backends.json`` (see :mod:`probe.catalog.backends`), every variant
and every target GPU, each requirement gets a verdict and the variant takes the weakest one:

==================  ========================================================================
verdict             meaning
==================  ========================================================================
``sass``            every needed kernel has SASS built exactly for the target
``sass-compatible`` SASS of a lower minor of the same major, or of the target's family (``f``)
``ptx-jit``         only PTX loads: the driver JIT-compiles it at first load (slow start; the
                    driver must know the PTX ISA version)
``pure``            nothing is compiled ahead of time (Triton / CuTe-DSL Python): compiled at run
                    time by the package's own compiler, which must know the target
``jit``             compiled at first use by a toolchain that must be present (nvcc/ptxas, NVRTC),
                    unless a prebuilt module for the target was found
``not-installed``   the files the backend needs were not among the scanned files
``none``            a needed kernel has no code the target can load, or vLLM refuses the target
==================  ========================================================================

The vLLM gate (the compute-capability rule vLLM applies before it tries the kernels) is applied on
top: a backend whose code exists but that vLLM refuses on the target is ``none`` with the gate as the
reason, and ``code_verdict`` keeps what the code alone would allow.

Entry points: :func:`backend_view` (structured cells), :func:`backend_table` (one row per
backend/variant, one column per target; what ``probe scan --backends`` prints), :func:`backends_json`
and the renderers :func:`render_table`, :func:`render_markdown`.
"""

from __future__ import annotations

from collections.abc import Sequence

from probe.arch.backend_rules import RANK, BackendRow, Index, evaluate_variant
from probe.arch.records import FileRecord, ScanReport
from probe.catalog.backends import BackendCatalog
from probe.catalog.backends import catalog as backend_catalog
from probe.catalog.gpus import Gpu

__all__ = [
    "LEGEND",
    "RANK",
    "SCHEMA_VERSION",
    "VERDICTS",
    "BackendRow",
    "backend_table",
    "backend_table_from_cells",
    "backend_view",
    "backends_json",
    "render_markdown",
    "render_table",
]

SCHEMA_VERSION = 1

VERDICTS: tuple[str, ...] = tuple(sorted(RANK, key=RANK.__getitem__, reverse=True))
LEGEND: dict[str, str] = {
    "sass": "every needed kernel has SASS built for exactly this GPU",
    "sass-compatible": "SASS of a lower minor of the same major, or of the GPU's family (f)",
    "ptx-jit": "only PTX loads: the driver JIT-compiles it at first load (driver must know the PTX ISA)",
    "pure": "nothing compiled ahead of time (Triton / CuTe DSL): compiled at run time by the package itself",
    "jit": "compiled at first use by a toolchain that must be present (nvcc/ptxas, NVRTC)",
    "not-installed": "the files the backend needs were not among the scanned files",
    "none": "a needed kernel has no code this GPU can load",
    "none (gate)": "the code would load but vLLM refuses this GPU (its compute-capability gate)",
    "*": "judged per file: kernel names not read (--kernels); other kernels of the file may differ",
}


def _files_of(report: ScanReport | Sequence[FileRecord]) -> list[FileRecord]:
    return list(report.files) if isinstance(report, ScanReport) else list(report)


def backend_view(
    report: ScanReport | Sequence[FileRecord],
    gpus: Sequence[Gpu],
    *,
    backends: Sequence[str] | None = None,
    catalog: BackendCatalog | None = None,
    all_variants: bool = True,
) -> list[BackendRow]:
    """Every (backend, variant, target) cell. ``backends`` filters by id, vLLM name or kind."""
    cat = catalog or backend_catalog()
    idx = Index(_files_of(report))
    cells: list[BackendRow] = []
    for b in cat.scanned(list(backends) if backends else None):
        assert b.scan is not None  # scanned() returns records with a scan rule
        variants = b.scan.variants if all_variants else b.scan.variants[:1]
        for i, v in enumerate(variants):
            for gpu in gpus:
                cells.append(evaluate_variant(b, v, idx, gpu, primary=(i == 0)))
    return cells


# ---------------------------------------------------------------------------------------------
# renderers


def _row_key(c: BackendRow) -> tuple[str, str]:
    return (c.backend, c.variant)


def _rows(cells: Sequence[BackendRow]) -> list[tuple[BackendRow, dict[str, BackendRow]]]:
    order: list[tuple[str, str]] = []
    by_row: dict[tuple[str, str], dict[str, BackendRow]] = {}
    first: dict[tuple[str, str], BackendRow] = {}
    for c in cells:
        k = _row_key(c)
        if k not in by_row:
            order.append(k)
            by_row[k] = {}
            first[k] = c
        by_row[k][c.target] = c
    return [(first[k], by_row[k]) for k in order]


def _targets(cells: Sequence[BackendRow]) -> list[str]:
    out: list[str] = []
    for c in cells:
        if c.target not in out:
            out.append(c.target)
    return out


def _short(c: BackendRow) -> str:
    if c.verdict == "none" and not c.gate_ok and c.code_verdict != "none":
        return "none (gate)"
    if any(r.file_level and r.required for r in c.requirements):
        return c.verdict + "*"  # judged per file: kernel names were not read (no --kernels)
    return c.verdict


def _backend_label(c: BackendRow) -> str:
    label = c.name
    if c.backend.startswith("attention.flash_attn."):
        label = f"{c.name} ({c.backend.rsplit('.', 1)[1].upper()})"
    if not c.primary or c.variant != "default":
        label += f" [{c.variant}]"
    return label


def backend_table(
    report: ScanReport | Sequence[FileRecord], gpus: Sequence[Gpu], *, backends: Sequence[str] | None = None
) -> list[dict[str, str]]:
    """One row per backend (and variant), one column per target: the short verdicts.

    ``none (gate)``: the code would load but vLLM refuses the target. A trailing ``*`` marks a
    verdict judged per file because the scan did not read kernel names (``--kernels``): other
    kernels of the same file may have code the backend's kernels lack (Marlin MoE in ``_moe_C``).
    """
    return backend_table_from_cells(backend_view(report, gpus, backends=backends))


def backends_json(
    report: ScanReport | Sequence[FileRecord], gpus: Sequence[Gpu], *, backends: Sequence[str] | None = None
) -> dict[str, object]:
    """Self-describing JSON: the verdict legend, the targets, the table and every cell with evidence."""
    cells = backend_view(report, gpus, backends=backends)
    return {
        "schema_version": SCHEMA_VERSION,
        "verdicts": list(VERDICTS),
        "legend": LEGEND,
        "targets": [{"target": g.label, "cc": g.cc, "name": g.names[0]} for g in gpus],
        "table": backend_table_from_cells(cells),
        "cells": [c.to_dict() for c in cells],
    }


def backend_table_from_cells(cells: Sequence[BackendRow]) -> list[dict[str, str]]:
    targets = _targets(cells)
    rows: list[dict[str, str]] = []
    for first, by_target in _rows(cells):
        row = {"kind": first.kind, "backend": _backend_label(first)}
        for t in targets:
            row[t] = _short(by_target[t]) if t in by_target else ""
        rows.append(row)
    return rows


def render_table(rows: Sequence[dict[str, str]], *, fmt: str = "simple") -> str:
    from tabulate import tabulate

    if not rows:
        return "(no backends)"
    return tabulate(rows, headers="keys", tablefmt=fmt)


def render_markdown(rows: Sequence[dict[str, str]]) -> str:
    return render_table(rows, fmt="github")
