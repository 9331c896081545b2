"""Hostile inputs of the second round, generated: zip members that lie about their size (bzip2 / LZMA),
zips whose end record and central directory disagree, tar layers of a million members or of piled-up
pax headers, ELF files whose name tables have no end, overlapping device sections, fatbins of header-only
entries, PTX of millions of entries, and matrices shaped to hurt the cell reader.

Written with the standard library; what is big inflated is small on disk (a run of zeros compresses to
almost nothing), and what takes seconds to compress is made once per test session.
"""

from __future__ import annotations

import bz2
import functools
import json
import lzma
import struct
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from tests.hostile.inputs import EM_CUDA, EM_X86_64, MATRIX, elf_head

BLOCK = 512


# ------------------------------------------------------------------ zip


@functools.cache
def zeros_compressed(method: int, size: int) -> bytes:
    """``size`` zero bytes compressed the way a zip member of ``method`` stores them (cached: a few
    seconds per GB)."""
    chunk = bytes(1 << 20)
    if method == zipfile.ZIP_BZIP2:
        c = bz2.BZ2Compressor(9)
        head = b""
    else:  # zip's LZMA: u8 version, u8 minor, u16 properties size, the properties, raw LZMA1
        flt = {"id": lzma.FILTER_LZMA1, "preset": 1}
        props = lzma._encode_filter_properties(flt)  # type: ignore[attr-defined]
        c = lzma.LZMACompressor(lzma.FORMAT_RAW, filters=[flt])
        head = struct.pack("<BBH", 9, 4, len(props)) + props
    out = [head]
    left = size
    while left:
        n = min(left, len(chunk))
        out.append(c.compress(chunk[:n]))
        left -= n
    out.append(c.flush())
    return b"".join(out)


def _zip(out: Path, entries: list[tuple[str, int, bytes, int, int, int]]) -> Path:
    """A zip of (name, method, stored bytes, declared size, crc, flags) entries, written by hand so the
    sizes it declares are whatever the entry says."""
    with open(out, "wb") as f:
        central = b""
        for name, method, payload, usize, crc, flags in entries:
            off = f.tell()
            nb = name.encode()
            ver = 46 if method == zipfile.ZIP_BZIP2 else 63 if method == zipfile.ZIP_LZMA else 20
            f.write(
                struct.pack(
                    "<IHHHHHIIIHH", 0x04034B50, ver, flags, method, 0, 0, crc, len(payload), usize, len(nb), 0
                )
            )
            f.write(nb + payload)
            central += (
                struct.pack(
                    "<IHHHHHHIIIHHHHHII",
                    0x02014B50,
                    ver,
                    ver,
                    flags,
                    method,
                    0,
                    0,
                    crc,
                    len(payload),
                    usize,
                    len(nb),
                    0,
                    0,
                    0,
                    0,
                    0,
                    off,
                )
                + nb
            )
        cd_off = f.tell()
        f.write(central)
        f.write(
            struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), cd_off, 0)
        )
    return out


def lying_wheel(out: Path, member: str, method: int, real_size: int, declared: int) -> Path:
    """A wheel whose device-code ``member`` (``method``: bzip2 or LZMA) declares ``declared`` bytes
    and inflates to ``real_size`` (an ELF header, then zeros)."""
    meta = b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
    dist = "-".join(out.name.split("-")[:2]) + ".dist-info/WHEEL"
    payload = zeros_compressed(method, real_size)
    return _zip(
        out, [(dist, 0, meta, len(meta), zlib.crc32(meta), 0), (member, method, payload, declared, 0, 0)]
    )


def zip_with_hidden_members(out: Path, members: int) -> Path:
    """A wheel whose end record says 2 members while its central directory holds ``members``."""
    meta = b"Wheel-Version: 1.0\n"
    with open(out, "wb") as f:
        f.write(
            struct.pack(
                "<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, zlib.crc32(meta), len(meta), len(meta), 20, 0
            )
            + b"x-1.0.dist-info/WHEEL"[:20]
            + meta
        )
        cd_off = f.tell()
        entry = struct.Struct("<IHHHHHHIIIHHHHHII")
        parts = []
        for i in range(members):
            name = b"x-1.0.dist-info/WHEEL" if i == 0 else f"x/m{i:07d}.py".encode()
            parts.append(
                entry.pack(0x02014B50, 20, 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0, 0, 0, 0, 0, 0) + name
            )
        central = b"".join(parts)
        f.write(central)
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 2, 2, len(central), cd_off, 0))
    return out


