"""Hand-assembled fatbin containers and ELF headers for unit tests (layouts: docs/fatbin.md §2-§6)."""

from __future__ import annotations

import struct

ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")


def entry(
    kind: int,
    arch: int,
    payload: bytes = b"\0" * 16,
    *,
    flags: int = 0x11,
    major: int = 1,
    minor: int = 8,
    header_size: int = 64,
    csize: int = 0,
    usize: int = 0,
    extra: bytes = b"",
) -> bytes:
    padded = len(payload) + (-len(payload)) % 8
    hdr = ENTRY.pack(kind, 0x0101, header_size, padded, csize, 0, minor, major, arch, 0, 0, flags, 0, usize)
    ext = (extra + b"\0" * header_size)[: header_size - 64]
    return hdr + ext + payload + b"\0" * (padded - len(payload))


def container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def concatenated(nested: list[tuple[int, int, int]], blob: bytes = b"\0" * 32) -> bytes:
    """Kind 0x100 entry: u32 count at +0x40, nested 120-byte headers from +0x48."""
    recs = b""
    for kind, arch, flags in nested:
        recs += ENTRY.pack(kind, 0x0101, 0, 0, 0, 0, 8, 1, arch, 0, 0, flags, 0, 0) + b"\0" * 56
    extra = struct.pack("<II", len(nested), 0xF8) + recs
    return entry(0x100, 0, blob, flags=0x8011, major=0, minor=1, header_size=64 + len(extra), extra=extra)


def elf64(
    *,
    machine: int = 190,
    abi: int = 8,
    flags: int = 0,
    e_type: int = 2,
    sections: list[tuple[str, int, bytes]] = (),
) -> bytes:
    """A minimal 64-bit little-endian ELF with the given (name, type, data) sections."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _, _ in sections) + b".shstrtab\0"
    data = b""
    offs = []
    pos = 64
    for _, _, d in sections:
        offs.append(pos + len(data))
        data += d + b"\0" * ((-len(d)) % 8)
    shstr_off = pos + len(data)
    data += names + b"\0" * ((-len(names)) % 8)
    shoff = pos + len(data)
    shnum = len(sections) + 2
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x41 if abi == 8 else 0x33, abi]) + b"\0" * 7
    hdr = struct.pack(
        "<16sHHIQQQIHHHHHH", ident, e_type, machine, 1, 0, 0, shoff, flags, 64, 56, 0, 64, shnum, shnum - 1
    )
    sh = b"\0" * 64
    name_pos = 1
    for (n, t, d), off in zip(sections, offs, strict=True):
        sh += struct.pack("<IIQQQQIIQQ", name_pos, t, 2, 0, off, len(d), 0, 0, 8, 0)
        name_pos += len(n) + 1
    sh += struct.pack("<IIQQQQIIQQ", name_pos, 3, 0, 0, shstr_off, len(names), 0, 0, 1, 0)
    return hdr + data + sh
