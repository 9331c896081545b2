"""Cells of a matrix read from a file, kept on disk: a sequence that reads (and validates) a cell
when it is asked for, plus a summary of every cell held in memory.

``load_document`` (:mod:`probe.matrix.io`) returns matrices whose ``cells`` is a :class:`LazyCells`:
code that iterates ``m.cells`` gets full :class:`~probe.matrix.schema.Cell` objects one at a time
(re-read from the file, ~25 µs each), code that only compares or lists cells uses
:func:`summaries` (dicts of every field but ``log_excerpt``, ``params`` and the nested part of
``details``, shared strings stored once: ~1 KB a cell). Cells built in memory (``probe run``,
tests) are plain lists; :func:`summaries` and :func:`raw_text` work on both.
"""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

from probe.errors import BadInputError
from probe.matrix.stream import CellSpan
from probe.outcomes import Outcome

if TYPE_CHECKING:
    from probe.matrix.schema import Cell

_NOT_AS_DUMPED = re.compile(r"[^\n -~]")  # what json.dumps(ensure_ascii=True) never writes raw
#: fields a summary leaves out (bulky, and used only where the full cell is read)
BULKY = ("log_excerpt", "params", "details")
#: the entries of ``details`` a summary keeps: what the recommender reads (the ELF-scan verdict and
#: its code, the quant variant, vLLM's expert class and selection, where vLLM's check refused, what
#: vLLM's own log picked per layer in an engine run) and a merge's history
#: (tests/hostile/test_big_matrices.py checks the recommender answers the same)
SUMMARY_DETAILS = frozenset(
    (
        "verdict",
        "via",
        "variant",
        "experts_class",
        "selected",
        "file",
        "line",
        "check",
        "superseded",
        "engine",
    )
)

#: the entries of ``params`` a summary keeps: an engine run's parallel layout beyond its ``tp`` field
#: (the recommender answers a question from runs at the asked layout)
SUMMARY_PARAMS = frozenset(("enable_expert_parallel", "data_parallel_size"))


def summary(cell: Cell, strings: dict[str, str] | None = None) -> dict[str, Any]:
    """The cell as a JSON-shaped dict without its bulky fields: fields that are not None or empty,
    ``outcome`` as its string, of ``details`` the :data:`SUMMARY_DETAILS` and of ``params`` the
    :data:`SUMMARY_PARAMS`. ``strings``: where equal strings are stored once (root causes and hints
    repeat)."""
    out: dict[str, Any] = {}
    for name, v in cell.__dict__.items():  # (the fields; faster than one getattr each)
        if v is None or v == {} or v == [] or name in BULKY:
            continue
        if strings is not None and type(v) is str and name != "id":
            v = strings.setdefault(v, v)
        out[name] = v
    out["outcome"] = cell.outcome.value
    det = {k: v for k, v in cell.details.items() if k in SUMMARY_DETAILS}
    if det:
        out["details"] = det
    par = {k: v for k, v in cell.params.items() if k in SUMMARY_PARAMS}
    if par:
        out["params"] = par
    return out


_DEFAULTS: dict[str, Any] = {}


def summary_cell(s: dict[str, Any]) -> Cell:
    """A read-only ``Cell`` from a summary, its other fields at their defaults (not validated again:
    it was when the file was read). Built as ``Cell.model_construct`` builds one, with the defaults
    resolved once (``model_construct`` resolves each every time: 25-120 µs a cell)."""
    from probe.matrix.schema import Cell

    if not _DEFAULTS:
        _DEFAULTS.update((n, f.get_default(call_default_factory=True)) for n, f in Cell.model_fields.items())
    values = {**_DEFAULTS, **s, "outcome": Outcome(s["outcome"])}
    cell = Cell.__new__(Cell)
    object.__setattr__(cell, "__dict__", values)
    object.__setattr__(cell, "__pydantic_fields_set__", set(s))
    object.__setattr__(cell, "__pydantic_extra__", None)
    object.__setattr__(cell, "__pydantic_private__", None)
    return cell


class CellFile:
    """The open matrix file cells are read from again (held open: a file replaced by a rename —
    ``merge -o`` onto one of its inputs — is still the one read)."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd
        self._closer = weakref.finalize(self, os.close, fd)

    def read(self, span: CellSpan) -> bytes:
        data = os.pread(self.fd, span.length, span.offset)
        if len(data) != span.length:
            raise BadInputError(f"{self.path}: changed while being read")
        return data


class StoredCells(Sequence["Cell"]):
    """Cells not held in memory: read one at a time, with their summaries at hand."""

    summaries: list[dict[str, Any]]

    def raw(self, i: int) -> str | None:
        """The text of cell ``i`` as ``json.dumps(cell, indent=1)`` would write it, when it can be
        copied from where it is stored (None: dump the cell)."""
        return None

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same cells (a list read whole, another file's)."""
        if isinstance(other, (list, tuple, StoredCells)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


class LazyCells(StoredCells):
    """The cells of one ``cells`` array of a file (see the module docstring)."""

    def __init__(self, file: CellFile, spans: list[CellSpan], summaries: list[dict[str, Any]]) -> None:
        self.file = file
        self.spans = spans
        self.summaries = summaries

    def __len__(self) -> int:
        return len(self.spans)

    @overload
    def __getitem__(self, i: int) -> Cell: ...
    @overload
    def __getitem__(self, i: slice) -> list[Cell]: ...
    def __getitem__(self, i: int | slice) -> Cell | list[Cell]:
        if isinstance(i, slice):
            return [self._load(s) for s in self.spans[i]]
        return self._load(self.spans[i])

    def __iter__(self) -> Iterator[Cell]:
        for span in self.spans:
            yield self._load(span)

    def _load(self, span: CellSpan) -> Cell:
        from pydantic import ValidationError

        from probe.matrix.schema import Cell

        try:
            return Cell.model_validate_json(self.file.read(span))
        except ValidationError as exc:
            raise BadInputError(
                f"{self.file.path}: changed while being read ({exc.error_count()} errors)"
            ) from None

    def raw(self, i: int) -> str | None:
        """The cell's text with its indentation removed, when the file lays it out as probe writes
        (indented one space a level, printable ASCII only: ``json.dumps`` escapes the rest)."""
        span = self.spans[i]
        if span.indent is None:
            return None
        text = self.file.read(span).decode("utf-8")
        if _NOT_AS_DUMPED.search(text):
            return None
        return text.replace("\n" + span.indent, "\n") if span.indent else text


def summaries(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """The summaries of ``cells`` (read when the file was, or made now for cells in memory)."""
    if isinstance(cells, StoredCells):
        return cells.summaries
    strings: dict[str, str] = {}
    return [summary(c, strings) for c in cells]


def summary_cells(cells: Sequence[Cell]) -> Iterator[Cell]:
    """The cells as ``Cell`` objects without their bulky fields, one at a time: what a rendering
    of many cells iterates (cells in memory are yielded as they are)."""
    if isinstance(cells, StoredCells):
        for s in cells.summaries:
            yield summary_cell(s)
    else:
        yield from cells
