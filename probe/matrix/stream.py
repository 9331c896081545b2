"""Read a matrix or fleet file cell by cell: the ``cells`` arrays are never held as parsed JSON.

A 200 MB matrix holds ~100,000 cells; parsed whole it takes gigabytes. This reader walks the
document's skeleton instead: every value outside a ``cells`` array (provenance, run, the static
section, a fleet's labels) is parsed as usual, and each cell is validated on its own
(``Cell.model_validate_json`` on the cell's text) and dropped, leaving its byte span in the file
and a summary (:func:`probe.matrix.lazy.summary`) of what ``gate`` / ``diff`` / ``merge`` /
``show`` use. The file is read in windows of a few MiB; memory grows with the number of cells
(~1 KB each), not with their size.

Finding a cell's end costs nothing for a file written by probe (indented: a cell's closing brace
is the first ``}`` at the cell's own indentation, which a JSON string cannot hold — a raw newline
is not allowed in one; the cell text found that way is accepted only if it is one valid JSON
object, which makes the split exact). Any other layout falls back to the standard parser, cell by
cell. JSON nested deeper than :data:`probe.safejson.MAX_DEPTH` anywhere is invalid input.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from probe import safejson

CHUNK = 4 << 20
#: the largest JSON value outside the cells (a provenance, a static section) and the largest cell
MAX_VALUE = 32 << 20
MAX_CELL_TEXT = 4 << 20
#: cells in one document (each keeps ~1.4 KB of summary in memory: 120,000 of them ~170 MB)
MAX_CELLS = 120_000
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class StreamError(ValueError):
    """The document is not valid JSON (or not shaped as a matrix / fleet): the message says where."""


class NotOneObject(ValueError):
    """Raised by a visitor: the text it was given is not one JSON object (parse it another way)."""


@dataclass(frozen=True)
class CellsMarker:
    """Where a streamed ``cells`` array stood in the document: the number of the array."""

    number: int


@dataclass(slots=True)
class CellSpan:
    """Where one cell's text lies in the file, and whether it is indented as probe writes it (one
    space a level: its text can then be copied instead of re-serialised)."""

    offset: int
    length: int
    indent: str | None  # the indentation of the cell's lines when probe's (None: another layout)


@dataclass
class CellArray:
    """One ``cells`` array: the spans of its cells, in order."""

    spans: list[CellSpan] = field(default_factory=list)


#: called with (the number of the ``cells`` array, the cell's text or parsed object, its index)
CellVisitor = Callable[[int, str | dict[str, Any], int], None]


class _Window:
    """A decoded window over the file: ``buf[i]`` is the next character, at byte ``byte_i``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = ""
        self.i = 0
        self.byte_i = 0
        self.eof = False
        self._dec = codecs.getincrementaldecoder("utf-8")("strict")
        self._file_pos = 0
        self._ascii = True  # the window holds ASCII only: a character is a byte

    def more(self, at_least: int = CHUNK) -> bool:
        """Read more of the file (False at its end)."""
        if self.eof:
            return False
        if self.i > CHUNK:  # drop what was consumed
            self.buf, self.i = self.buf[self.i :], 0
        data = os.pread(self.fd, max(CHUNK, at_least), self._file_pos)
        self._file_pos += len(data)
        try:
            self.buf += self._dec.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise StreamError(
                f"not JSON: not UTF-8 text near byte {self._file_pos - len(data) + exc.start}"
            ) from None
        if not data:
            self.eof = True
        self._ascii = self.buf.isascii()  # (O(1): CPython knows it of every string)
        return True

    def advance(self, j: int) -> None:
        if self._ascii:
            self.byte_i += j - self.i
        else:
            piece = self.buf[self.i : j]
            self.byte_i += len(piece) if piece.isascii() else len(piece.encode("utf-8"))
        self.i = j

    def skip_ws(self) -> None:
        while True:
            m = _WS.match(self.buf, self.i)
            assert m is not None
            if m.end() < len(self.buf) or self.eof:
                self.advance(m.end())
                return
            self.advance(m.end())
            self.more()

    def peek(self) -> str:
        self.skip_ws()
        while self.i >= len(self.buf) and self.more():
            self.skip_ws()
        return self.buf[self.i] if self.i < len(self.buf) else ""

    def expect(self, ch: str, what: str) -> None:
        got = self.peek()
        if got != ch:
            raise StreamError(
                f"expected {ch!r} {what}, found {got or 'the end of the file'!r} at byte {self.byte_i}"
            )
        self.advance(self.i + 1)

    def value(self) -> Any:
        """Parse the next JSON value (reading more of the file until it is whole)."""
        self.peek()
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.i)
            except json.JSONDecodeError as exc:
                # the value may run past the window (a string cut, or an error at its very end):
                # read on; an error inside the window is the file's (not read to its end for it)
                cut = exc.pos >= len(self.buf) - 6 or exc.msg.startswith("Unterminated string")
                if cut and self._room() and self.more(len(self.buf)):
                    continue
                raise StreamError(f"not JSON: {exc.msg} at byte {self.byte_i + (exc.pos - self.i)}") from None
            except RecursionError:
                raise safejson.JsonLimitError(
                    f"JSON nested more than {safejson.MAX_DEPTH} levels deep"
                ) from None
            if end == len(self.buf) and self._room() and self.more(len(self.buf)):
                continue  # a number cut at the window's end: read on
            self.advance(end)
            safejson.check_depth(obj)
            return obj

    def _room(self) -> bool:
        """Whether the value being read may grow: a :class:`StreamError` past :data:`MAX_VALUE`."""
        if len(self.buf) - self.i > MAX_VALUE:
            raise StreamError(
                f"a JSON value at byte {self.byte_i} is larger than {MAX_VALUE >> 20} MiB: not a matrix"
            )
        return True

    def indent_before(self) -> str | None:
        """The whitespace between the last newline and the current position (None: no newline)."""
        j = self.buf.rfind("\n", max(0, self.i - 256), self.i)  # (probe indents a cell by 2 or 4)
        if j < 0:
            return None
        ws = self.buf[j + 1 : self.i]
        return ws if not ws.strip(" \t") else None


