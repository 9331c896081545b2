"""Read and write matrix / fleet documents. JSON only (no pickle, no eval); bad files → BadInputError.

Reading streams the cells (:mod:`probe.matrix.stream`): each is validated as it passes and left in
the file (:class:`probe.matrix.lazy.LazyCells`), so a 200 MB matrix costs memory for its cells'
summaries, not for 200 MB of parsed JSON. Writing streams too: the document around the cells is
dumped once and every cell is written as it comes (its text copied when it was read from a file
laid out as probe writes, else dumped) — byte for byte what ``json.dumps(doc, indent=1)`` gives.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probe.errors import BadInputError, UsageError
from probe.outfile import check_replaceable

if TYPE_CHECKING:
    from probe.matrix.lazy import LazyCells
    from probe.matrix.schema import Cell, Fleet, Matrix

log = logging.getLogger(__name__)

SUPPORTED_SCHEMA_VERSION = 1


def check_header(data: Any, path: str | Path) -> str:
    """Return the document kind ('matrix', 'fleet' or static predictions) after checking schema_version."""
    if not isinstance(data, dict):
        raise BadInputError(f"{path}: a matrix file holds a JSON object, found {type(data).__name__}")
    version = data.get("schema_version")
    if version != SUPPORTED_SCHEMA_VERSION:
        raise BadInputError(
            f"{path}: schema_version {version!r} is not supported (this probe reads version "
            f"{SUPPORTED_SCHEMA_VERSION})",
            hint="re-create the file with this probe version or use a matching probe",
        )
    kind = data.get("kind", "matrix")
    from probe.matrix.scan_predictions import STATIC_KIND, is_static_predictions

    if is_static_predictions(data):
        return STATIC_KIND
    if kind not in ("matrix", "fleet"):
        raise BadInputError(f"{path}: unknown document kind {kind!r} (expected 'matrix' or 'fleet')")
    return str(kind)


def _format_validation_error(exc: Exception, path: str | Path, where: str = "") -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        lines = []
        for err in exc.errors()[:8]:
            loc = ".".join(str(x) for x in (*(where.split(".") if where else ()), *err.get("loc", ())))
            msg = err.get("msg", "")
            lines.append(f"  {loc or '(document)'}: {msg}")
        more = exc.error_count() - len(lines)
        if more > 0:
            lines.append(f"  ... and {more} more")
        return f"{path}: not a valid probe matrix:\n" + "\n".join(lines)
    return f"{path}: not a valid probe matrix: {exc}"


def _open_matrix_file(path: str | Path) -> int:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{p}: no such file")
    if p.is_dir():
        raise UsageError(f"{p}: is a folder, expected a matrix JSON file")
    if p.name.endswith(".gz") and p.is_file():  # a compressed matrix: read through an inflated copy
        return _inflated_copy(p)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise BadInputError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    import stat

    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInputError(f"{p}: not a regular file (a FIFO or device is not read)")
    return fd


def _inflated_copy(p: Path, limit: int | None = None) -> int:
    """A descriptor of a temporary file holding the inflated ``.gz`` matrix ``p``: inflated piece by
    piece (never whole in memory), refused past ``limit`` bytes (default :data:`GZIP_LIMIT`)."""
    import gzip
    import tempfile  # (here, not at the top: `probe recommend` reads through this module)
    import zlib

    from probe.userfile import open_regular_fd

    limit = GZIP_LIMIT if limit is None else limit
    src, _size = open_regular_fd(p, "matrix")
    total = 0
    with tempfile.TemporaryFile() as tmp, os.fdopen(src, "rb") as raw:
        try:
            with gzip.GzipFile(fileobj=raw, mode="rb") as fh:
                while chunk := fh.read(1 << 20):
                    total += len(chunk)
                    if total > limit:
                        raise BadInputError(f"{p}: inflates past {limit >> 20} MiB: not a matrix")
                    tmp.write(chunk)
        except (OSError, EOFError, zlib.error) as exc:
            raise BadInputError(f"{p}: not a gzip file: {exc}") from exc
        tmp.flush()
        fd = os.dup(tmp.fileno())  # the inflated copy lives while this descriptor is open
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class _Loader:
    """One streamed read of a document: every cell validated and summarised as it passes."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self.summaries: list[list[dict[str, Any]]] = []
        self.child_sms: list[list[int | None]] = []
        self._strings: dict[str, str] = {}

    def visit(self, number: int, item: str | dict[str, Any], n: int) -> None:
        from pydantic import ValidationError

        from probe.matrix.lazy import summary
        from probe.matrix.schema import Cell, cc_to_sm
        from probe.matrix.stream import NotOneObject

        while len(self.summaries) <= number:
            self.summaries.append([])
            self.child_sms.append([])
        try:
            cell = Cell.model_validate_json(item) if isinstance(item, str) else Cell.model_validate(item)
        except ValidationError as exc:
            if isinstance(item, str) and any(e.get("type") == "json_invalid" for e in exc.errors()):
                raise NotOneObject(str(exc)) from None
            raise BadInputError(_format_validation_error(exc, self.path, f"cells.{n}")) from None
        self.summaries[number].append(summary(cell, self._strings))
        gpu = cell.details.get("gpu")
        self.child_sms[number].append(cc_to_sm(gpu.get("cc")) if isinstance(gpu, dict) else None)

    def load(self) -> Matrix | Fleet:
        from probe.matrix.lazy import CellFile
        from probe.matrix.stream import read_document

        fd = _open_matrix_file(self.path)
        cell_file = CellFile(str(self.path), fd)
        try:
            header, arrays = read_document(fd, self.visit)
        except ValueError as exc:  # StreamError ("not JSON: …", not an object), JsonLimitError
            raise BadInputError(f"{self.path}: {exc}") from None
        kind = check_header(header, self.path)
        if kind not in ("matrix", "fleet"):  # static predictions / a scan report: predicted cells only
            from probe.matrix.static_doc import static_predictions_matrix

            return static_predictions_matrix(_plain(header))
        members = header.get("matrices") if kind == "fleet" else [header]
        numbers = [_array_number(m) for m in (members if isinstance(members, list) else [])]
        doc = self._validate(_plain(header), kind)
        mats = doc.matrices if kind == "fleet" else [doc]  # type: ignore[union-attr]
        lazies = []
        for i, (m, number) in enumerate(zip(mats, numbers, strict=False)):
            spans = arrays[number].spans if number is not None else []
            sums = self.summaries[number] if number is not None and number < len(self.summaries) else []
            sms = self.child_sms[number] if number is not None and number < len(self.child_sms) else []
            self._consistent(m, sums, sms, f"matrices.{i}." if kind == "fleet" else "")
            lazies.append(m.model_copy(update={"cells": _lazy(cell_file, spans, sums)}))
        if kind == "fleet":
            return doc.model_copy(update={"matrices": lazies})
        return lazies[0]

    def _validate(self, header: dict[str, Any], kind: str) -> Matrix | Fleet:
        from pydantic import ValidationError

        from probe.matrix.schema import Fleet, Matrix

        try:
            return (Fleet if kind == "fleet" else Matrix).model_validate(header)
        except ValidationError as exc:
            raise BadInputError(_format_validation_error(exc, self.path)) from exc

    def _consistent(self, m: Matrix, sums: list[dict[str, Any]], sms: list[int | None], where: str) -> None:
        """The rules across cells (those of ``Matrix``'s own validator), on the summaries."""
        from probe.matrix import cell_rules

        def bad(msg: str) -> BadInputError:
            return BadInputError(f"{self.path}: not a valid probe matrix:\n  {where or '(document)'}: {msg}")

        dup = cell_rules.duplicate_id(s["id"] for s in sums)
        if dup is not None:
            raise bad(f"duplicate cell id {dup!r}")
        gpu = m.provenance.gpu
        if gpu is None or gpu.sm is None:
            return
        sm = f"sm_{gpu.sm}"
        for s, child_sm in zip(sums, sms, strict=True):
            if cell_rules.measured_sm_conflict(s, gpu.sm):
                raise bad(
                    f"measured cell {s['id']!r} says sm_{s.get('gpu_sm')} but the provenance GPU is {sm}"
                )
            if s.get("evidence", "measured") == "measured" and child_sm is not None and child_sm != gpu.sm:
                raise bad(f"cell {s['id']!r} ran on a GPU of sm_{child_sm} but the provenance says {sm}")


