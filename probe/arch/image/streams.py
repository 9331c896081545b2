"""Byte streams of a layer blob: ``os.pread`` on the image file, gzip (multi-member) / zstd
inflation in bounded pieces, and a helper thread that inflates ahead while the tar is parsed.
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass
from typing import IO, Any, cast

IN_CHUNK = 1 << 20  # compressed bytes per read
OUT_MAX = 8 << 20  # inflated bytes per decompress call at most
PREFETCH = 3  # inflated pieces waiting for the parser (memory: PREFETCH * OUT_MAX at most)
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


@dataclass(frozen=True)
class Blob:
    """Bytes ``[offset, offset + size)`` of a file: an OCI blob, or a member of a docker-save tar."""

    path: str
    offset: int
    size: int
    digest: str  # "sha256:…" (content address: the cache key)


class LayerError(ValueError):
    """A layer that cannot be read: truncated, corrupt compression, or not a tar archive."""


def _zlib_module() -> Any:
    from probe.arch.inflate import inflater  # the fastest zlib-compatible inflater installed

    return inflater()[1]


class RawSource:
    """Sequential reads of a blob with ``os.pread`` (no shared file position)."""

    def __init__(self, fd: int, blob: Blob) -> None:
        self.fd = fd
        self.base = blob.offset
        self.end = blob.offset + blob.size
        self.pos = blob.offset

    def read(self, n: int) -> bytes:
        n = min(n, self.end - self.pos)
        if n <= 0:
            return b""
        data = os.pread(self.fd, n, self.pos)
        if not data:
            raise LayerError("the image file ends inside a layer (truncated)")
        self.pos += len(data)
        return data


class Inflater:
    """Decompressed bytes of a gzip (multi-member) or zstd stream, in pieces of at most OUT_MAX."""

    def __init__(self, raw: RawSource, kind: str) -> None:
        self._raw = raw
        self.kind = kind
        self._pending = b""
        self._done = False
        self._zmod = _zlib_module()
        self._z: Any = None
        if kind == "gzip":
            self._z = self._zmod.decompressobj(31)
        else:
            import zstandard

            outer = self

            class _File:  # the file object zstandard's stream reader pulls compressed bytes from
                def read(self, n: int = -1) -> bytes:
                    return outer._raw.read(IN_CHUNK if n < 0 else min(n, IN_CHUNK))

            self._zr = zstandard.ZstdDecompressor().stream_reader(
                cast("IO[bytes]", _File()), read_size=IN_CHUNK, read_across_frames=True
            )

    def read(self) -> bytes:
        """The next piece of output, ``b""`` at the end of the stream."""
        try:
            return self._read_gzip() if self.kind == "gzip" else self._zr.read(OUT_MAX)
        except LayerError:
            raise
        except Exception as exc:  # zlib.error, zstandard.ZstdError: corrupt or truncated data
            raise LayerError(f"corrupt {self.kind} data: {exc}") from None

    def _read_gzip(self) -> bytes:
        while not self._done:
            if self._z.eof:  # a gzip member ended: another may follow (concatenated gzip)
                rest = self._z.unused_data or self._raw.read(IN_CHUNK)
                if not rest.strip(b"\0"):  # end of data (or zero padding)
                    self._done = True
                    return b""
                self._z = self._zmod.decompressobj(31)
                self._pending = rest
            if self._pending:
                data, self._pending = self._pending, b""
            else:
                data = self._raw.read(IN_CHUNK)
                if not data:
                    raise LayerError("gzip stream ends early (truncated layer)")
            out = self._z.decompress(data, OUT_MAX)
            if not self._z.eof:
                self._pending = self._z.unconsumed_tail
            if out:
                return out
        return b""


class Prefetch:
    """Inflate in a helper thread (zlib and zstd release the GIL) while the caller parses: at most
    ``PREFETCH`` pieces of ``OUT_MAX`` bytes wait in the queue."""

    def __init__(self, inf: Inflater) -> None:
        self._inf = inf
        self._q: queue.Queue[bytes | Exception] = queue.Queue(maxsize=PREFETCH)
        self._stop = threading.Event()
        self._done = False
        self._t = threading.Thread(target=self._run, name="probe-inflate", daemon=True)
        self._t.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                chunk = self._inf.read()
                self._put(chunk)
                if not chunk:
                    return
        except Exception as exc:  # handed to the reader: LayerError, OSError
            self._put(exc)

    def _put(self, item: bytes | Exception) -> None:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def read(self) -> bytes:
        if self._done:
            return b""
        item = self._q.get()
        if isinstance(item, Exception):
            self._done = True
            raise item
        if not item:
            self._done = True
        return item

    def close(self) -> None:
        self._stop.set()
        self._t.join()
