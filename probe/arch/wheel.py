"""Scan the device code of a ``.whl`` straight from the zip archive, without unpacking to disk.

Per member (``.so``/``.so.N``/``.cubin``/``.fatbin``/``.ptx``):

- **stored** members: the member's bytes lie uncompressed in the archive, so they are read with
  ``os.pread`` at ``data_offset + x`` — headers only, exactly as for a file on disk;
- **small deflated** members (≤ ``SMALL_MEMBER`` bytes): decompressed into memory
  (:mod:`probe.arch.inflate`);
- **large deflated** ELF members: decompressed once, as a stream, and read in that one pass
  (:mod:`probe.arch.elfstream`);
- bzip2 / LZMA members the same way, through :mod:`probe.arch.zipmember` (never through
  :mod:`zipfile`, whose readers inflate a compressed piece whole, however far it expands): a member
  is never inflated past the size it declares.

Bounds (:mod:`probe.arch.limits`): at most ``MAX_ARCHIVE_MEMBERS`` members (the entries of the central
directory counted one by one before :mod:`zipfile` parses it — the end record's count is only a claim
— and a central directory of at most 64 MiB); a member is held in memory up to ``MAX_HELD``
bytes; a member declaring more than ``MAX_EXPANSION`` times its compressed size (past
``SMALL_MEMBER``) is a decompression bomb and is not inflated, nor is a wheel whose device-code
members do so together (past ``WHEEL_EXPANSION_FLOOR``) or share compressed bytes (overlapping
members: the same bytes inflated again and again).
"""

# ruff: noqa: PTH100, PTH119, PTH202
# (paths stay str on the scan's hot path: os.path is several times cheaper than pathlib)

from __future__ import annotations

import itertools
import os
import re
import zipfile
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from probe.arch import elf, fatbin
from probe.arch.describe import describe, not_a_library
from probe.arch.elfstream import stream_elf
from probe.arch.inflate import inflate_error_types
from probe.arch.inputs import open_regular
from probe.arch.limits import (
    MAX_ARCHIVE_MEMBERS,
    MAX_EXPANSION,
    MAX_HELD,
    WHEEL_EXPANSION_FLOOR,
    size_text,
)
from probe.arch.records import FileRecord
from probe.arch.zipmember import (
    MemberError,
    central_directory_count,
    data_offset,
    member_stream,
    read_member,
)

if TYPE_CHECKING:
    from probe.arch.scan_cache import ScanCache

SMALL_MEMBER = 16 << 20
WHEEL_THREADS = min(4, os.cpu_count() or 1)
MEMBER_RE = re.compile(r"(\.so(\.\d+)*|\.cubin|\.fatbin|\.ptx)$")
#: a member that cannot be read (besides the inflater's own errors): its record carries the error
_READ_ERRORS: tuple[type[Exception], ...] = (
    zipfile.BadZipFile,
    EOFError,
    OSError,
    NotImplementedError,
    RuntimeError,
)
_WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<ver>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


def wheel_package(path: str) -> str | None:
    m = _WHEEL_NAME.match(os.path.basename(path))
    return m.group("name").replace("_", "-").lower() if m else None


def scan_wheel(
    path: str,
    *,
    kernels: bool = False,
    cache: ScanCache | None = None,
    expect: tuple[int, int] | None = None,
) -> list[FileRecord]:
    """One record per device-code member (path ``<wheel>!<member>``); a bad archive gives one
    record for the wheel itself, carrying the error. ``expect``: the (device, inode) the walk judged
    (another file found at ``path`` now is not read)."""
    from probe.arch.scan_cache import stat_key

    key = stat_key(path, kernels, member="*", expect=expect) if cache is not None else None
    if key and cache is not None:
        hit = cache.get_many(key)
        if hit is not None:
            return hit
    bad = FileRecord(path=path, kind="wheel", package=wheel_package(path))
    zf = _open_wheel(path, bad, expect)
    if zf is None:
        return [bad]
    try:
        members = _Members(path, zf, bad.package or "", kernels, expect)
        bad.error = members.bomb()
        if bad.error:
            _close(zf)
            return [bad]
        records = members.scan()
    except (zipfile.BadZipFile, OSError) as exc:
        _close(zf)
        bad.error = f"cannot read: {exc}"
        return [bad]
    if key and cache is not None:
        cache.put_many(key, records)
    return records


