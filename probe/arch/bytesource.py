"""Random access to the bytes behind an ELF reader, and NUL-terminated name tables read in linear time.

:class:`Reader` reads a file descriptor (``os.pread``) or an in-memory buffer (without a copy where it
can: :meth:`Reader.whole`, :meth:`Reader.view`); :func:`names_at` reads the names of a string table in
one forward pass, however many entries point into it (a table without its terminating NUL, pointed at
by a million symbols, was read a million times). Kept apart from :mod:`probe.arch.elf` (which re-exports
them) so that module stays about the ELF layout.
"""

from __future__ import annotations

from collections.abc import Callable

#: the longest section name and kernel name read (longer ones, or ones without their NUL, are not names)
MAX_SECTION_NAME = 4096
MAX_KERNEL_NAME = 64 << 10
#: the most name text decoded from one table (names share bytes: a table of 16 MiB holds ~that much)
MAX_NAME_BYTES = 64 << 20
#: kernel entry points listed per cubin / PTX (real ones: a few thousand at most)
MAX_KERNELS = 65536


class ElfParseError(ValueError):
    """The input is not a well-formed (64-bit little-endian) ELF file, or is truncated."""


#: ``read(offset, length) -> bytes``; may return fewer bytes than asked near the end of the data.
ReadFn = Callable[[int, int], bytes]


class Reader:
    """Random-access reads over a file descriptor or an in-memory buffer; never reads ahead."""

    def __init__(self, read: ReadFn, size: int) -> None:
        self._read = read
        self.size = size
        #: the whole data when it is in memory (read without a copy: ``--kernels`` of a large cubin)
        self.buffer: bytes | bytearray | None = None

    @classmethod
    def from_buffer(cls, buf: bytes | bytearray | memoryview) -> Reader:
        mv = memoryview(buf)
        r = cls(lambda off, n: bytes(mv[off : off + n]), len(mv))
        r.buffer = buf if isinstance(buf, (bytes, bytearray)) else None
        return r

    def whole(self) -> bytes | bytearray:
        """All the data: the buffer itself when in memory (no copy), else read."""
        return self.buffer if self.buffer is not None else self.read(0, self.size)

    def view(self, offset: int, length: int) -> bytes | memoryview:
        """:meth:`read`, without a copy when the data is in memory (a payload of a held member)."""
        if self.buffer is None:
            return self.read(offset, length)
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ElfParseError(f"truncated: wants bytes {offset}..{offset + length} of {self.size}")
        return memoryview(self.buffer)[offset : offset + length]

    def read(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset`` or :class:`ElfParseError` (truncated)."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ElfParseError(f"truncated: wants bytes {offset}..{offset + length} of {self.size}")
        data = self._read(offset, length)
        if len(data) != length:
            raise ElfParseError(f"short read at offset {offset}: {len(data)} of {length} bytes")
        return data

    def read_upto(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (fewer at the end of the data)."""
        if offset < 0 or offset >= self.size:
            return b""
        return self._read(offset, min(length, self.size - offset))


def names_at(
    table: bytes | bytearray, start: int, end: int, offsets: list[int], max_len: int, what: str
) -> dict[int, str]:
    """The NUL-terminated names at ``offsets`` (relative to ``start``) of the string table
    ``table[start:end]``, in one forward pass: each byte is searched once however many names point
    into it (a table without its NUL costs one scan, not one per name). A name longer than
    ``max_len`` or without its NUL is left out; :class:`ElfParseError` past :data:`MAX_NAME_BYTES`."""
    out: dict[int, str] = {}
    nul = -1
    total = 0
    for off in sorted(set(offsets)):
        a = start + off
        if off < 0 or a >= end:
            break
        if nul < a:
            nul = table.find(b"\0", a, end)
            if nul < 0:
                break  # no NUL after here: no more names
        if nul - a <= max_len:
            total += nul - a
            if total > MAX_NAME_BYTES:
                raise ElfParseError(f"{what}: more than {MAX_NAME_BYTES >> 20} MiB of names")
            out[off] = table[a:nul].decode("utf-8" if what == "symbol table" else "latin-1", "replace")
    return out
