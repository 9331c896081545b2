"""Walk fatbin containers (``.nv_fatbin`` / ``__nv_relfatbin`` sections, ``.fatbin`` files).

Only headers are read: 16 bytes per container, 64+ bytes per entry (docs/fatbin.md §2-§5).
Payloads are read and decompressed on demand (:func:`payload`), for ``--kernels`` only.

Every size read from the data is validated against the region being walked; every step moves
forward by at least 8 bytes; counts are capped. A malformed region never raises out of
:func:`walk_region`: what could be read is returned together with a list of problems.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from probe.arch.elf import MAX_KERNEL_NAME, MAX_KERNELS, ElfParseError, Reader
from probe.arch.limits import MAX_HELD

if TYPE_CHECKING:
    from probe.arch.records import Compression, Suffix

FATBIN_MAGIC = 0xBA55ED50
FATBIN_MAGIC_BYTES = b"\x50\xed\x55\xba"
CONTAINER_HEAD = b"\x50\xed\x55\xba\x01\x00\x10\x00"  # magic, version 1, header size 16

_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")

KIND_NAMES: dict[int, str] = {
    0x01: "ptx",
    0x02: "sass",
    0x04: "old-cubin",
    0x08: "lto-ir",
    0x10: "kind-0x10",
    0x20: "index",
    0x40: "relocatable-ptx",
    0x80: "tile-ir",
    0x100: "concatenated",
}
#: kinds whose arch is a virtual (compute_) target
VIRTUAL_KINDS = frozenset({"ptx", "lto-ir", "relocatable-ptx", "tile-ir"})

FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000  # bit 20: "a"
FLAG_FAMILY = 0x200000  # bit 21: "f"

#: per walk (a file's device sections together: see probe.arch.describe); real files: ~3,000
#: containers, ~25,000 entries (libtorch_cuda.so); each entry costs ~1 KB until the report is written
MAX_CONTAINERS = 100_000
MAX_ENTRIES = 100_000
MAX_ENTRY_HEADER = 1 << 16
MAX_NESTED = 4096
MAX_PAYLOAD = MAX_HELD  # refuse to read or decompress a payload beyond this
MAX_RATIO = 4096  # ... or beyond this ratio (guards the up-front output allocation)


class FatbinParseError(ValueError):
    """A fatbin payload could not be read or decompressed."""


@dataclass(slots=True)
class RawEntry:
    """One entry of a fatbin container, as its header describes it."""

    section: str  # ".nv_fatbin", "__nv_relfatbin" or "fatbin" (a bare .fatbin file)
    container: int  # index of the container within the file, from 0
    offset: int  # file offset of the entry header
    kind_code: int
    kind: str
    arch: int
    suffix: Suffix
    major: int
    minor: int
    flags: int
    header_size: int
    padded_size: int
    compressed_size: int
    uncompressed_size: int
    identifier: str | None = None
    nested: bool = False  # described inside a concatenated (kind 0x100) entry
    payload_offset: int = 0
    payload_length: int = 0  # bytes to read for the payload (compressed size when compressed)

    @property
    def compression(self) -> Compression | None:
        if self.flags & FLAG_ZSTD:
            return "zstd"
        if self.flags & FLAG_LZ4:
            return "lz4"
        return None

    @property
    def label(self) -> str | None:
        if self.kind == "sass" or self.kind == "old-cubin":
            return f"sm_{self.arch}{self.suffix}"
        if self.kind in VIRTUAL_KINDS:
            return f"compute_{self.arch}{self.suffix}"
        return None

    @property
    def ptx_isa(self) -> str | None:
        return f"{self.major}.{self.minor}" if self.kind in ("ptx", "relocatable-ptx") else None


@dataclass
class WalkResult:
    containers: int = 0
    entries: list[RawEntry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    end: int = 0  # offset where the walk stopped
    spans: list[tuple[int, int]] = field(default_factory=list)  # (offset, size) of each container


def _suffix(flags: int) -> Suffix:
    if flags & FLAG_ARCH_SPECIFIC:
        return "a"
    if flags & FLAG_FAMILY:
        return "f"
    return ""


def _kind_name(kind: int) -> str:
    return KIND_NAMES.get(kind, f"kind-0x{kind:x}")


def is_container_start(head: bytes) -> bool:
    return head[:8] == CONTAINER_HEAD


def walk_region(
    reader: Reader, start: int, end: int, *, section: str, first_container: int = 0, chain_only: bool = False
) -> WalkResult:
    """Walk the containers laid end to end in ``[start, end)``.

    ``chain_only``: stop quietly at the first bytes that are not a container (used when the
    region's real end is unknown, e.g. while streaming a wheel member); otherwise non-container,
    non-zero bytes before ``end`` are reported as a problem.
    """
    res = WalkResult(end=start)
    end = min(end, reader.size)
    off = start
    try:
        while off + 16 <= end:
            head = reader.read(off, 16)
            if head[:4] != FATBIN_MAGIC_BYTES:
                if head[:8] == b"\0" * 8:
                    off += 8  # alignment padding between containers
                    continue
                if not chain_only:
                    res.problems.append(
                        f"{section}: unexpected bytes at offset {off:#x} (not a fatbin container)"
                    )
                break
            _magic, version, hsize, fat_size = _CONTAINER.unpack(head)
            if version != 1 or hsize < 16 or hsize > 4096:
                res.problems.append(
                    f"{section}: container at {off:#x} has version {version}, header size {hsize}"
                )
                break
            cend = off + hsize + fat_size
            if cend > end:
                res.problems.append(
                    f"{section}: container at {off:#x} claims {fat_size} bytes, past the "
                    f"end of the section/file (truncated?)"
                )
                cend = end
            if res.containers >= MAX_CONTAINERS:
                res.problems.append(f"{section}: more than {MAX_CONTAINERS} containers; stopped")
                break
            index = first_container + res.containers
            res.containers += 1
            res.spans.append((off, cend - off))
            _walk_entries(reader, off + hsize, cend, section, index, res)
            if len(res.entries) > MAX_ENTRIES:
                del res.entries[MAX_ENTRIES:]
                res.problems.append(f"{section}: more than {MAX_ENTRIES:,} entries; stopped")
                break
            off = max(cend, off + 16)
    except ElfParseError as exc:
        res.problems.append(f"{section}: {exc}")
    res.end = off
    return res


def _walk_entries(reader: Reader, off: int, cend: int, section: str, container: int, res: WalkResult) -> None:
    while off + _ENTRY.size <= cend and len(res.entries) <= MAX_ENTRIES:
        (
            kind,
            _ver,
            hsize,
            padded,
            csize,
            _optoff,
            minor,
            major,
            arch,
            id_off,
            id_len,
            flags,
            _okey,
            usize,
        ) = _ENTRY.unpack(reader.read(off, _ENTRY.size))
        if kind == 0 and hsize == 0:  # zero padding at the end of a container
            break
        if hsize < _ENTRY.size or hsize > MAX_ENTRY_HEADER or hsize % 8:
            res.problems.append(f"{section}: entry at {off:#x} has a bad header size {hsize}")
            return
        payload = off + hsize
        if payload + padded > cend:
            res.problems.append(
                f"{section}: entry at {off:#x} claims {padded} payload bytes, past the end "
                "of its container (truncated?)"
            )
            padded = max(0, cend - payload)
        compressed = bool(flags & (FLAG_LZ4 | FLAG_ZSTD)) and csize > 0
        length = min(csize, padded) if compressed else padded
        identifier = None
        if id_off and id_len and id_len <= 4096 and off + id_off + id_len <= cend:
            identifier = reader.read(off + id_off, id_len).split(b"\0", 1)[0].decode("utf-8", "replace")
        base = RawEntry(
            section,
            container,
            off,
            kind,
            _kind_name(kind),
            arch,
            _suffix(flags),
            major,
            minor,
            flags,
            hsize,
            padded,
            csize if compressed else 0,
            usize if compressed else 0,
            identifier,
            False,
            payload,
            length,
        )
        if kind == 0x100:
            _nested(reader, off, hsize, base, res)
        else:
            res.entries.append(base)
        off = payload + padded


def _nested(reader: Reader, off: int, hsize: int, outer: RawEntry, res: WalkResult) -> None:
    """Kind 0x100 ("concatenated"): ``u32 count`` at +0x40, nested entry headers from +0x48.

    Based on one CUDA 13.5 sample (docs/fatbin.md §3.2): the nested headers' own size field may
    be 0, so the stride is taken from it when sane and otherwise from the space they share.
    """
    if hsize < 0x48:
        res.problems.append(f"{outer.section}: concatenated entry at {off:#x} has no nested headers")
        return
    count = int.from_bytes(reader.read(off + 0x40, 4), "little")
    room = hsize - 0x48
    if count == 0 or count > MAX_NESTED or count * _ENTRY.size > room:
        res.problems.append(f"{outer.section}: concatenated entry at {off:#x} lists {count} nested entries")
        return
    pos = off + 0x48
    default_stride = room // count if room % count == 0 else _ENTRY.size
    for _ in range(count):
        if pos + _ENTRY.size > off + hsize:
            break
        (kind, _ver, nh, padded, csize, _o, minor, major, arch, _io, _il, flags, _k, usize) = _ENTRY.unpack(
            reader.read(pos, _ENTRY.size)
        )
        stride = nh if _ENTRY.size <= nh <= room and nh % 8 == 0 else default_stride
        res.entries.append(
            RawEntry(
                outer.section,
                outer.container,
                pos,
                kind,
                _kind_name(kind),
                arch,
                _suffix(flags),
                major,
                minor,
                flags,
                nh,
                padded,
                csize,
                usize,
                None,
                True,
                0,
                0,
            )
        )
        pos += max(stride, 8)


# ----------------------------------------------------------------------------------------------
# payloads


def payload(reader: Reader, entry: RawEntry) -> bytes | memoryview:
    """The entry's payload, decompressed (PTX text keeps its NUL padding stripped)."""
    if entry.nested or not entry.payload_length:
        raise FatbinParseError("entry has no separately stored payload")
    if entry.payload_length > MAX_PAYLOAD:
        raise FatbinParseError(
            f"payload of {entry.payload_length} bytes: more than {MAX_PAYLOAD} read per entry"
        )
    try:
        raw = reader.view(entry.payload_offset, entry.payload_length)  # (no copy of a held member)
    except ElfParseError as exc:
        raise FatbinParseError(str(exc)) from None
    return decompress(raw, entry.compression, entry.uncompressed_size)


def decompress(
    raw: bytes | memoryview, compression: str | None, uncompressed_size: int
) -> bytes | memoryview:
    if compression is None:
        return raw
    if uncompressed_size <= 0 or uncompressed_size > min(MAX_PAYLOAD, MAX_RATIO * len(raw) + (1 << 20)):
        raise FatbinParseError(
            f"implausible uncompressed size {uncompressed_size} for {len(raw)} compressed bytes"
        )
    try:
        if compression == "lz4":
            import lz4.block

            return lz4.block.decompress(raw, uncompressed_size=uncompressed_size)
        if compression == "zstd":
            import zstandard

            return zstandard.ZstdDecompressor().decompress(raw, max_output_size=uncompressed_size)
    except Exception as exc:  # lz4 raises LZ4BlockError, zstandard ZstdError: both opaque types
        raise FatbinParseError(f"{compression} payload does not decompress: {exc}") from None
    raise FatbinParseError(f"unknown compression {compression}")


_PTX_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$%][\w$.%]*)")


def ptx_kernels(text: bytes | memoryview) -> list[str]:
    """Kernel names (``.entry``) of a PTX text, in order, without duplicates: at most
    :data:`~probe.arch.elf.MAX_KERNELS` of them (:class:`FatbinParseError` past that), a name longer
    than :data:`~probe.arch.elf.MAX_KERNEL_NAME` left out."""
    seen: dict[str, None] = {}
    for m in _PTX_ENTRY.finditer(text):
        if m.end(1) - m.start(1) > MAX_KERNEL_NAME:
            continue
        seen.setdefault(m.group(1).decode("utf-8", "replace"), None)
        if len(seen) > MAX_KERNELS:
            raise FatbinParseError(f"more than {MAX_KERNELS:,} kernel entry points: not listed")
    return list(seen)


def ptx_target(text: bytes) -> str | None:
    m = re.search(rb"^\s*\.target\s+([\w]+)", text[:65536], re.M)
    return m.group(1).decode() if m else None


def ptx_version(text: bytes) -> str | None:
    m = re.search(rb"^\s*\.version\s+(\d+\.\d+)", text[:65536], re.M)
    return m.group(1).decode() if m else None
