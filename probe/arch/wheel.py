"""Scan the device code of a ``.whl`` straight from the zip archive, without unpacking to disk.

Per member (``.so``/``.so.N``/``.cubin``/``.fatbin``/``.ptx``):

- **stored** members: the member's bytes lie uncompressed in the archive, so they are read with
  ``os.pread`` at ``data_offset + x`` — headers only, exactly as for a file on disk;
- **small deflated** members (≤ ``SMALL_MEMBER`` bytes): decompressed into memory;
- **large deflated** members: a deflate stream cannot seek, and an ELF keeps its section table
  at the end, so the member is decompressed **once, as a stream**, in 1 MiB chunks: fatbin
  containers are recognised on the fly (magic + sane first entry) and walked header by header,
  the window holding the section table (and ``.shstrtab``, which linkers put just before it) is
  kept, everything else is dropped. At the end the section table says which of the walked
  containers lie in ``.nv_fatbin`` / ``__nv_relfatbin``. Memory stays at a few MiB per member;
  the cost is one decompression pass (CPU), which is unavoidable without unpacking.
  ``--kernels`` needs payloads: a second streaming pass reads them in file order.
"""

# ruff: noqa: PTH100, PTH119, PTH202
# (paths stay str on the scan's hot path: os.path is several times cheaper than pathlib)

from __future__ import annotations

import functools
import logging
import os
import re
import struct
import threading
import zipfile
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from probe.arch import elf, fatbin
from probe.arch.model import FileRecord

log = logging.getLogger(__name__)

SMALL_MEMBER = 16 << 20
WHEEL_THREADS = min(4, os.cpu_count() or 1)
CHUNK = 1 << 20
IN_CHUNK = 4 << 20  # compressed bytes per inflate call (few calls: few GIL hand-overs)
OUT_MAX = 16 << 20  # inflated bytes per call at most
SHSTRTAB_WINDOW = 4 << 20
MEMBER_RE = re.compile(r"(\.so(\.\d+)*|\.cubin|\.fatbin|\.ptx)$")
_WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<ver>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


class BackwardRead(elf.ElfParseError):
    """A read before the stream's position (a corrupt layout pointing backwards)."""


class ForwardReader:
    """A :class:`probe.arch.elf.Reader`-compatible view of a stream that only moves forward.

    Bytes inside registered capture windows are kept as they pass, so they can be read later.
    """

    def __init__(self, stream: IO[bytes], size: int) -> None:
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


#: inflaters, fastest first (vLLM 0.33.0's FA2 member, 307 MB, one core of this project's dev box:
#: zlib 333-345 MB/s, zlib-ng 514-575 MB/s, python-isal 511-594 MB/s; all three release the GIL,
#: so members inflate in parallel). zlib-ng / isal are optional (``pip install probe[fast]``
#: installs zlib-ng); zlib is the fallback.
#: ``PROBE_INFLATE=zlib|zlib-ng|isal`` forces one (benchmarks).
INFLATERS = ("zlib-ng", "isal", "zlib")
INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error,)


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


def _inflate_error_types() -> tuple[type[Exception], ...]:
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


class _RawDeflateStream:
    """Decompressed bytes of a deflated member, read with ``os.pread`` on the archive: no shared
    file position (thread-safe), no CRC pass (a corrupt stream still fails in the inflater)."""

    def __init__(self, fd: int, data_offset: int, compressed_size: int) -> None:
        self._fd = fd
        self._pos = data_offset
        self._end = data_offset + compressed_size
        self._z = inflater()[1].decompressobj(-15)
        self._pending = b""
        self._done = False

    def read(self, n: int = CHUNK) -> bytes:
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

    def __enter__(self) -> _RawDeflateStream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _SparseReader(elf.Reader):
    """Reads served from captured windows, falling back to a (costly) re-read of the member."""

    def __init__(self, fr: ForwardReader, reopen: Callable[[], IO[bytes]]) -> None:
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


def _stream_elf(open_member: Callable[[], IO[bytes]], size: int, rec: FileRecord, kernels: bool) -> None:
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
    from probe.arch.scan import _add_walk

    # Chains may run across adjacent sections (.nv_fatbin is often followed by __nv_relfatbin):
    # attribute each entry to the section holding its header, renumber containers per section.
    container = 0
    kept: list[fatbin.RawEntry] = []
    problems = [p for res in chains for p in res.problems]
    for sec in sections:
        merged = fatbin.WalkResult()
        remap: dict[tuple[int, int], int] = {}
        spans = [(c_off, (ci, j)) for ci, res in enumerate(chains) for j, (c_off, _) in enumerate(res.spans)]
        spans += [(c_off, (-1, c_off)) for c_off in empties]
        spans.sort()
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
        _add_walk(elf.Reader(lambda o, n: b"", size), rec, merged, False)
    if kernels and kept:
        _stream_kernels(open_member, size, rec, kept)


def _stream_kernels(
    open_member: Callable[[], IO[bytes]], size: int, rec: FileRecord, raws: list[fatbin.RawEntry]
) -> None:
    from probe.arch.scan import kernel_index

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


def _data_offset(zf_fd: int, info: zipfile.ZipInfo) -> int:
    local = os.pread(zf_fd, 30, info.header_offset)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile("bad local file header")
    name_len, extra_len = struct.unpack_from("<HH", local, 26)
    return info.header_offset + 30 + name_len + extra_len


def wheel_package(path: str) -> str | None:
    m = _WHEEL_NAME.match(os.path.basename(path))
    return m.group("name").replace("_", "-").lower() if m else None