def _array_number(member: Any) -> int | None:
    """The number of the streamed ``cells`` array of a matrix in the document (taken out of it)."""
    from probe.matrix.stream import CellsMarker

    if isinstance(member, dict) and isinstance(member.get("cells"), CellsMarker):
        return int(member.pop("cells").number)
    return None


def _lazy(cell_file: Any, spans: list[Any], sums: list[dict[str, Any]]) -> LazyCells:
    from probe.matrix.lazy import LazyCells

    return LazyCells(cell_file, spans, sums)


def _plain(header: dict[str, Any]) -> dict[str, Any]:
    """The header with every streamed ``cells`` array standing as an empty list."""
    from probe.matrix.stream import CellsMarker

    def fix(d: Any) -> Any:
        if isinstance(d, dict):
            return {k: ([] if isinstance(v, CellsMarker) else v) for k, v in d.items()}
        return d

    out = fix(header)
    if isinstance(out.get("matrices"), list):
        out["matrices"] = [fix(m) for m in out["matrices"]]
    return out


def load_document(path: str | Path) -> Matrix | Fleet:
    """Load a matrix or fleet file (either kind); its cells stay in the file (see the module docstring)."""
    return _Loader(path).load()


def load_matrix(path: str | Path) -> Matrix:
    """Load a single-GPU matrix; a fleet file is refused with a clear message."""
    from probe.matrix.schema import Matrix

    doc = load_document(path)
    if not isinstance(doc, Matrix):
        raise UsageError(f"{path}: is a merged fleet file; this verb needs a single matrix")
    return doc


