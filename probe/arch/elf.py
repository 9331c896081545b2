"""ELF reading for device code: host ``.so`` section tables and CUDA cubin headers.

The hot path (section table, cubin ``e_flags``, ``.nv.compat``, ``.note.nv.tkinfo``) is read
with :mod:`struct` through a :class:`Reader` (``os.pread`` on a file descriptor, or slices of a
``bytes``/``mmap`` buffer) so that only headers are touched. pyelftools is used for the symbol
table of a cubin (kernel entry points), which is only needed by ``--kernels``. This is the only
module of probe allowed to import pyelftools (:func:`section_names_pyelftools`, a slow reference
reader used by the tests to cross-check the fast one); every malformed input raises
:class:`ElfParseError`, never a pyelftools or :mod:`struct` exception.

Facts (docs/fatbin.md §6): ``e_machine`` 190 = EM_CUDA; ``EI_ABIVERSION`` 7 keeps the
SM in ``e_flags & 0xFF`` and the ``a`` flag in 0x800; ``EI_ABIVERSION`` 8 keeps the SM in
``(e_flags >> 8) & 0xFF`` and the ``a`` flag in 0x8 (CUDA 12.8/12.9) or in ``.nv.compat``
attribute 0x09 (CUDA 13.x); the ``f`` suffix only shows in the ptxas command line stored in
``.note.nv.tkinfo`` (``-arch sm_100f``). Kernel entry points are ``STT_FUNC`` symbols whose
``st_other`` carries ``STO_CUDA_ENTRY`` (0x10), as ``cuobjdump -symbols`` prints ``ENTRY``.
"""

from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from probe.arch.bytesource import (
    MAX_KERNEL_NAME,
    MAX_KERNELS,
    MAX_NAME_BYTES,
    MAX_SECTION_NAME,
    ElfParseError,
    Reader,
    ReadFn,
    names_at,
)

if TYPE_CHECKING:
    from probe.arch.records import Suffix

__all__ = [  # (Reader, ElfParseError, the name limits: from probe.arch.bytesource, kept importable here)
    "MAX_KERNELS",
    "MAX_KERNEL_NAME",
    "MAX_NAME_BYTES",
    "MAX_SECTION_NAME",
    "ElfParseError",
    "ReadFn",
    "Reader",
    "cubin_info",
    "cubin_kernels",
    "device_sections",
    "names_at",
    "parse_header",
    "parse_sections",
]

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
ET_REL = 1
ET_EXEC = 2
SHT_NOBITS = 8
SHT_NOTE = 7
SHT_SYMTAB = 2
STT_FUNC = 2
SHT_CUDA_COMPAT = 0x70000086
STO_CUDA_ENTRY = 0x10

DEVICE_SECTIONS = (".nv_fatbin", "__nv_relfatbin")

MAX_SECTIONS = 1 << 18  # hard cap on the section count we accept (a cubin of 10,000 kernels: ~50,000)
MAX_SMALL_SECTION = 1 << 20  # .nv.compat / .note.nv.tkinfo / .shstrtab larger than this: corrupt

_EHDR64 = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR64 = struct.Struct("<IIQQQQIIQQ")
_SYM64 = struct.Struct("<IBBHQQ")


@dataclass(frozen=True)
class ElfHeader:
    ei_class: int
    ei_data: int
    osabi: int
    abi_version: int
    e_type: int
    e_machine: int
    e_flags: int
    e_shoff: int
    e_shentsize: int
    e_shnum: int
    e_shstrndx: int

    @property
    def is_cuda(self) -> bool:
        return self.e_machine == EM_CUDA


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int = 0
    info: int = 0
    entsize: int = 0

    @property
    def has_bytes(self) -> bool:
        return self.type != SHT_NOBITS


@dataclass(frozen=True)
class CubinInfo:
    """What a cubin's own ELF says about its target."""

    sm: int
    suffix: Suffix
    abi_version: int  # 7 or 8 (other values are passed through)
    e_type: int  # 1 = ET_REL (-rdc object), 2 = ET_EXEC
    e_flags: int
    toolkit: str | None  # "13.0" from .note.nv.tkinfo / .note.nv.cuinfo, when present
    ptxas_arch: str | None  # "sm_100f" from the ptxas command line in .note.nv.tkinfo