# ------------------------------------------------------------------ tar


def tar_header(name: str, size: int = 0, typ: str = "0", linkname: str = "") -> bytes:
    """One ustar header block (names up to 100 bytes: longer ones go in pax headers)."""
    h = bytearray(BLOCK)
    h[0:100] = name.encode()[:100].ljust(100, b"\0")
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = f"{size:011o}\0".encode()
    h[136:148] = b"15000000000\0"
    h[148:156] = b" " * 8
    h[156:157] = typ.encode()
    h[157:257] = linkname.encode()[:100].ljust(100, b"\0")
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[148:156] = f"{sum(h):06o}\0 ".encode()
    return bytes(h)


def pax_block(records: dict[str, str]) -> bytes:
    """A pax ``x`` header with its records, padded."""
    body = b""
    for k, v in records.items():
        rec = f" {k}={v}\n".encode()
        n = len(rec)
        while len(str(n).encode()) + len(rec) != n:
            n = len(str(n).encode()) + len(rec)
        body += str(n).encode() + rec
    return tar_header("././@PaxHeader", len(body), "x") + body + bytes(-len(body) % BLOCK)


def gzip_layer(out: Path, pieces: Iterable[bytes]) -> Path:
    """A gzip layer of the tar made of ``pieces`` (the end-of-archive blocks added)."""
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(out, "wb") as f:
        for p in pieces:
            f.write(z.compress(p))
        f.write(z.compress(bytes(2 * BLOCK)))
        f.write(z.flush())
    return out


def many_members(n: int) -> Iterator[bytes]:
    for i in range(n):
        yield tar_header(f"usr/share/d{i % 1000:03d}/f{i:07d}")


def piled_pax(headers: int, record_bytes: int) -> Iterator[bytes]:
    """``headers`` pax headers of distinct keys (``record_bytes`` each) before one member."""
    for i in range(headers):
        yield pax_block({f"PROBE.k{i}": "v" * record_bytes})
    yield tar_header("usr/lib/x.so", 0)


# ------------------------------------------------------------------ ELF / fatbin / PTX

_SHDR = struct.Struct("<IIQQQQIIQQ")


def host_elf(sections: list[tuple[int, int, int, int]], blobs: bytes, *, shstrndx: int) -> bytes:
    """A 64-bit x86-64 ELF: its data ``blobs`` from offset 64, then the section table of
    (name offset, type, offset, size) rows (offsets in the file)."""
    shoff = 64 + len(blobs)
    shoff += -shoff % 8
    head = bytearray(elf_head(EM_X86_64, shoff=shoff))
    rows = [_SHDR.pack(n, t, 0, 0, off, size, 0, 0, 1, 0) for n, t, off, size in sections]
    if len(sections) < 0xFF00:
        struct.pack_into("<HHH", head, 58, 64, len(sections), shstrndx)
    else:  # extended numbering: the count and the name table's index in section 0
        struct.pack_into("<HHH", head, 58, 64, 0, 0xFFFF)
        rows[0] = _SHDR.pack(0, 0, 0, 0, 0, len(sections), shstrndx, 0, 0, 0)
    table = b"".join(rows)
    return bytes(head) + blobs + bytes(shoff - 64 - len(blobs)) + table


def elf_with_endless_names(sections: int, table_bytes: int) -> bytes:
    """A host ELF whose section name table has no NUL and whose ``sections`` rows all point into it
    (each name lookup used to read to the end of the table)."""
    names = b"n" * table_bytes
    rows = [(0, 0, 0, 0)] + [(i % table_bytes, 1, 64, 16) for i in range(1, sections - 1)]
    rows.append((0, 3, 64, len(names)))  # the name table itself, last
    return host_elf(rows, names, shstrndx=sections - 1)


def fatbin_container(entries: Iterable[bytes]) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def header_only_entry(arch: int = 90) -> bytes:
    """A 64-byte fatbin entry header with no payload (kind SASS)."""
    return struct.pack("<HHIQIIHHIIIQQQ", 2, 0x0101, 64, 0, 0, 0, 0, 0, arch, 0, 0, 0, 0, 0)


