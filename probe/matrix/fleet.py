"""``probe merge``: several matrices (GPUs / images) into one fleet document, one column each.

Runs of the same GPU and the same image (same GPU name and compute capability, same image name /
digest, same library versions, same explicit label) are one column: their cells are unioned. A
cell measured in both keeps the newer run's result (``provenance.created_at``); the older outcome
is kept in ``details.superseded`` so nothing measured is lost.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator, Sequence
from typing import Any, overload

from probe import __version__
from probe.errors import UsageError
from probe.matrix.lazy import StoredCells, summaries
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


class MergedCells(StoredCells):
    """The union of several runs' cells (see :func:`union`), read from where they are stored: cell
    ``i`` is cell ``j`` of run ``r``, with its ``details.superseded`` history when it replaced a
    different outcome."""

    def __init__(
        self, runs: list[Sequence[Cell]], order: list[tuple[int, int]], history: dict[int, list[Any]]
    ) -> None:
        self.runs = runs
        self.order = order
        self.history = history
        self.summaries = []
        run_sums = [summaries(r) for r in runs]
        for i, (r, j) in enumerate(order):
            s = run_sums[r][j]
            if i in history:
                s = {**s, "details": {**s.get("details", {}), "superseded": history[i]}}
            self.summaries.append(s)

    def __len__(self) -> int:
        return len(self.order)

    @overload
    def __getitem__(self, i: int) -> Cell: ...
    @overload
    def __getitem__(self, i: slice) -> list[Cell]: ...
    def __getitem__(self, i: int | slice) -> Cell | list[Cell]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        r, j = self.order[i]
        cell = self.runs[r][j]
        if i in self.history:
            cell = cell.model_copy(update={"details": {**cell.details, "superseded": self.history[i]}})
        return cell

    def __iter__(self) -> Iterator[Cell]:
        for i in range(len(self)):
            yield self[i]

    def raw(self, i: int) -> str | None:
        r, j = self.order[i]
        source = self.runs[r]
        return source.raw(j) if i not in self.history and isinstance(source, StoredCells) else None


def union(runs: list[Matrix]) -> Matrix:
    """One matrix from several runs of one column; newer runs win per cell id.

    A cell both measured keeps the newer result; when the outcome or root cause differs, the older
    one goes into ``details.superseded`` (after the history it already carried). Works on the cells'
    summaries: the cells themselves are read only when the union is written or iterated."""
    if len(runs) == 1:
        return runs[0]
    ordered = sorted(runs, key=lambda m: m.provenance.created_at)
    pos: dict[str, int] = {}
    order: list[tuple[int, int]] = []
    history: dict[int, list[Any]] = {}
    now: list[tuple[str, str | None, Any, str]] = []  # per cell: outcome, root cause, its history, run
    for r, run in enumerate(ordered):
        for j, s in enumerate(summaries(run.cells)):
            p = pos.get(s["id"])
            hist = None
            if p is None:
                p = pos[s["id"]] = len(order)
                order.append((r, j))
                now.append(("", None, None, ""))
            else:
                outcome, cause, old_hist, old_run = now[p]
                if outcome != s["outcome"] or cause != s.get("root_cause"):
                    hist = [
                        *(old_hist if isinstance(old_hist, list) else []),
                        _superseded(outcome, cause, old_run),
                    ]
                order[p] = (r, j)
            if hist is None:
                history.pop(p, None)
            else:
                history[p] = hist
            own = hist if hist is not None else (s.get("details") or {}).get("superseded")
            now[p] = (s["outcome"], s.get("root_cause"), own, run.provenance.created_at)
    cells = MergedCells([m.cells for m in ordered], order, history)
    return _union_matrix(ordered, cells)


def _superseded(outcome: str, root_cause: str | None, run: str) -> dict[str, Any]:
    return {"run": run, "outcome": outcome, "root_cause": root_cause}


def _union_matrix(ordered: list[Matrix], cells: MergedCells) -> Matrix:
    newest = ordered[-1]
    note = f"union of {len(ordered)} runs: " + ", ".join(m.provenance.created_at for m in ordered)
    if newest.provenance.note:
        note = f"{newest.provenance.note}; {note}"
    static = next((m.static for m in reversed(ordered) if m.static is not None), None)
    statuses = {m.run.status for m in ordered}
    run_info = newest.run.model_copy(update={"status": "complete" if statuses == {"complete"} else "partial"})
    return newest.model_copy(
        update={
            "cells": cells,
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
