"""Byte streams of a layer blob: ``os.pread`` on the image file, gzip (multi-member) / zstd
inflation in bounded pieces, and a helper thread that inflates ahead while the tar is parsed.

Every blob is checked against the digest it claims while it streams (:class:`Digest`: the hash
of the compressed bytes runs beside the inflate), and an inflate that expands past
:data:`probe.arch.limits.MAX_EXPANSION` times its input (after
:data:`~probe.arch.limits.LAYER_EXPANSION_FLOOR`) stops with a :class:`LayerError`.
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import threading
from dataclasses import dataclass
from typing import IO, Any, cast

from probe.arch.limits import IMAGE_EXPANSION_FLOOR, LAYER_EXPANSION_FLOOR, MAX_EXPANSION, size_text

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
    digest: str  # "sha256:…" (content address: the cache key once verified)
    #: the digest is that of the uncompressed tar (a docker-save ``diff_id``), not of the blob
    content_digest: bool = False


def compression_of(head: bytes) -> str | None:
    """ "gzip" / "zstd" from a blob's first 4 bytes, None for a plain tar."""
    if head[:2] == GZIP_MAGIC:
        return "gzip"
    return "zstd" if head[:4] == ZSTD_MAGIC else None


class LayerError(ValueError):
    """A layer that cannot be read: truncated, corrupt compression, or not a tar archive."""


#: digest algorithms of the OCI image spec, with their hex lengths
_ALGORITHMS = {"sha256": 64, "sha512": 128}
_HEX = re.compile(r"^[0-9a-f]+$")
HASH_CHUNK = 4 << 20


class Digest:
    """The digest a blob claims and the running hash of its bytes (:meth:`update` in order)."""

    def __init__(self, claimed: str) -> None:
        self.claimed = claimed
        alg, _, hexd = claimed.partition(":")
        ok = _ALGORITHMS.get(alg) == len(hexd) and bool(_HEX.match(hexd))
        self._h: Any = hashlib.new(alg) if ok else None
        self.alg = alg

    @staticmethod
    def verifiable(blob: Blob, compressed: bool | None = None) -> bool:
        """A digest this reader can check: a known algorithm, and of the bytes it reads."""
        alg, _, hexd = blob.digest.partition(":")
        if _ALGORITHMS.get(alg) != len(hexd) or not _HEX.match(hexd):
            return False
        return not (blob.content_digest and compressed is not False)

    def update(self, data: bytes) -> None:
        if self._h is not None:
            self._h.update(data)

    def mismatch(self) -> str | None:
        """None when the bytes hashed match the claim, else the error message."""
        if self._h is None:
            return None
        got = f"{self.alg}:{self._h.hexdigest()}"
        if got == self.claimed:
            return None
        return (
            f"content does not match its digest {self.claimed} (it hashes to {got}): "
            "not cached; the files listed for it are what it holds"
        )


def hash_blob(fd: int, blob: Blob, digest: Digest, stop: threading.Event | None = None) -> None:
    """Hash the whole blob into ``digest`` (pread in pieces; hashlib releases the GIL)."""
    pos, end = blob.offset, blob.offset + blob.size
    while pos < end and not (stop is not None and stop.is_set()):
        data = os.pread(fd, min(HASH_CHUNK, end - pos), pos)
        if not data:
            raise LayerError("the image file ends inside a layer (truncated)")
        digest.update(data)
        pos += len(data)


def _zlib_module() -> Any:
    from probe.arch.inflate import inflater  # the fastest zlib-compatible inflater installed

    return inflater()[1]


class RawSource:
    """Sequential reads of a blob with ``os.pread`` (no shared file position); every byte read
    goes through ``digest`` when one is given."""

    def __init__(self, fd: int, blob: Blob, digest: Digest | None = None) -> None:
        self.fd = fd
        self.base = blob.offset
        self.end = blob.offset + blob.size
        self.pos = blob.offset
        self.digest = digest

    def read(self, n: int) -> bytes:
        n = min(n, self.end - self.pos)
        if n <= 0:
            return b""
        data = os.pread(self.fd, n, self.pos)
        if not data:
            raise LayerError("the image file ends inside a layer (truncated)")
        self.pos += len(data)
        if self.digest is not None:
            self.digest.update(data)
        return data

    def drain(self) -> None:
        """Read (and hash) what is left of the blob."""
        while self.read(HASH_CHUNK):
            pass


class ImageBudget:
    """What the compressed layers of one image inflated to so far, together: past
    :data:`~probe.arch.limits.IMAGE_EXPANSION_FLOOR`, more than :data:`MAX_EXPANSION` times their
    compressed bytes is one decompression bomb, however it is spread over layers."""

    def __init__(self) -> None:
        self.inflated = 0  # of the layers read to their end
        self.compressed = 0
        self.members = 0  # members of the layers read so far (probe.arch.limits.MAX_IMAGE_MEMBERS)
        self.spent: str | None = None  # why the budget is spent: every later layer stops at once

    def check(self, out: int, consumed: int, kind: str) -> None:
        total, base = self.inflated + out, self.compressed + consumed
        if self.spent is None and total > IMAGE_EXPANSION_FLOOR and total > MAX_EXPANSION * base:
            self.spent = (
                f"the image's {kind} layers expand more than {MAX_EXPANSION}x together "
                f"({size_text(total)} from {size_text(base)}): a decompression bomb? not read further"
            )
        if self.spent is not None:
            raise LayerError(self.spent)

    def add(self, out: int, consumed: int) -> None:
        self.inflated += out
        self.compressed += consumed


class Inflater:
    """Decompressed bytes of a gzip (multi-member) or zstd stream, in pieces of at most OUT_MAX."""

    def __init__(self, raw: RawSource, kind: str, budget: ImageBudget | None = None) -> None:
        self._raw = raw
        self.kind = kind
        self.budget = budget
        self._pending = b""
        self._done = False
        self.out_total = 0  # inflated bytes handed out
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
            out = self._read_gzip() if self.kind == "gzip" else self._zr.read(OUT_MAX)
        except LayerError:
            raise
        except Exception as exc:  # zlib.error, zstandard.ZstdError: corrupt or truncated data
            raise LayerError(f"corrupt {self.kind} data: {exc}") from None
        self.out_total += len(out)
        consumed = self._raw.pos - self._raw.base
        if self.out_total > LAYER_EXPANSION_FLOOR and self.out_total > MAX_EXPANSION * consumed:
            raise LayerError(
                f"{self.kind} data expands more than {MAX_EXPANSION}x ({size_text(self.out_total)} from "
                f"{size_text(consumed)}): a decompression bomb? not read further"
            )
        if self.budget is not None:
            self.budget.check(self.out_total, consumed, self.kind)
        return out

    def settle(self) -> None:
        """The layer is done with: what it inflated counts for the layers read after it."""
        if self.budget is not None:
            self.budget.add(self.out_total, self._raw.pos - self._raw.base)
            self.budget = None

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
            # (without this thread's frames: they hold the pieces inflated, and a traceback refers
            # back to them — a cycle only the collector frees, which `probe scan` turns off)
            self._put(exc.with_traceback(None))

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
        while not self._q.empty():  # the pieces inflated ahead: not kept with this object
            self._q.get_nowait()
