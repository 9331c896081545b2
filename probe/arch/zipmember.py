"""Bounded reads of a wheel's zip members and of its central directory.

A zip member's sizes are what the archive *says*; its compressed bytes decide what it inflates to. So
a member is never read through :mod:`zipfile` (whose bzip2 and LZMA readers inflate a whole
compressed piece in one call, however far it expands): :func:`member_stream` inflates deflate,
bzip2 and LZMA members in pieces of at most :data:`OUT_MAX` bytes, and :func:`read_member` stops at
the size the member declares (:class:`MemberError` when there is more).

:func:`central_directory_count` counts the entries the central directory really holds (the end record's
count is only a claim) before :mod:`zipfile` parses it into memory; :data:`MAX_CENTRAL_DIRECTORY` bounds
its size.
"""

from __future__ import annotations

import bz2
import lzma
import os
import struct
import zipfile
from typing import Any

from probe.arch.inflate import RawDeflateStream, inflater
from probe.arch.inputs import open_regular

__all__ = [
    "MAX_CENTRAL_DIRECTORY",
    "MemberError",
    "central_directory_count",
    "data_offset",
    "member_stream",
    "read_member",
]

IN_CHUNK = 1 << 20  # compressed bytes per decompress call
OUT_MAX = 16 << 20  # inflated bytes per call at most
#: the largest central directory parsed (torch's wheel: ~2 MB for ~20,000 members)
MAX_CENTRAL_DIRECTORY = 64 << 20
_EOCD = struct.Struct("<4s4H2LH")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_CDH = struct.Struct("<4s4B4HL2L5H2L")


class MemberError(ValueError):
    """A member that cannot be read as declared (an unknown method, encrypted, larger than it says)."""


def data_offset(zf_fd: int, info: zipfile.ZipInfo) -> int:
    """Offset of a member's (compressed) bytes in the archive, from its local file header."""
    local = os.pread(zf_fd, 30, info.header_offset)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile("bad local file header")
    name_len, extra_len = struct.unpack_from("<HH", local, 26)
    return info.header_offset + 30 + name_len + extra_len


class _Decompressing:
    """Output of a bzip2 or raw LZMA stream read with ``os.pread``, in pieces of at most OUT_MAX."""

    def __init__(self, fd: int, offset: int, size: int, kind: int) -> None:
        self._fd, self._pos, self._end = fd, offset, offset + size
        if kind == zipfile.ZIP_BZIP2:
            self._d: Any = bz2.BZ2Decompressor()
        else:  # zip's LZMA: u16 version, u16 properties size, the properties, then raw LZMA1
            head = os.pread(fd, 4, offset)
            if len(head) != 4:
                raise EOFError("archive ends inside a member")
            psize = int.from_bytes(head[2:4], "little")
            props = os.pread(fd, psize, offset + 4)
            try:
                flt = lzma._decode_filter_properties(lzma.FILTER_LZMA1, props)  # type: ignore[attr-defined]
            except lzma.LZMAError as exc:
                raise MemberError(f"bad LZMA properties: {exc}") from None
            self._d = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[flt])
            self._pos += 4 + psize

    def read(self, n: int = -1, /) -> bytes:
        """The next piece of output (``b""`` at the end); ``n`` is ignored, as by RawDeflateStream."""
        while not self._d.eof:
            data = b""
            if self._d.needs_input:
                if self._pos >= self._end:
                    return b""
                data = os.pread(self._fd, min(IN_CHUNK, self._end - self._pos), self._pos)
                if not data:
                    raise EOFError("archive ends inside a member")
                self._pos += len(data)
            out: bytes = self._d.decompress(data, OUT_MAX)
            if out:
                return out
        return b""

    def __enter__(self) -> _Decompressing:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _Stored:
    def __init__(self, fd: int, offset: int, size: int) -> None:
        self._fd, self._pos, self._end = fd, offset, offset + size

    def read(self, n: int = -1, /) -> bytes:
        want = min(OUT_MAX, self._end - self._pos)
        data = os.pread(self._fd, want, self._pos) if want > 0 else b""
        self._pos += len(data)
        return data

    def __enter__(self) -> _Stored:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def member_stream(fd: int, info: zipfile.ZipInfo) -> RawDeflateStream | _Decompressing | _Stored:
    """The decompressed bytes of ``info`` as a forward stream of bounded pieces."""
    if info.flag_bits & 0x1:
        raise MemberError("an encrypted member: not read")
    base = data_offset(fd, info)
    if info.compress_type == zipfile.ZIP_DEFLATED:
        return RawDeflateStream(fd, base, info.compress_size)
    if info.compress_type in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        return _Decompressing(fd, base, info.compress_size, info.compress_type)
    if info.compress_type == zipfile.ZIP_STORED:
        return _Stored(fd, base, info.compress_size)
    raise MemberError(f"compression method {info.compress_type} is not supported")


