"""``probe merge``: several matrices (GPUs / images) into one fleet document, one column each.

Runs of the same GPU and the same image (same GPU name and compute capability, same image name /
digest, same library versions, same explicit label) are one column: their cells are unioned. A
cell measured in both keeps the newer run's result (``provenance.created_at``); the older outcome
is kept in ``details.superseded`` so nothing measured is lost.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from probe import __version__
from probe.errors import UsageError
from probe.matrix.schema import Cell, Fleet, Matrix

ColumnKey = tuple[Any, ...]


def column_key(m: Matrix) -> ColumnKey:
    """What makes two matrices the same column: GPU, image and library versions."""
    p = m.provenance
    gpu = p.gpu
    versions = p.versions.model_dump(exclude_none=True)
    return (
        p.label,
        gpu.name if gpu else None,
        gpu.sm if gpu else None,
        p.image,
        p.image_digest,
        tuple(sorted((k, str(v)) for k, v in versions.items() if k != "driver")),
        m.static is not None and m.provenance.gpu is None,
    )


def _superseded(old: Cell, old_run: str) -> dict[str, Any]:
    return {"run": old_run, "outcome": old.outcome.value, "root_cause": old.root_cause}


def union(runs: list[Matrix]) -> Matrix:
    """One matrix from several runs of one column; newer runs win per cell id."""
    if len(runs) == 1:
        return runs[0]
    ordered = sorted(runs, key=lambda m: m.provenance.created_at)
    cells: dict[str, Cell] = {}
    cell_run: dict[str, str] = {}
    for run in ordered:
        for cell in run.cells:
            old = cells.get(cell.id)
            if old is not None and (old.outcome != cell.outcome or old.root_cause != cell.root_cause):
                history = [*old.details.get("superseded", []), _superseded(old, cell_run[cell.id])]
                cell = cell.model_copy(update={"details": {**cell.details, "superseded": history}})
            cells[cell.id] = cell
            cell_run[cell.id] = run.provenance.created_at
    newest = ordered[-1]
    note = f"union of {len(ordered)} runs: " + ", ".join(m.provenance.created_at for m in ordered)
    if newest.provenance.note:
        note = f"{newest.provenance.note}; {note}"
    static = next((m.static for m in reversed(ordered) if m.static is not None), None)
    statuses = {m.run.status for m in ordered}
    run_info = newest.run.model_copy(update={"status": "complete" if statuses == {"complete"} else "partial"})
    return newest.model_copy(
        update={
            "cells": list(cells.values()),
            "static": static,
            "run": run_info,
            "provenance": newest.provenance.model_copy(update={"note": note}),
        }
    )


def _unique_labels(members: list[Matrix]) -> list[str]:
    labels: list[str] = []
    for m in members:
        base = m.column_label()
        label, n = base, 2
        while label in labels:
            label, n = f"{base} #{n}", n + 1
        labels.append(label)
    return labels


def merge(docs: list[Matrix | Fleet]) -> Fleet:
    """Flatten matrices and fleets into one fleet, one column per GPU + image.

    Matrices of the same column (see :func:`column_key`) are unioned; columns that still share a
    label (same GPU name, different images without names) get ``#2`` …
    """
    members: list[Matrix] = []
    for d in docs:
        members.extend(d.matrices if isinstance(d, Fleet) else [d])
    if not members:
        raise UsageError("nothing to merge")
    groups: dict[ColumnKey, list[Matrix]] = {}
    for m in members:
        groups.setdefault(column_key(m), []).append(m)
    columns = [union(runs) for runs in groups.values()]
    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return Fleet(created_at=now, probe_version=__version__, columns=_unique_labels(columns), matrices=columns)