def _open_wheel(path: str, bad: FileRecord, expect: tuple[int, int] | None) -> zipfile.ZipFile | None:
    """The open archive, or None with ``bad.error`` set (unreadable, not a zip, not a wheel)."""
    try:
        bad.size = os.path.getsize(path)
        n = zip_member_count(path)
        if n > MAX_ARCHIVE_MEMBERS:
            bad.error = f"a zip of {n:,} members (more than {MAX_ARCHIVE_MEMBERS:,}): not read"
            return None
        f = os.fdopen(_open_checked(path, expect), "rb")
        try:
            zf = zipfile.ZipFile(f)
        except BaseException:
            f.close()
            raise
    except MemberError as exc:
        bad.error = f"{exc}: not read"
        return None
    except FileNotFoundError:
        bad.error = "file vanished or does not exist"
        return None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        bad.error = f"not a zip archive: {exc}"
        return None
    except OSError as exc:
        bad.error = f"cannot read: {exc.strerror or exc}"
        return None
    if not any(n.endswith(".dist-info/WHEEL") for n in zf.namelist()) or bad.package is None:
        _close(zf)
        bad.error = "not a wheel (a zip without *.dist-info/WHEEL or with a non-wheel file name)"
        return None
    return zf


def zip_member_count(path: str) -> int:
    """The members the archive's central directory holds (0 when there is no end record: zipfile says
    why), counted entry by entry before the central directory is parsed into memory (at most
    ``MAX_ARCHIVE_MEMBERS + 1`` are counted)."""
    return central_directory_count(path, MAX_ARCHIVE_MEMBERS)


def _close(zf: zipfile.ZipFile) -> None:
    """Close the archive and the file it was opened on (zipfile leaves a file it was given open)."""
    f = zf.fp
    zf.close()
    if f is not None:
        f.close()


def _open_checked(path: str, expect: tuple[int, int] | None) -> int:
    """A descriptor of the wheel, a regular file; with ``expect``, the very file the walk judged."""
    fd = open_regular(path)
    st = os.fstat(fd)
    if expect is not None and (st.st_dev, st.st_ino) != expect:
        os.close(fd)
        raise zipfile.BadZipFile("replaced while the scan ran (not the file the walk found)")
    return fd