def is_elf(head: bytes) -> bool:
    return head[:4] == ELF_MAGIC


def parse_header(reader: Reader, head: bytes | None = None) -> ElfHeader:
    """The ELF header (``head``: the first 64 bytes when the caller already has them)."""
    if head is None or len(head) < 64:
        head = reader.read_upto(0, 64)
    if len(head) < 4 or head[:4] != ELF_MAGIC:
        raise ElfParseError("not an ELF file")
    if len(head) < 5:
        raise ElfParseError("truncated ELF header")
    if head[4] == 1:
        raise ElfParseError("32-bit ELF (only 64-bit ELF carries CUDA device code here)")
    if head[4] != 2:
        raise ElfParseError(f"bad ELF class {head[4]}")
    if len(head) < 64:
        raise ElfParseError(f"truncated ELF header ({len(head)} of 64 bytes)")
    if head[5] != 1:
        raise ElfParseError("big-endian ELF is not supported")
    (
        ident,
        e_type,
        e_machine,
        _ver,
        _entry,
        _phoff,
        e_shoff,
        e_flags,
        _ehsize,
        _phentsize,
        _phnum,
        e_shentsize,
        e_shnum,
        e_shstrndx,
    ) = _EHDR64.unpack_from(head, 0)
    return ElfHeader(
        ident[4],
        ident[5],
        ident[7],
        ident[8],
        e_type,
        e_machine,
        e_flags,
        e_shoff,
        e_shentsize,
        e_shnum,
        e_shstrndx,
    )


def parse_sections(reader: Reader, hdr: ElfHeader | None = None) -> list[Section]:
    """The section table with names; validates every offset against the data size."""
    if hdr is None:
        hdr = parse_header(reader)
    if hdr.e_shoff == 0:
        return []
    if hdr.e_shentsize != _SHDR64.size:
        raise ElfParseError(f"bad section header size {hdr.e_shentsize}")
    shnum, shstrndx = hdr.e_shnum, hdr.e_shstrndx
    if shnum == 0 or shstrndx == 0xFFFF:  # extended numbering: real values live in section 0
        first = _SHDR64.unpack(reader.read(hdr.e_shoff, _SHDR64.size))
        if shnum == 0:
            shnum = first[5]
        if shstrndx == 0xFFFF:
            shstrndx = first[6]
    if shnum > MAX_SECTIONS or hdr.e_shoff + shnum * _SHDR64.size > reader.size:
        raise ElfParseError(
            f"section table ({shnum} entries at {hdr.e_shoff}) lies outside the file (truncated?)"
        )
    table = reader.read(hdr.e_shoff, shnum * _SHDR64.size)
    raw = [_SHDR64.unpack_from(table, i * _SHDR64.size) for i in range(shnum)]
    names = b""
    if 0 < shstrndx < shnum:
        st = raw[shstrndx]
        if st[1] != SHT_NOBITS and st[5]:
            if st[5] > MAX_SMALL_SECTION * 16:
                raise ElfParseError(f"section name table too large ({st[5]} bytes)")
            names = reader.read(st[4], st[5])
    named = names_at(names, 0, len(names), [r[0] for r in raw], MAX_SECTION_NAME, "section names")
    out: list[Section] = []
    for name_off, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info, _align, sh_entsize in raw:
        name = named.get(name_off, "")
        if sh_type != SHT_NOBITS and sh_size and sh_offset + sh_size > reader.size:
            raise ElfParseError(
                f"section {name or '?'} ({sh_size} bytes at {sh_offset}) extends past the "
                f"end of the file ({reader.size} bytes): truncated?"
            )
        out.append(
            Section(name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info, sh_entsize)
        )
    return out


def device_sections(reader: Reader) -> list[Section]:
    """``.nv_fatbin`` / ``__nv_relfatbin`` sections (with bytes) of a host ELF, in file order."""
    return [s for s in parse_sections(reader) if s.name in DEVICE_SECTIONS and s.has_bytes and s.size]


# ----------------------------------------------------------------------------------------------
# cubin facts

_TKINFO_ARCH = re.compile(rb"-arch[ =]+(sm_\d+[af]?)")
_TKINFO_RELEASE = re.compile(rb"release (\d+\.\d+)")


