"""Inflate deflated zip members: the fastest zlib-compatible inflater installed, a whole small
member at once (:func:`inflate_member`), or a large one as a stream read with ``os.pread``
(:class:`RawDeflateStream`: no shared file position, so threads can read one archive at once).
"""

from __future__ import annotations

import functools
import logging
import os
import zlib
from typing import Any

log = logging.getLogger(__name__)

IN_CHUNK = 4 << 20  # compressed bytes per inflate call (few calls: few GIL hand-overs)
OUT_MAX = 16 << 20  # inflated bytes per call at most

#: inflaters, fastest first (vLLM 0.33.0's FA2 member, 307 MB, one core of this project's dev box:
#: zlib 333-345 MB/s, zlib-ng 514-575 MB/s, python-isal 511-594 MB/s; all three release the GIL,
#: so members inflate in parallel). zlib-ng / isal are optional (``pip install probe[fast]``
#: installs zlib-ng); zlib is the fallback.
#: ``PROBE_INFLATE=zlib|zlib-ng|isal`` forces one (benchmarks).
INFLATERS = ("zlib-ng", "isal", "zlib")


@functools.cache
def inflater() -> tuple[str, Any]:
    """(name, module with a zlib-compatible ``decompressobj``) of the fastest inflater installed."""
    wanted = os.environ.get("PROBE_INFLATE", "").strip().lower()
    for name in INFLATERS:
        if wanted and name != wanted:
            continue
        try:
            if name == "zlib-ng":
                from zlib_ng import zlib_ng as mod
            elif name == "isal":
                from isal import isal_zlib as mod
            else:
                mod = zlib
        except ImportError:
            continue
        return name, mod
    if wanted:
        log.warning("PROBE_INFLATE=%s is not installed: using zlib", wanted)
    return "zlib", zlib


def inflate_error_types() -> tuple[type[Exception], ...]:
    """The exceptions a corrupt stream raises in the inflater in use."""
    _name, mod = inflater()
    err = getattr(mod, "error", zlib.error)
    return (zlib.error, err) if err is not zlib.error else (zlib.error,)


def inflate_member(fd: int, data_offset: int, compressed_size: int, size: int) -> bytes:
    """A whole (small) deflated member, inflated with the fastest inflater (no CRC pass)."""
    raw = os.pread(fd, compressed_size, data_offset)
    if len(raw) != compressed_size:
        raise EOFError("archive ends inside a member")
    d = inflater()[1].decompressobj(-15)
    out = d.decompress(raw, size + 1)
    return out + d.flush() if len(out) < size else out


class RawDeflateStream:
    """Decompressed bytes of a deflated member, read with ``os.pread`` on the archive: no shared
    file position (thread-safe), no CRC pass (a corrupt stream still fails in the inflater)."""

    def __init__(self, fd: int, data_offset: int, compressed_size: int) -> None:
        self._fd = fd
        self._pos = data_offset
        self._end = data_offset + compressed_size
        self._z = inflater()[1].decompressobj(-15)
        self._pending = b""
        self._done = False

    def read(self, n: int = -1, /) -> bytes:
        """The next piece of output (any length up to ``OUT_MAX``; ``b""`` at the end).

        ``n`` is ignored: the caller appends whatever comes. Input goes in ``IN_CHUNK`` pieces,
        so one call inflates them whole (no ``unconsumed_tail`` copies) unless a piece expands
        past ``OUT_MAX`` (runs of zeros: deflate reaches ~1000:1).
        """
        while not self._done:
            if self._pending:
                data, self._pending = self._pending, b""
            elif self._pos < self._end:
                data = os.pread(self._fd, min(IN_CHUNK, self._end - self._pos), self._pos)
                if not data:
                    raise EOFError("archive ends inside a member")
                self._pos += len(data)
            else:
                self._done = True
                return self._z.flush()
            out = self._z.decompress(data, OUT_MAX)
            self._pending = self._z.unconsumed_tail
            if out:
                return out
        return b""

    def __enter__(self) -> RawDeflateStream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
