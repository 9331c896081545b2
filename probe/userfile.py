"""One bounded reader for every file a user names (``--estimates``, ``--reuse``, ``--plan-file``, a
report file, a model's ``config.json``, the log of ``report add``): regular files only, a size cap, an
inflate cap for ``.gz``, UTF-8 text, JSON nested at most :data:`probe.safejson.MAX_DEPTH` levels.

- A FIFO, socket, device or folder is refused before anything is read from it: the open itself never
  blocks (``O_NONBLOCK``: opening a FIFO without a writer would wait forever) and the type is checked
  on the descriptor (no race with a rename between a check and the open).
- A file larger than its cap (``/dev/zero`` is refused as a device; a 10 GB "journal" by its size), or
  a ``.gz`` that inflates past its cap, is refused by what it is, not read to its end.
- Every problem is one :class:`~probe.errors.BadInputError` (exit 6) naming the file and the limit;
  :class:`MissingFileError` (a ``BadInputError`` too) for a file that does not exist.

Standard library only (``probe scan`` and the fast verbs may import it).
"""

from __future__ import annotations

import errno
import os
import stat
import zlib
from typing import Any

from probe import safejson
from probe.errors import BadInputError

__all__ = [
    "MAX_JSON",
    "MAX_TEXT",
    "MissingFileError",
    "describe_mode",
    "loads_line",
    "open_regular_fd",
    "read_bytes",
    "read_json",
    "read_text",
]

#: a JSON input read whole (plan file, estimates / reuse baseline, report file, config.json)
MAX_JSON = 64 << 20
#: a text input read whole
MAX_TEXT = 64 << 20
_CHUNK = 1 << 20

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


class MissingFileError(BadInputError):
    """The file named does not exist."""


def describe_mode(mode: int) -> str | None:
    """None for a regular file, else what it is (``"a FIFO"``, ``"a character device"`` …)."""
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "a special file")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def open_regular_fd(path: str | os.PathLike[str], what: str = "file") -> tuple[int, int]:
    """(descriptor, size) of ``path`` opened read-only when it is a regular file; a
    :class:`BadInputError` naming ``what`` else (never blocks, never reads a special file)."""
    name = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise MissingFileError(f"no such {what}: {name}") from None
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise BadInputError(f"{what} {name} is a folder: a regular file is read") from None
        raise BadInputError(f"cannot read {what} {name}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise BadInputError(f"cannot read {what} {name}: {exc.strerror or exc}") from None
    kind = describe_mode(st.st_mode)
    if kind is not None:
        os.close(fd)
        raise BadInputError(f"{what} {name} is {kind}, not a regular file: not read")
    return fd, st.st_size


def _read_fd(fd: int, name: str, what: str, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        data = os.read(fd, min(_CHUNK, limit + 1 - total))
        if not data:
            return b"".join(parts)
        total += len(data)
        if total > limit:  # (grew while being read)
            raise BadInputError(f"{what} {name}: larger than {_mib(limit)}: not read")
        parts.append(data)


def _inflate(raw: bytes, name: str, what: str, limit: int) -> bytes:
    """A gzip file's content, inflated in pieces and refused past ``limit`` bytes."""
    out: list[bytes] = []
    total = 0
    data = raw
    while data:
        d = zlib.decompressobj(31)
        try:
            while True:
                piece = d.decompress(data, _CHUNK)
                total += len(piece)
                if total > limit:
                    raise BadInputError(f"{what} {name}: inflates past {_mib(limit)}: not read")
                out.append(piece)
                data = d.unconsumed_tail
                if d.eof or not (data or piece):
                    break
        except zlib.error as exc:
            raise BadInputError(f"{what} {name}: not a gzip file: {exc}") from None
        if not d.eof:
            raise BadInputError(f"{what} {name}: the gzip stream ends early (truncated)")
        data = d.unused_data
        if not data.strip(b"\0"):
            break
    return b"".join(out)


def read_bytes(
    path: str | os.PathLike[str], *, what: str = "file", limit: int = MAX_TEXT, gz: bool | None = None
) -> bytes:
    """The bytes of a regular file (``gz``: inflated; default: when the name ends in ``.gz``), at most
    ``limit`` of them (before and after inflating); :class:`BadInputError` otherwise."""
    name = os.fspath(path)
    fd, size = open_regular_fd(name, what)
    try:
        if size > limit and not (gz or (gz is None and name.endswith(".gz"))):
            raise BadInputError(f"{what} {name}: {_mib(size)}, larger than {_mib(limit)}: not read")
        try:
            raw = _read_fd(fd, name, what, limit)
        except OSError as exc:
            raise BadInputError(f"cannot read {what} {name}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if gz or (gz is None and name.endswith(".gz")):
        return _inflate(raw, name, what, limit)
    return raw


def read_text(
    path: str | os.PathLike[str], *, what: str = "file", limit: int = MAX_TEXT, gz: bool | None = None
) -> str:
    """:func:`read_bytes` decoded as UTF-8 (:class:`BadInputError` when it is not)."""
    raw = read_bytes(path, what=what, limit=limit, gz=gz)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{what} {os.fspath(path)}: not UTF-8 text (byte {exc.start})") from None


def read_json(
    path: str | os.PathLike[str], *, what: str = "file", limit: int = MAX_JSON, gz: bool | None = None
) -> Any:
    """The JSON document of a regular file: bounded in size and nesting (:func:`read_text`,
    :func:`probe.safejson.loads`); :class:`BadInputError` for anything else."""
    text = read_text(path, what=what, limit=limit, gz=gz)
    try:
        return safejson.loads(text)
    except ValueError as exc:  # json.JSONDecodeError, safejson.JsonLimitError
        raise BadInputError(f"{what} {os.fspath(path)} is not valid JSON: {exc}") from None


def loads_line(line: str | bytes) -> Any:
    """One JSON line of a journal, with the nesting limit (``ValueError`` when it is not JSON)."""
    return safejson.loads(line)
