"""Read a large ELF that only comes as a forward stream (a deflated wheel member) in one pass.

A deflate stream cannot seek, and an ELF keeps its section table at the end, so the member is
decompressed **once, as a stream**, in 1 MiB chunks: fatbin containers are recognised on the fly
(magic + sane first entry) and walked header by header, the window holding the section table (and
``.shstrtab``, which linkers put just before it) is kept, everything else is dropped. At the end
the section table says which of the walked containers lie in ``.nv_fatbin`` / ``__nv_relfatbin``.
Memory stays at a few MiB per member; the cost is one decompression pass (CPU), which is
unavoidable without unpacking. ``--kernels`` needs payloads: a second streaming pass reads them in
file order.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from probe.arch import elf, fatbin
from probe.arch.describe import add_walk, kernel_index
from probe.arch.records import FileRecord

log = logging.getLogger(__name__)

CHUNK = 1 << 20
SHSTRTAB_WINDOW = 4 << 20


class ByteStream(Protocol):
    """What :class:`ForwardReader` reads from: a zip member's file object or an
    :class:`probe.arch.inflate.RawDeflateStream`."""

    def read(self, n: int = -1, /) -> bytes: ...


#: opens the member again from its start (each call: a new pass)
OpenMember = Callable[[], AbstractContextManager[ByteStream]]


class BackwardRead(elf.ElfParseError):
    """A read before the stream's position (a corrupt layout pointing backwards)."""


class ForwardReader:
    """A :class:`probe.arch.elf.Reader`-compatible view of a stream that only moves forward.

    Bytes inside registered capture windows are kept as they pass, so they can be read later.
    """

    def __init__(self, stream: ByteStream, size: int) -> None:
        self._s = stream
        self.size = size
        self._buf = bytearray()
        self._pos = 0  # absolute offset of _buf[0]
        self._eof = False
        self._windows: list[tuple[int, int, bytearray]] = []

    def capture(self, start: int, end: int) -> None:
        start, end = max(0, start), min(end, self.size)
        if end > start and start >= self._pos:
            self._windows.append((start, end, bytearray()))

    def _fill(self, upto: int) -> None:
        while self._pos + len(self._buf) < upto and not self._eof:
            chunk = self._s.read(CHUNK)
            if not chunk:
                self._eof = True
                break
            self._buf += chunk

    def _drop(self, upto: int) -> None:
        """Forget buffered bytes before absolute offset ``upto``, keeping what windows want."""
        n = min(upto - self._pos, len(self._buf))
        if n <= 0:
            return
        for a, b, data in self._windows:
            lo, hi = max(a, self._pos), min(b, self._pos + n)
            if hi > lo and lo == a + len(data):
                data += self._buf[lo - self._pos : hi - self._pos]
        del self._buf[:n]
        self._pos += n

    def skip_to(self, off: int) -> None:
        if off < self._pos:
            raise BackwardRead(f"stream already past offset {off}")
        while self._pos < off:
            if not self._buf:
                self._fill(self._pos + CHUNK)
                if not self._buf:
                    return
            self._drop(off)

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise elf.ElfParseError(f"truncated: wants bytes {offset}..{offset + length} of {self.size}")
        self.skip_to(offset)
        self._fill(offset + length)
        i = offset - self._pos
        data = bytes(self._buf[i : i + length])
        if len(data) != length:
            raise elf.ElfParseError(f"member ends early at {offset + len(data)} (truncated archive?)")
        return data

    def view(self, offset: int, length: int) -> bytes:
        return self.read(offset, length)

    def read_upto(self, offset: int, length: int) -> bytes:
        if offset >= self.size:
            return b""
        return self.read(offset, min(length, self.size - offset))

    def find(self, pattern: bytes, start: int, align: int = 8) -> int | None:
        """Next ``align``-aligned offset ≥ ``start`` where ``pattern`` begins, or None at the end."""
        self.skip_to(start)
        cur = start
        while True:
            self._fill(cur + CHUNK)
            i = self._buf.find(pattern, cur - self._pos)
            while i >= 0 and (self._pos + i) % align:
                i = self._buf.find(pattern, i + 1)
            if i >= 0:
                return self._pos + i
            if self._eof:
                self._drop(self._pos + len(self._buf))
                return None
            keep_from = max(cur, self._pos + len(self._buf) - len(pattern) + 1)
            keep_from -= keep_from % align
            self._drop(keep_from)
            cur = keep_from

    def window(self, start: int, end: int) -> bytes | None:
        for a, b, data in self._windows:
            if a <= start and end <= a + len(data) and end <= b:
                return bytes(data[start - a : end - a])
        return None

    def finish(self, upto: int | None = None) -> None:
        """Read up to ``upto`` (default: the end), filling the capture windows that lie before it."""
        self.skip_to(self.size if upto is None else min(upto, self.size))


class _SparseReader(elf.Reader):
    """Reads served from captured windows, falling back to a (costly) re-read of the member."""

    def __init__(self, fr: ForwardReader, reopen: OpenMember) -> None:
        super().__init__(self._read_sparse, fr.size)
        self._fr = fr
        self._reopen = reopen

    def _read_sparse(self, off: int, n: int) -> bytes:
        got = self._fr.window(off, off + n)
        if got is not None:
            return got
        log.debug("section data at %d outside the captured window: re-reading the member", off)
        with self._reopen() as s:
            fr = ForwardReader(s, self.size)
            return fr.read(off, n)


