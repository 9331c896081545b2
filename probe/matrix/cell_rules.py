"""The rules a matrix's cells obey beyond their field types, pydantic-free.

One definition, two users: :mod:`probe.matrix.schema` (the full pydantic validation of ``show`` /
``gate`` / ``diff`` / ``merge``) and the recommender's fast JSON loader (``probe recommend`` must
answer in well under 0.2 s, so it cannot build pydantic models of a 3 MB matrix).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from probe.outcomes import Outcome

OUTCOMES = frozenset(o.value for o in Outcome)


def duplicate_id(ids: Iterable[str]) -> str | None:
    """The first id that occurs twice, or None."""
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            return i
        seen.add(i)
    return None


def bad_number(wall_s: Any, peak_rss_mb: Any, timings: Any) -> str | None:
    """Why a cell's measured numbers cannot be compared (None: they can): a time, a memory or a speed
    that is not a finite number >= 0 (NaN compares false with everything: a gate would pass it)."""
    import math

    named = [("wall_s", wall_s), ("peak_rss_mb", peak_rss_mb)]
    named += list(timings.items()) if isinstance(timings, dict) else []
    for name, v in named:
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if not math.isfinite(v) or v < 0:
            where = name if name in ("wall_s", "peak_rss_mb") else f"timings.{name}"
            return f"{where} is {v!r}: a time, memory or speed is a finite number >= 0"
    return None


def missing_citation(evidence: str | None, citation: str | None) -> bool:
    """A field report (``reported`` cell) must cite its source."""
    return evidence == "reported" and not citation


def measured_sm_conflict(cell: dict[str, Any], gpu_sm: int | None) -> bool:
    """A measured cell names another GPU than its matrix's provenance."""
    return (
        cell.get("evidence", "measured") == "measured"
        and gpu_sm is not None
        and cell.get("gpu_sm") not in (None, gpu_sm)
    )


def check_cell_dicts(cells: Any) -> list[dict[str, Any]]:
    """Structural checks of a matrix's ``cells`` read as plain JSON (ValueError when broken): a list
    of objects with unique string ids, known outcomes, and citations on field reports."""
    if not isinstance(cells, list):
        raise ValueError("'cells' must be a list")
    seen: set[str] = set()
    for c in cells:  # cell by cell, so that the first broken cell is the one named
        if not isinstance(c, dict) or not isinstance(c.get("id"), str):
            raise ValueError("every cell needs an 'id'")
        if c["id"] in seen:  # the rule of duplicate_id, checked as the cells stream by
            raise ValueError(f"duplicate cell id {c['id']!r}")
        seen.add(c["id"])
        if c.get("outcome") not in OUTCOMES:
            raise ValueError(
                f"cell {c['id']!r} has outcome {c.get('outcome')!r}, not one of {', '.join(sorted(OUTCOMES))}"
            )
        if missing_citation(c.get("evidence", "measured"), c.get("citation")):
            raise ValueError(f"reported cell {c['id']!r} has no citation")
    return cells