# ----------------------------------------------------------------------------------------------
# writing


def _cell_texts(cells: Sequence[Cell], indent: str) -> Iterator[str]:
    """Each cell as ``json.dumps(cell, indent=1)`` lays it out, re-indented by ``indent``."""
    from probe.matrix.lazy import StoredCells

    raw = cells.raw if isinstance(cells, StoredCells) else None
    for i in range(len(cells)):
        text = raw(i) if raw is not None else None
        if text is None:
            text = json.dumps(cells[i].model_dump(mode="json", exclude_none=False), indent=1)
        yield text.replace("\n", "\n" + indent)


def iter_document(doc: Matrix | Fleet) -> Iterator[str]:
    """The document as ``json.dumps(doc.model_dump(mode="json"), indent=1) + "\\n"``, in pieces."""
    import uuid  # (here: recommend imports this module and never writes)

    from probe.matrix.schema import Fleet

    members = list(doc.matrices) if isinstance(doc, Fleet) else [doc]
    tokens = [f"cells-{uuid.uuid4().hex}" for _ in members]
    if isinstance(doc, Fleet):
        head = doc.model_dump(mode="json", exclude={"matrices": {"__all__": {"cells"}}})
        for m, tok in zip(head["matrices"], tokens, strict=True):
            m["cells"] = tok
        depth = 3
    else:
        head = doc.model_dump(mode="json", exclude={"cells"})
        head["cells"] = tokens[0]
        depth = 1
    text = json.dumps(head, indent=1)
    for m, tok in zip(members, tokens, strict=True):
        before, _, text = text.partition(f'"{tok}"')
        yield before
        yield from _array(m.cells, " " * depth)
    yield text + "\n"


def _array(cells: Sequence[Cell], indent: str) -> Iterator[str]:
    if not len(cells):
        yield "[]"
        return
    inner = indent + " "
    yield "[\n" + inner
    for n, text in enumerate(_cell_texts(cells, inner)):
        yield (",\n" + inner if n else "") + text
    yield "\n" + indent + "]"


def dump_document(doc: Matrix | Fleet) -> str:
    return "".join(iter_document(doc))


def write_document(doc: Matrix | Fleet, path: str | Path) -> Path:
    """Write a matrix or fleet atomically as indented JSON, cell by cell; returns the path."""
    write_text_atomic(path, iter_document(doc))
    return Path(path)


def write_text_atomic(path: str | Path, text: str | Iterable[str]) -> None:
    """Write via a temporary file in the same folder + rename, so readers never see half a file.
    ``text``: the whole text, or its pieces (written as they come)."""
    import tempfile

    p = Path(path)
    check_replaceable(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    size = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for piece in [text] if isinstance(text, str) else text:
                fh.write(piece)
                size += len(piece)
        mask = os.umask(0o022)
        os.umask(mask)
        Path(tmp).chmod(0o666 & ~mask)  # mkstemp creates 0600; a published matrix is an ordinary file
        check_replaceable(p)  # a FIFO or a device named as the output is never replaced
        Path(tmp).replace(p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    log.debug("wrote %s (%d characters)", p, size)


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """:func:`write_text_atomic` for bytes (gzip-compressed prediction files)."""
    import tempfile

    p = Path(path)
    check_replaceable(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        mask = os.umask(0o022)
        os.umask(mask)
        Path(tmp).chmod(0o666 & ~mask)
        check_replaceable(p)
        Path(tmp).replace(p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: the most a gzip-compressed matrix may expand to when read cell by cell (into a temporary file)
GZIP_LIMIT = 256 << 20
#: ... and when its text is read whole (published prediction files: ~2 MB; measured matrices: ~3 MB)
GZIP_TEXT_LIMIT = 64 << 20


def read_gzip_text(path: str | Path, limit: int = GZIP_TEXT_LIMIT) -> str:
    """The text of a ``*.json.gz`` matrix, inflated as a stream and refused past ``limit`` bytes (a gzip
    bomb is an invalid input, never a buffer)."""
    import gzip
    import zlib

    from probe.userfile import open_regular_fd

    out = bytearray()
    fd, _size = open_regular_fd(path, "matrix")  # a regular file only (a FIFO is never waited on)
    try:
        with os.fdopen(fd, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as fh:
            while chunk := fh.read(1 << 20):
                out += chunk
                if len(out) > limit:
                    raise BadInputError(f"{path}: inflates past {limit >> 20} MiB: not a matrix")
    except (OSError, EOFError, zlib.error) as exc:
        raise BadInputError(f"{path}: not a gzip file: {exc}") from exc
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{path}: not UTF-8 text: {exc}") from exc