def _plausible_container(fr: ForwardReader, off: int) -> bool:
    try:
        head = fr.read(off, 16 + 64)
    except elf.ElfParseError:
        return False
    _m, _v, hsize, fat_size = struct.unpack_from("<IHHQ", head, 0)
    if hsize != 16 or fat_size < 64 or off + 16 + fat_size > fr.size:
        return False
    kind, ver, ehsize, padded = struct.unpack_from("<HHIQ", head, 16)
    return (
        kind in fatbin.KIND_NAMES
        and ver in (0x0101, 0x0001, 0x0100)
        and 64 <= ehsize <= 65536
        and ehsize % 8 == 0
        and ehsize + padded <= fat_size
    )


def _empty_container(fr: ForwardReader, off: int) -> bool:
    try:
        head = fr.read(off, 16)
    except elf.ElfParseError:
        return False
    return struct.unpack_from("<Q", head, 8)[0] == 0


def stream_elf(open_member: OpenMember, size: int, rec: FileRecord, kernels: bool) -> None:
    """One streaming pass over a large deflated ELF member (see the module docstring)."""
    with open_member() as s:
        fr = ForwardReader(s, size)
        head = fr.read_upto(0, 64)
        hdr = elf.parse_header(elf.Reader.from_buffer(head))
        shnum = hdr.e_shnum
        if hdr.e_shoff == 0:
            rec.kind = "elf"
            return
        if shnum == 0:
            shnum = 1  # extended numbering: section 0 holds the count; re-read below if needed
        fr.capture(hdr.e_shoff - SHSTRTAB_WINDOW, hdr.e_shoff + shnum * 64)
        chains: list[fatbin.WalkResult] = []
        starts: list[int] = []
        empties: list[int] = []  # header-only containers (16 bytes, no entries) outside any chain
        pos = 64
        while True:
            off = fr.find(fatbin.CONTAINER_HEAD, pos)
            if off is None:
                break
            if not _plausible_container(fr, off):
                if _empty_container(fr, off):  # nvcc puts one before a PTX-only container
                    empties.append(off)
                pos = off + 8
                continue
            res = fatbin.walk_region(fr, off, size, section="?", chain_only=True)  # type: ignore[arg-type]
            chains.append(res)
            starts.append(off)
            pos = max(res.end, off + 8)
        # Nothing after the section table is needed (it is normally the member's last bytes).
        fr.finish(max(hdr.e_shoff + shnum * 64, pos))
    sparse = _SparseReader(fr, open_member)
    sections = [x for x in elf.parse_sections(sparse, hdr) if x.name in elf.DEVICE_SECTIONS and x.has_bytes]
    rec.kind = "elf"
    kept = _attribute(sections, chains, empties, rec, size)
    if kernels and kept:
        _stream_kernels(open_member, size, rec, kept)


def _attribute(
    sections: list[elf.Section],
    chains: list[fatbin.WalkResult],
    empties: list[int],
    rec: FileRecord,
    size: int,
) -> list[fatbin.RawEntry]:
    """Add the walked chains to ``rec``, section by section; the entries kept.

    Chains may run across adjacent sections (.nv_fatbin is often followed by __nv_relfatbin):
    each entry goes to the section holding its header, containers are renumbered per section."""
    container = 0
    kept: list[fatbin.RawEntry] = []
    problems = [p for res in chains for p in res.problems]
    spans = [(c_off, (ci, j)) for ci, res in enumerate(chains) for j, (c_off, _) in enumerate(res.spans)]
    spans += [(c_off, (-1, c_off)) for c_off in empties]
    spans.sort()
    for sec in sections:
        merged = fatbin.WalkResult()
        remap: dict[tuple[int, int], int] = {}
        for c_off, key in spans:
            if sec.offset <= c_off < sec.offset + sec.size:
                remap[key] = container + len(remap)
        for ci, res in enumerate(chains):
            # number every container whose header lies in the section (empty ones too, as a walk
            # of the section on disk does), then move its entries over
            for e in res.entries:
                key = (ci, e.container)
                if key not in remap or not sec.offset <= e.offset < sec.offset + sec.size:
                    continue
                e.container = remap[key]
                e.section = sec.name
                merged.entries.append(e)
        container += len(remap)
        merged.containers = len(remap)
        if problems:
            merged.problems = [p.replace("?:", f"{sec.name}:") for p in problems]
            problems = []
        kept += merged.entries
        add_walk(elf.Reader(lambda o, n: b"", size), rec, merged, False)
    return kept


def _stream_kernels(open_member: OpenMember, size: int, rec: FileRecord, raws: list[fatbin.RawEntry]) -> None:
    wanted = sorted(
        (r for r in raws if r.kind in ("sass", "ptx") and not r.nested and r.payload_length),
        key=lambda r: r.payload_offset,
    )
    by_offset = {e.offset: e for e in rec.entries}
    with open_member() as s:
        fr = ForwardReader(s, size)
        for r in wanted:
            entry = by_offset.get(r.offset)
            if entry is None:
                continue
            try:
                data = fatbin.payload(fr, r)  # type: ignore[arg-type]
                entry.kernels = elf.cubin_kernels(data) if r.kind == "sass" else fatbin.ptx_kernels(data)
            except (fatbin.FatbinParseError, elf.ElfParseError, BackwardRead) as exc:
                entry.kernels_error = str(exc)
    rec.kernels = kernel_index(rec.entries)