def read_member(fd: int, info: zipfile.ZipInfo) -> bytes:
    """A whole member, at most the size it declares: :class:`MemberError` when it inflates further
    (a member that lies about its size never costs more memory than it declared)."""
    if info.compress_type == zipfile.ZIP_DEFLATED and not info.flag_bits & 0x1:
        d = inflater()[1].decompressobj(-15)
        raw = os.pread(fd, info.compress_size, data_offset(fd, info))
        if len(raw) != info.compress_size:
            raise EOFError("archive ends inside a member")
        out = d.decompress(raw, info.file_size + 1)
        if len(out) <= info.file_size and not d.unconsumed_tail:
            out += d.flush()
        if len(out) > info.file_size:
            raise MemberError(f"inflates past the {info.file_size:,} bytes it declares: not read")
        return bytes(out)
    buf = bytearray()
    with member_stream(fd, info) as s:
        while piece := s.read():
            if len(buf) + len(piece) > info.file_size:
                raise MemberError(f"inflates past the {info.file_size:,} bytes it declares: not read")
            buf += piece
    return bytes(buf)


def _end_records(fd: int, size: int) -> tuple[int, int] | None:
    """(offset, size) of the central directory as the end records place it (None: no end record)."""
    tail = os.pread(fd, min(size, 65536 + _EOCD.size), max(0, size - 65536 - _EOCD.size))
    i = tail.rfind(b"PK\x05\x06")
    if i < 0 or len(tail) - i < _EOCD.size:
        return None
    eocd_at = size - len(tail) + i
    _sig, _disk, _cd_disk, _n_disk, _n, cd_size, _cd_off, _c = _EOCD.unpack_from(tail, i)
    z64 = tail.rfind(b"PK\x06\x06", 0, i)
    if z64 >= 0 and len(tail) - z64 >= _EOCD64.size and tail[i - 20 : i - 16] == b"PK\x06\x07":
        cd_size = _EOCD64.unpack_from(tail, z64)[-2]
        return eocd_at - 20 - _EOCD64.size - cd_size, cd_size
    return eocd_at - cd_size, cd_size  # (zipfile reads it there too: a prefixed archive works)


def central_directory_count(path: str, limit: int) -> int:
    """How many entries the central directory holds, walked header by header (0 without an end record:
    zipfile says why); at most ``limit + 1`` are counted. :class:`MemberError` for a central directory
    larger than :data:`MAX_CENTRAL_DIRECTORY`."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        where = _end_records(fd, size)
        if where is None:
            return 0
        start, cd_size = where
        if cd_size > MAX_CENTRAL_DIRECTORY:
            raise MemberError(
                f"a central directory of {cd_size:,} bytes (more than {MAX_CENTRAL_DIRECTORY >> 20} MiB)"
            )
        return _walk_headers(fd, max(0, start), cd_size, limit)
    finally:
        os.close(fd)


def _walk_headers(fd: int, start: int, cd_size: int, limit: int) -> int:
    count = pos = 0
    buf = b""
    base = start  # file offset of buf[0]
    while pos < cd_size and count <= limit:
        if pos + _CDH.size > base - start + len(buf):
            base = start + pos
            buf = os.pread(fd, min(IN_CHUNK, cd_size - pos), base)
            if len(buf) < _CDH.size:
                break
        i = start + pos - base
        head = _CDH.unpack_from(buf, i)
        if head[0] != b"PK\x01\x02":
            break
        count += 1
        pos += _CDH.size + head[12] + head[13] + head[14]  # + name, extra, comment
    return count