class _Members:
    """The device-code members of one open wheel, read by up to ``WHEEL_THREADS`` threads."""

    def __init__(
        self, path: str, zf: zipfile.ZipFile, package: str, kernels: bool, expect: tuple[int, int] | None
    ) -> None:
        self.path = path
        self.prefix = os.path.abspath(path)
        self.package = package
        self.kernels = kernels
        self.members = [i for i in zf.infolist() if not i.is_dir() and MEMBER_RE.search(i.filename)]
        self._zf = zf
        self._expect = expect

    def bomb(self) -> str | None:
        """Why the device-code members are a decompression bomb taken together (None: they are not):
        they inflate past the expansion limit, or share compressed bytes."""
        usize = sum(i.file_size for i in self.members)
        csize = sum(i.compress_size for i in self.members)
        if usize > WHEEL_EXPANSION_FLOOR and usize > MAX_EXPANSION * csize:
            return (
                f"device-code members expand more than {MAX_EXPANSION}x ({size_text(usize)} from "
                f"{size_text(csize)}): a decompression bomb? not read"
            )
        # where each member's bytes end, at least (its local header's extra field is not counted)
        spans = sorted(
            (i.header_offset, i.header_offset + 30 + len(i.filename.encode()) + i.compress_size, i.filename)
            for i in self.members
        )
        for (_a0, a1, a), (b0, _b1, b) in itertools.pairwise(spans):
            if b0 < a1:
                return (
                    f"members {a} and {b} share compressed bytes (overlapping members: a zip bomb?): not read"
                )
        return None

    def scan(self) -> list[FileRecord]:
        """Records in archive order. Large deflated members cost one zlib pass each (zlib releases
        the GIL): spread over threads, biggest first; small members go together in one batch."""
        big = sorted((i for i in self.members if i.file_size > SMALL_MEMBER), key=lambda i: -i.file_size)
        small = [i for i in self.members if i.file_size <= SMALL_MEMBER]
        batches = [[i] for i in big] + ([small] if small else [])
        workers = min(WHEEL_THREADS, len(batches))
        try:
            if workers > 1:
                with ThreadPoolExecutor(max_workers=workers) as pool:
                    done = [r for part in pool.map(self._batch, batches) for r in part]
            else:
                done = [r for b in batches for r in self._batch(b)]
        finally:
            _close(self._zf)
        order = {i.filename: n for n, i in enumerate(self.members)}
        return sorted(done, key=lambda r: order[r.path.rsplit("!", 1)[1]])

    def _batch(self, infos: list[zipfile.ZipInfo]) -> list[FileRecord]:
        out = []
        fd = _open_checked(self.path, self._expect)  # (each member read with pread: no shared position)
        try:
            for info in infos:
                rec = FileRecord(
                    path=f"{self.prefix}!{info.filename}", package=self.package, size=info.file_size
                )
                try:
                    _scan_member(fd, info, rec, self.kernels)
                except _READ_ERRORS + inflate_error_types() + (MemberError,) as exc:
                    rec.error = f"cannot read member: {exc}"
                except (elf.ElfParseError, fatbin.FatbinParseError) as exc:
                    rec.error = str(exc)
                out.append(rec)
        finally:
            os.close(fd)
        return out


def _scan_member(fd: int, info: zipfile.ZipInfo, rec: FileRecord, kernels: bool) -> None:
    """Fill ``rec`` from one member, read the cheapest way its storage allows (never inflated past
    the size it declares: :mod:`probe.arch.zipmember`)."""
    if info.file_size == 0:
        rec.error = "empty file"
        return
    if info.file_size > SMALL_MEMBER and info.file_size > MAX_EXPANSION * max(1, info.compress_size):
        rec.error = (
            f"declares {size_text(info.file_size)} from {size_text(info.compress_size)} (more than "
            f"{MAX_EXPANSION}x): a decompression bomb? not read"
        )
        return
    if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 0x1:
        base = data_offset(fd, info)
        if base + info.file_size > os.fstat(fd).st_size:
            rec.error = "member extends past the end of the archive (truncated wheel)"
            return
        reader = elf.Reader(lambda off, n: os.pread(fd, n, base + off), info.file_size)
        describe(reader, rec, name=info.filename, kernels=kernels)
        return
    is_so = info.filename.endswith(".so") or ".so." in info.filename
    if info.file_size > SMALL_MEMBER and is_so:
        with member_stream(fd, info) as s:
            head = s.read()[:64]
        if not elf.is_elf(head):
            rec.kind = "other"
            if not not_a_library(info.filename, head):  # a GNU ld script: not device code, no error
                rec.error = "not an ELF file"
            return
        is_cubin = len(head) >= 20 and int.from_bytes(head[18:20], "little") == elf.EM_CUDA
        if not is_cubin:
            stream_elf(lambda: member_stream(fd, info), info.file_size, rec, kernels)
            return
    if info.file_size > MAX_HELD:
        held = size_text(MAX_HELD)
        rec.error = f"{size_text(info.file_size)}: more than the {held} held in memory per member: not read"
        return
    describe(elf.Reader.from_buffer(read_member(fd, info)), rec, name=info.filename, kernels=kernels)