def scan_wheel(path: str, *, kernels: bool = False, cache: object | None = None) -> list[FileRecord]:
    """One record per device-code member (path ``<wheel>!<member>``); a bad archive gives one
    record for the wheel itself, carrying the error."""
    from probe.arch.cache import ScanCache, stat_key
    from probe.arch.scan import describe

    key = stat_key(path, kernels, member="*") if isinstance(cache, ScanCache) else None
    if key and isinstance(cache, ScanCache):
        hit = cache.get_many(key)
        if hit is not None:
            return hit
    package = wheel_package(path)
    bad = FileRecord(path=path, kind="wheel", package=package)
    try:
        bad.size = os.path.getsize(path)
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        bad.error = "file vanished or does not exist"
        return [bad]
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        bad.error = f"not a zip archive: {exc}"
        return [bad]
    except OSError as exc:
        bad.error = f"cannot read: {exc.strerror or exc}"
        return [bad]
    names = zf.namelist()
    if not any(n.endswith(".dist-info/WHEEL") for n in names) or package is None:
        zf.close()
        bad.error = "not a wheel (a zip without *.dist-info/WHEEL or with a non-wheel file name)"
        return [bad]
    members = [i for i in zf.infolist() if not i.is_dir() and MEMBER_RE.search(i.filename)]
    prefix = os.path.abspath(path)
    local = threading.local()
    handles: list[zipfile.ZipFile] = [zf]
    main_thread = threading.get_ident()

    def archive() -> zipfile.ZipFile:
        """The calling thread's handle (zipfile handles share one file position)."""
        if threading.get_ident() == main_thread:
            return zf
        if not hasattr(local, "zf"):
            local.zf = zipfile.ZipFile(path)
            handles.append(local.zf)
        return local.zf

    def one(infos: list[zipfile.ZipInfo]) -> list[FileRecord]:
        out = []
        fd = os.open(path, os.O_RDONLY)
        try:
            for info in infos:
                rec = FileRecord(path=f"{prefix}!{info.filename}", package=package, size=info.file_size)
                try:
                    _scan_member(archive, fd, info, rec, kernels, describe)
                except (zipfile.BadZipFile, *_inflate_error_types(), EOFError, OSError, NotImplementedError,
                        RuntimeError) as exc:
                    rec.error = f"cannot read member: {exc}"
                except (elf.ElfParseError, fatbin.FatbinParseError) as exc:
                    rec.error = str(exc)
                out.append(rec)
        finally:
            os.close(fd)
        return out

    # Large deflated members cost one zlib pass each (zlib releases the GIL): spread them over
    # threads, biggest first; small members go together in one batch.
    big = sorted((i for i in members if i.file_size > SMALL_MEMBER), key=lambda i: -i.file_size)
    small = [i for i in members if i.file_size <= SMALL_MEMBER]
    batches = [[i] for i in big] + ([small] if small else [])
    workers = min(WHEEL_THREADS, len(batches))
    try:
        if workers > 1:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                done = [r for part in pool.map(one, batches) for r in part]
        else:
            done = [r for b in batches for r in one(b)]
    except (zipfile.BadZipFile, OSError) as exc:
        bad.error = f"cannot read: {exc}"
        return [bad]
    finally:
        for h in handles:
            h.close()
    order = {i.filename: n for n, i in enumerate(members)}
    records = sorted(done, key=lambda r: order[r.path.rsplit("!", 1)[1]])
    if key and isinstance(cache, ScanCache):
        cache.put_many(key, records)
    return records


def _scan_member(
    archive: Callable[[], zipfile.ZipFile],
    fd: int,
    info: zipfile.ZipInfo,
    rec: FileRecord,
    kernels: bool,
    describe: Callable[..., None],
) -> None:
    if info.file_size == 0:
        rec.error = "empty file"
        return
    if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 0x1:
        base = _data_offset(fd, info)
        if base + info.file_size > os.fstat(fd).st_size:
            rec.error = "member extends past the end of the archive (truncated wheel)"
            return
        reader = elf.Reader(lambda off, n: os.pread(fd, n, base + off), info.file_size)
        describe(reader, rec, name=info.filename, kernels=kernels)
        return
    is_so = info.filename.endswith(".so") or ".so." in info.filename
    raw_deflate = info.compress_type == zipfile.ZIP_DEFLATED and not info.flag_bits & 0x1
    if info.file_size > SMALL_MEMBER and is_so:
        if raw_deflate:  # (no second ZipFile per thread: parsing a big wheel's directory costs ~0.1 s)
            head = _RawDeflateStream(fd, _data_offset(fd, info), info.compress_size).read()[:64]
        else:
            with archive().open(info) as s:
                head = s.read(64)
        if not elf.is_elf(head):
            rec.kind = "other"
            rec.error = "not an ELF file"
            return
        is_cubin = len(head) >= 20 and int.from_bytes(head[18:20], "little") == elf.EM_CUDA
        if not is_cubin:
            if raw_deflate:
                base = _data_offset(fd, info)
                _stream_elf(lambda: _RawDeflateStream(fd, base, info.compress_size), info.file_size, rec,
                            kernels)  # type: ignore[arg-type, return-value]
            else:
                _stream_elf(lambda: archive().open(info), info.file_size, rec, kernels)
            return
    if info.file_size > 1 << 30:
        rec.error = "member larger than 1 GiB: not read"
        return
    if raw_deflate:
        data = inflate_member(fd, _data_offset(fd, info), info.compress_size, info.file_size)
    else:
        data = archive().read(info)
    describe(elf.Reader.from_buffer(data), rec, name=info.filename, kernels=kernels)