def _compat_is_arch_specific(data: bytes) -> bool | None:
    """Attribute 0x09 of ``.nv.compat`` (``{u8 format, u8 attr, u16 value}`` records)."""
    i, steps = 0, 0
    while i + 4 <= len(data) and steps < 4096:
        steps += 1
        fmt, attr, value = data[i], data[i + 1], int.from_bytes(data[i + 2 : i + 4], "little")
        if attr == 0x09 and fmt in (2, 3):
            return bool(value & 0xFF)
        i += 4 + (value if fmt == 4 else 0)
    return None


def cubin_sm(hdr: ElfHeader) -> int:
    if hdr.abi_version == 7:
        return hdr.e_flags & 0xFF
    if hdr.abi_version == 8:
        return (hdr.e_flags >> 8) & 0xFF
    low = hdr.e_flags & 0xFF
    return low if 0x14 <= low <= 0x5A else (hdr.e_flags >> 8) & 0xFF


@functools.lru_cache(maxsize=256)
def _types_struct(n: int) -> struct.Struct:
    return struct.Struct("<" + "4xI56x" * n)


def _wanted_sections(reader: Reader, hdr: ElfHeader, types: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """``(type, offset, size)`` of the sections of the given types, with one C-level unpack of all
    section types (this runs once per cubin: it must be cheap)."""
    if hdr.e_shoff == 0:
        return []
    if hdr.e_shentsize != _SHDR64.size:
        raise ElfParseError(f"bad section header size {hdr.e_shentsize}")
    shnum = hdr.e_shnum
    if shnum == 0:
        shnum = _SHDR64.unpack(reader.read(hdr.e_shoff, _SHDR64.size))[5]
    if shnum > MAX_SECTIONS or hdr.e_shoff + shnum * _SHDR64.size > reader.size:
        raise ElfParseError(
            f"section table ({shnum} entries at {hdr.e_shoff}) lies outside the file (truncated?)"
        )
    table = reader.read(hdr.e_shoff, shnum * _SHDR64.size)
    all_types = (
        _types_struct(shnum).unpack(table)
        if shnum <= 4096
        else tuple(t[1] for t in _SHDR64.iter_unpack(table))
    )
    out = []
    for t in types:  # tuple.count / tuple.index run in C: no Python loop over all sections
        i = -1
        for _ in range(all_types.count(t)):
            i = all_types.index(t, i + 1)
            sh = _SHDR64.unpack_from(table, i * _SHDR64.size)
            out.append((i, t, sh[4], sh[5]))
    out.sort()  # section-table order, as before
    return [x[1:] for x in out]


def cubin_info(reader: Reader, hdr: ElfHeader | None = None) -> CubinInfo:
    """Target of a cubin from its ELF header, ``.nv.compat`` and the ``.note.nv.*`` notes.

    Hot path (thousands of cubins per scan): sections are picked by type (SHT_CUDA_COMPAT,
    SHT_NOTE), so neither the name table nor the symbol table is read.
    """
    if hdr is None:
        hdr = parse_header(reader)
    if not hdr.is_cuda:
        raise ElfParseError(f"not a CUDA cubin (e_machine {hdr.e_machine}, expected {EM_CUDA})")
    sm = cubin_sm(hdr)
    if hdr.abi_version == 7:
        arch_specific = bool(hdr.e_flags & 0x800)
    elif hdr.abi_version == 8:
        arch_specific = bool(hdr.e_flags & 0x8)
    else:
        arch_specific = False
    toolkit = ptxas_arch = None
    size = reader.size
    for sh_type, sh_offset, sh_size in _wanted_sections(reader, hdr, (SHT_CUDA_COMPAT, SHT_NOTE)):
        if not sh_size or sh_size > MAX_SMALL_SECTION or sh_offset + sh_size > size:
            if sh_size and sh_offset + sh_size > size:
                raise ElfParseError(
                    f"section at {sh_offset} ({sh_size} bytes) extends past the end of the "
                    f"file ({size} bytes): truncated?"
                )
            continue
        data = reader.read(sh_offset, sh_size)
        if sh_type == SHT_CUDA_COMPAT:
            if _compat_is_arch_specific(data):
                arch_specific = True
            continue
        if len(data) < 12:
            continue
        note_type = int.from_bytes(data[8:12], "little")
        if note_type == 2000:  # .note.nv.tkinfo: the ptxas command line
            if m := _TKINFO_ARCH.search(data):
                ptxas_arch = m.group(1).decode()
            if m := _TKINFO_RELEASE.search(data):
                toolkit = m.group(1).decode()
        elif note_type == 1000 and toolkit is None:  # .note.nv.cuinfo: u16 2, u16 sm, u16 toolkit*10
            namesz = int.from_bytes(data[0:4], "little")
            d = 12 + ((namesz + 3) & ~3)
            if d + 6 <= len(data):
                tk = int.from_bytes(data[d + 4 : d + 6], "little")
                if tk:
                    toolkit = f"{tk // 10}.{tk % 10}"
    suffix: Suffix = "a" if arch_specific else ""
    if ptxas_arch and ptxas_arch.endswith("f") and not arch_specific:
        suffix = "f"
    elif ptxas_arch and ptxas_arch.endswith("a"):
        suffix = "a"
    return CubinInfo(sm, suffix, hdr.abi_version, hdr.e_type, hdr.e_flags, toolkit, ptxas_arch)


def cubin_kernels(data: bytes | bytearray | memoryview) -> list[str]:
    """Mangled names of the kernel entry points of a cubin (``STT_FUNC`` symbols whose ``st_other``
    has ``STO_CUDA_ENTRY``, shown as ``ENTRY`` by ``cuobjdump -symbols``), in symbol-table order,
    without duplicates. pyelftools does not decode bit 0x10 of ``st_other`` (it keeps only the
    visibility bits), so the symbol table is read with :mod:`struct` here as well."""
    reader = Reader.from_buffer(data)
    hdr = parse_header(reader)
    if not hdr.is_cuda:
        raise ElfParseError(f"payload is not a CUDA cubin (e_machine {hdr.e_machine})")
    sections = parse_sections(reader, hdr)
    names: list[str] = []
    seen: set[str] = set()
    mv = memoryview(data)
    for sec in sections:
        if sec.type != SHT_SYMTAB or not sec.size:
            continue
        if sec.entsize not in (0, _SYM64.size) or not 0 < sec.link < len(sections):
            raise ElfParseError(f"bad symbol table {sec.name!r}")
        strtab = sections[sec.link]
        # the tables are read in place (no copy of a 256 MiB cubin's sections), entry points first
        table = mv[sec.offset : sec.offset + sec.size - sec.size % _SYM64.size]
        wanted: list[int] = []
        for st_name, st_info, st_other, _shndx, _value, _size in _SYM64.iter_unpack(table):
            if st_info & 0xF == STT_FUNC and st_other & STO_CUDA_ENTRY:
                if len(wanted) >= 2 * MAX_KERNELS:
                    raise ElfParseError(f"more than {MAX_KERNELS:,} kernel entry points: not listed")
                wanted.append(st_name)
        if not strtab.has_bytes or not wanted:
            continue
        strings = data if not isinstance(data, memoryview) else reader.read(strtab.offset, strtab.size)
        base = 0 if strings is not data else strtab.offset
        found = names_at(strings, base, base + strtab.size, wanted, MAX_KERNEL_NAME, "symbol table")
        for st_name in wanted:
            name = found.get(st_name)
            if name and name not in seen:
                if len(names) >= MAX_KERNELS:
                    raise ElfParseError(f"more than {MAX_KERNELS:,} kernel entry points: not listed")
                seen.add(name)
                names.append(name)
    return names


def section_names_pyelftools(data: bytes) -> list[tuple[str, int, int]]:
    """``(name, offset, size)`` of every section, read by pyelftools (reference implementation)."""
    import io

    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        elf = ELFFile(io.BytesIO(data))
        return [(s.name, s["sh_offset"], s["sh_size"]) for s in elf.iter_sections()]
    except (
        ELFError,
        struct.error,
        ValueError,
        KeyError,
        IndexError,
        TypeError,
        AttributeError,
        UnicodeDecodeError,
        OverflowError,
        AssertionError,
        RecursionError,
    ) as exc:
        raise ElfParseError(f"pyelftools: {type(exc).__name__}: {exc}") from None