class _Reader:
    """The skeleton walk: objects and arrays down to the ``cells`` arrays, which are streamed."""

    def __init__(self, fd: int, visit: CellVisitor) -> None:
        self.w = _Window(fd)
        self.visit = visit  # (array number, cell text or object, index)
        self.arrays: list[CellArray] = []
        self.cell_count = 0
        #: indentations whose closing ``}`` was not found ahead: the rest is parsed the standard way
        #: (searching again for each cell would read the rest of the file once per cell)
        self._no_marker: set[str] = set()

    def document(self) -> dict[str, Any]:
        first = self.w.peek()
        if first != "{":
            what = {"[": "an array", '"': "a string", "": "nothing"}.get(first, "not JSON")
            raise StreamError(f"a matrix file holds a JSON object, found {what}")
        doc = self.obj(fleet_level=True)
        if self.w.peek():
            raise StreamError(f"not JSON: extra data after the document at byte {self.w.byte_i}")
        return doc

    def obj(self, *, fleet_level: bool) -> dict[str, Any]:
        """An object whose ``cells`` member is streamed (and, at the top, whose ``matrices``)."""
        w = self.w
        w.expect("{", "at the start of a matrix")
        out: dict[str, Any] = {}
        if w.peek() == "}":
            w.advance(w.i + 1)
            return out
        while True:
            key = w.value()
            if not isinstance(key, str):
                raise StreamError(f"not JSON: an object key must be a string (byte {w.byte_i})")
            w.expect(":", f"after the key {key!r}")
            if key == "cells" and w.peek() == "[":
                out[key] = self.cells(depth=2 if fleet_level else 4)
            elif key == "matrices" and fleet_level and w.peek() == "[":
                out[key] = self.members()
            else:
                out[key] = w.value()
            sep = w.peek()
            w.advance(w.i + 1)
            if sep == "}":
                return out
            if sep != ",":
                raise StreamError(f"not JSON: expected ',' or '}}' after {key!r} at byte {w.byte_i - 1}")

    def members(self) -> list[Any]:
        w = self.w
        w.expect("[", "")
        out: list[Any] = []
        if w.peek() == "]":
            w.advance(w.i + 1)
            return out
        while True:
            out.append(self.obj(fleet_level=False) if w.peek() == "{" else w.value())
            sep = w.peek()
            w.advance(w.i + 1)
            if sep == "]":
                return out
            if sep != ",":
                raise StreamError(f"not JSON: expected ',' or ']' in 'matrices' at byte {w.byte_i - 1}")

    def cells(self, depth: int) -> CellsMarker:
        """Stream one ``cells`` array (its cells ``depth`` levels down: 2 in a matrix, 4 in a fleet);
        a :class:`CellsMarker` stands for it in the document."""
        w = self.w
        array = CellArray()
        number = len(self.arrays)
        self.arrays.append(array)
        w.expect("[", "")
        if w.peek() == "]":
            w.advance(w.i + 1)
            return CellsMarker(number)
        while True:
            n = len(array.spans)
            self.cell_count += 1
            if self.cell_count > MAX_CELLS:
                raise StreamError(f"more than {MAX_CELLS:,} cells: not read (the limit of one document)")
            if w.peek() != "{":
                raise StreamError(f"cells[{n}]: a cell is a JSON object (byte {w.byte_i})")
            array.spans.append(self._cell(number, n, " " * depth))
            sep = w.peek()
            w.advance(w.i + 1)
            if sep == "]":
                return CellsMarker(number)
            if sep != ",":
                raise StreamError(f"not JSON: expected ',' or ']' after cells[{n}] at byte {w.byte_i - 1}")

    def _cell(self, number: int, n: int, probe_indent: str) -> CellSpan:
        """Hand one cell to the visitor: its text when indented as probe writes it (the first
        ``\n<indent>}`` ends it if the text is one JSON object: the visitor says so by raising
        :class:`NotOneObject` otherwise), else the object the standard parser reads."""
        w = self.w
        start = w.byte_i
        indent = w.indent_before()
        text = self._until(indent) if indent is not None and indent not in self._no_marker else None
        if text is not None:
            try:
                self.visit(number, text, n)
            except NotOneObject:
                text = None
            else:
                w.advance(w.i + len(text))
                return CellSpan(start, w.byte_i - start, indent if indent == probe_indent else None)
        obj = w.value()
        if not isinstance(obj, dict):
            raise StreamError(f"cells[{n}]: a cell is a JSON object")
        self.visit(number, obj, n)
        return CellSpan(start, w.byte_i - start, None)

    def _until(self, indent: str) -> str | None:
        """The text from here to the next ``\n<indent>}`` within :data:`MAX_CELL_TEXT` characters (None
        when there is none: that indentation is not searched for again)."""
        w = self.w
        marker = "\n" + indent + "}"
        searched = 0  # characters after w.i searched already (w.i moves when the window drops text)
        while True:
            j = w.buf.find(marker, w.i + searched, w.i + MAX_CELL_TEXT + len(marker))
            if j >= 0:
                return w.buf[w.i : j + len(marker)]
            searched = max(0, len(w.buf) - w.i - len(marker))
            if len(w.buf) - w.i > MAX_CELL_TEXT or not w.more(len(w.buf) - w.i):
                self._no_marker.add(indent)
                return None


def read_document(fd: int, visit: CellVisitor) -> tuple[dict[str, Any], list[CellArray]]:
    """Walk the document in ``fd``: (the document with a :class:`CellsMarker` for every streamed
    ``cells`` array, the arrays' cell spans in the order met). ``visit(array number, cell, index)``
    sees every cell: its text (indented as probe writes) or its parsed object; :class:`NotOneObject`
    raised for a text makes the reader parse that cell the standard way instead.
    :class:`StreamError` / ``safejson.JsonLimitError`` (both ``ValueError``) for a document that is
    not valid JSON or nests too deeply."""
    r = _Reader(fd, visit)
    return r.document(), r.arrays
