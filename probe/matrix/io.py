"""Read and write matrix / fleet documents. JSON only (no pickle, no eval); bad files → BadInputError."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probe.errors import BadInputError, UsageError

if TYPE_CHECKING:
    from probe.matrix.schema import Fleet, Matrix

log = logging.getLogger(__name__)

SUPPORTED_SCHEMA_VERSION = 1


def read_json(path: str | Path) -> Any:
    """Parse one JSON file; a missing path is a usage error, unreadable JSON is bad input."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{p}: no such file")
    if p.is_dir():
        raise UsageError(f"{p}: is a folder, expected a matrix JSON file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{p}: cannot read: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{p}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc


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


def _format_validation_error(exc: Exception, path: str | Path) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        lines = []
        for err in exc.errors()[:8]:
            loc = ".".join(str(x) for x in err.get("loc", ()))
            msg = err.get("msg", "")
            lines.append(f"  {loc or '(document)'}: {msg}")
        more = exc.error_count() - len(lines)
        if more > 0:
            lines.append(f"  ... and {more} more")
        return f"{path}: not a valid probe matrix:\n" + "\n".join(lines)
    return f"{path}: not a valid probe matrix: {exc}"


def parse_document(data: Any, path: str | Path = "<data>") -> Matrix | Fleet:
    """Validate parsed JSON into a ``Matrix`` or ``Fleet``."""
    from pydantic import ValidationError

    from probe.matrix.schema import Fleet, Matrix

    kind = check_header(data, path)
    model = Fleet if kind == "fleet" else Matrix
    try:
        if kind not in ("matrix", "fleet"):  # static predictions / a scan report: predicted cells only
            from probe.matrix.static_doc import static_predictions_matrix

            return static_predictions_matrix(data)
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadInputError(_format_validation_error(exc, path)) from exc


def load_document(path: str | Path) -> Matrix | Fleet:
    """Load a matrix or fleet file (either kind)."""
    return parse_document(read_json(path), path)


def load_matrix(path: str | Path) -> Matrix:
    """Load a single-GPU matrix; a fleet file is refused with a clear message."""
    from probe.matrix.schema import Matrix

    doc = load_document(path)
    if not isinstance(doc, Matrix):
        raise UsageError(f"{path}: is a merged fleet file; this verb needs a single matrix")
    return doc


def dump_document(doc: Matrix | Fleet) -> str:
    return json.dumps(doc.model_dump(mode="json", exclude_none=False), indent=1, sort_keys=False) + "\n"


def write_document(doc: Matrix | Fleet, path: str | Path) -> Path:
    """Write a matrix or fleet atomically as indented JSON; returns the path."""
    write_text_atomic(path, dump_document(doc))
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write via a temporary file in the same folder + rename, so readers never see half a file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        mask = os.umask(0o022)
        os.umask(mask)
        Path(tmp).chmod(0o666 & ~mask)  # mkstemp creates 0600; a published matrix is an ordinary file
        Path(tmp).replace(p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    log.debug("wrote %s (%d bytes)", p, len(text))