def elf_with_overlapping_fatbins(copies: int, entries: int) -> bytes:
    """A host ELF whose ``copies`` ``.nv_fatbin`` sections all cover one fatbin of ``entries`` entries."""
    fat = fatbin_container(header_only_entry() for _ in range(entries))
    names = b"\0.nv_fatbin\0.shstrtab\0"
    data = fat + names
    rows = [(0, 0, 0, 0)] + [(1, 1, 64, len(fat)) for _ in range(copies)]
    rows.append((12, 3, 64 + len(fat), len(names)))
    return host_elf(rows, data, shstrndx=len(rows) - 1)


def cubin_with_endless_symbols(symbols: int, strtab_bytes: int) -> bytes:
    """A cubin whose ``symbols`` kernel entry points all name offsets of a string table without NUL."""
    strtab = b"k" * strtab_bytes
    sym = struct.Struct("<IBBHQQ")
    symtab = sym.pack(0, 0, 0, 0, 0, 0) + b"".join(
        sym.pack(i % strtab_bytes, 0x12, 0x10, 1, 0, 0) for i in range(symbols)
    )
    names = b"\0.shstrtab\0.strtab\0.symtab\0"
    data = strtab + symtab + names
    o1, o2 = 64, 64 + len(strtab)
    o3 = o2 + len(symtab)
    rows = [
        (0, 0, 0, 0, 0, 0),
        (11, 3, o1, len(strtab), 0, 0),  # .strtab
        (19, 2, o2, len(symtab), 1, 24),  # .symtab, linked to .strtab
        (1, 3, o3, len(names), 0, 0),  # .shstrtab
    ]
    shoff = 64 + len(data)
    shoff += -shoff % 8
    head = bytearray(elf_head(EM_CUDA, shoff=shoff))
    struct.pack_into("<I", head, 48, 0x5A)  # e_flags: sm_90
    head[8] = 7  # EI_ABIVERSION 7
    struct.pack_into("<HHH", head, 58, 64, len(rows), 3)
    table = b"".join(
        _SHDR.pack(n, t, 0, 0, off, size, link, 0, 1, ent) for n, t, off, size, link, ent in rows
    )
    return bytes(head) + data + bytes(shoff - 64 - len(data)) + table


def ptx_with_entries(n: int) -> bytes:
    return b".version 8.0\n.target sm_90\n.address_size 64\n" + b"".join(
        b".entry k%d()\n{\n}\n" % i for i in range(n)
    )


# ------------------------------------------------------------------ matrices


def base_matrix() -> dict:
    return json.loads(MATRIX.read_text())


def matrix_of_cells(path: Path, cells: int) -> Path:
    """A matrix of ``cells`` minimal cells (valid, distinct ids), written compactly."""
    doc = base_matrix()
    del doc["cells"]
    head = json.dumps(doc)[:-1]
    cell = '{"id": "c%d", "kind": "moe", "outcome": "not_run", "evidence": "predicted"}'
    with open(path, "w") as f:
        f.write(head + ', "cells": [')
        f.write(",".join(cell % i for i in range(cells)))
        f.write("]}")
    return path


def matrix_with_huge_string(path: Path, megabytes: int) -> Path:
    doc = base_matrix()
    doc["cells"][0]["log_excerpt"] = "HUGE"
    text = json.dumps(doc, indent=1)
    before, after = text.split('"HUGE"', 1)
    with open(path, "w") as f:
        f.write(before + '"')
        chunk = "x" * (1 << 20)
        for _ in range(megabytes):
            f.write(chunk)
        f.write('"' + after)
    return path


def matrix_changing_indent(path: Path, cells: int) -> Path:
    """A matrix whose first cell is laid out as probe writes it and every later one on a line of its own
    (indented as probe indents a cell, closed on the same line): the cell reader used to search the
    rest of the file for a closing ``\n  }`` once per cell."""
    doc = base_matrix()
    src = doc.pop("cells")
    head = json.dumps(doc, indent=1)
    with open(path, "w") as f:
        f.write(head[: head.rfind("}")].rstrip() + ',\n "cells": [\n')
        for i in range(cells):
            c = dict(src[i % len(src)])
            c["id"] = f"{c['id']}#{i}"
            text = json.dumps(c, indent=1).replace("\n", "\n  ") if i == 0 else json.dumps(c)
            f.write(("" if i == 0 else ",\n") + "  " + text)
        f.write("\n ]\n}\n")
    return path
