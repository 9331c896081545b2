"""Bounded input for the classifier: what ``probe classify`` reads of a log, and from what.

- Only a regular file (seekable: its first ``HEAD_BYTES`` and last ``TAIL_BYTES`` are read, the
  middle is skipped by seeking) or a stream (stdin, a ``.gz`` file: read in chunks, the first
  ``HEAD_BYTES`` kept, then a rolling window of the last ``TAIL_BYTES``; at most ``STREAM_LIMIT``
  bytes are read, then reading stops). FIFOs, sockets and devices named as a path are refused before
  they are opened (opening a FIFO blocks; ``/dev/zero`` never ends).
- Input that is not text (NUL bytes or mostly undecodable bytes in its first ``SNIFF_BYTES``) stops
  the read at once: ``probe classify - < /dev/zero`` answers immediately.

So any input costs at most ``HEAD_BYTES + TAIL_BYTES`` of log lines to classify, whatever its size:
the root cause of a crash is where the run started (import, start-up) or where it ended.
"""

from __future__ import annotations

import collections
import gzip
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from probe.errors import BadInputError
from probe.sandbox.logtext import looks_binary
from probe.userfile import describe_mode

HEAD_BYTES = 256 << 10  # the first 256 KiB
TAIL_BYTES = 1 << 20  # the last 1 MiB
STREAM_LIMIT = 1 << 30  # a stream is read up to 1 GiB, then reading stops
SNIFF_BYTES = 64 * 1024
_CHUNK = 1 << 20


@dataclass(frozen=True)
class LogWindow:
    """What is classified of an input: its head, and its tail when the middle was skipped."""

    head: bytes
    tail: bytes = b""
    total: int = 0  # bytes in the input (for a stream cut at STREAM_LIMIT: the bytes read)
    skipped: int = 0  # bytes between head and tail that were not classified
    complete: bool = True  # False: a stream was cut at STREAM_LIMIT (its real end was not seen)
    binary: bool = False  # the input is not text (reading stopped at once)

    def describe(self) -> dict[str, object]:
        return {
            "bytes": self.total,
            "classified_bytes": len(self.head) + len(self.tail),
            "skipped_bytes": self.skipped,
            "complete": self.complete,
        }


def _cut_head(head: bytes) -> bytes:
    """A head that stops inside a line: drop that partial line (it goes on in the skipped part)."""
    nl = head.rfind(b"\n")
    return head[: nl + 1] if nl >= 0 else head


def _cut_tail(tail: bytes) -> bytes:
    """A tail that starts inside a line: drop that partial line."""
    nl = tail.find(b"\n")
    return tail[nl + 1 :] if 0 <= nl < len(tail) - 1 else tail


def read_file_window(f: IO[bytes], size: int) -> LogWindow:
    """A seekable regular file of ``size`` bytes: its head and tail, the middle skipped by seeking."""
    head = f.read(size if size <= HEAD_BYTES + TAIL_BYTES else HEAD_BYTES)
    if looks_binary(head[:SNIFF_BYTES]):
        return LogWindow(head[:SNIFF_BYTES], total=size, binary=True)
    if size <= HEAD_BYTES + TAIL_BYTES:
        return LogWindow(head, total=size)
    f.seek(size - TAIL_BYTES)
    tail = f.read(TAIL_BYTES)
    return LogWindow(_cut_head(head), _cut_tail(tail), total=size, skipped=size - HEAD_BYTES - TAIL_BYTES)


def read_stream_window(stream: IO[bytes]) -> LogWindow:
    """A stream: the first HEAD_BYTES, then a rolling window of the last TAIL_BYTES, at most STREAM_LIMIT."""
    head = bytearray()
    tail: collections.deque[bytes] = collections.deque()
    tail_len = total = 0
    while total < STREAM_LIMIT:
        data = stream.read(min(_CHUNK, STREAM_LIMIT - total))
        if not data:
            break
        if total == 0 and looks_binary(data[:SNIFF_BYTES]):
            return LogWindow(bytes(data[:SNIFF_BYTES]), total=len(data), binary=True)
        total += len(data)
        room = HEAD_BYTES - len(head)
        if room > 0:
            head += data[:room]
            data = data[room:]
        if data:
            tail.append(data)
            tail_len += len(data)
            while tail and tail_len - len(tail[0]) >= TAIL_BYTES:
                tail_len -= len(tail.popleft())
    complete = total < STREAM_LIMIT or not stream.read(1)
    rest = b"".join(tail)[-TAIL_BYTES:]
    skipped = total - len(head) - len(rest)
    if not rest:
        return LogWindow(bytes(head), total=total, complete=complete)
    if skipped == 0:
        return LogWindow(bytes(head) + rest, total=total, complete=complete)
    return LogWindow(_cut_head(bytes(head)), _cut_tail(rest), total, skipped, complete)


def read_window(stream: IO[bytes], size: int | None = None) -> LogWindow:
    """The window of an open input: seek-based when ``size`` (a regular file's size) is known, else a
    stream read. Without ``size``, an object with a regular file descriptor is measured here."""
    if size is None:
        size = _regular_size(stream)
    return read_stream_window(stream) if size is None else read_file_window(stream, size)


def _regular_size(stream: IO[bytes]) -> int | None:
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode) or isinstance(stream, gzip.GzipFile):
        return None
    return st.st_size - stream.tell() if stream.seekable() else None


def _refuse_special(path: str, mode: int) -> None:
    kind = describe_mode(mode)
    if kind is not None:
        raise BadInputError(
            f"{path} is {kind}: probe classify reads regular files and stdin only",
            hint="save the log to a file, or pipe it: ... | probe classify -",
        )


def open_log(path: str) -> tuple[IO[bytes], int | None]:
    """Open a log named on the command line: (stream, size for a seekable regular file or None).
    Anything but a regular file is refused without being opened for reading."""
    try:
        _refuse_special(path, Path(path).stat().st_mode)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise BadInputError(f"no such log file: {path}")
    except OSError as exc:
        raise BadInputError(f"cannot read {path}: {exc.strerror or exc}")
    f = os.fdopen(fd, "rb")
    try:
        st = os.fstat(fd)
        _refuse_special(path, st.st_mode)  # replaced between the stat and the open
    except BaseException:
        f.close()
        raise
    if path.endswith(".gz"):
        return cast("IO[bytes]", gzip.GzipFile(fileobj=f, mode="rb")), None
    return f, st.st_size
