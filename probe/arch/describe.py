"""Describe the device code of one file: ELF / cubin / fatbin / PTX bytes -> a :class:`FileRecord`.

Works on any :class:`probe.arch.elf.Reader` (a file on disk, a wheel member, a buffer); problems
(truncated, not ELF, unreadable ...) go into the record's ``error``, never into an exception.
Used by :mod:`probe.arch.scanner` (files on disk) and :mod:`probe.arch.wheel` (zip members).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterable
from typing import cast

from probe.arch import elf, fatbin
from probe.arch.limits import MAX_HELD, size_text
from probe.arch.records import Entry, FileRecord, KernelInfo, Section, Suffix
from probe.userfile import describe_mode

MAX_PTX_FILE = MAX_HELD  # a PTX file is read whole
#: bytes read at once at the start of every file
HEAD_READ = 16 << 10


def os_error(exc: OSError) -> str:
    """One line for a failed open / stat / read."""
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno == errno.ENOENT:
        return "file vanished or does not exist"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EISDIR:
        return "is a directory"
    return f"{exc.strerror or type(exc).__name__} (errno {exc.errno})"


def _open_file(path: str, nofollow: bool = False) -> int:
    """Seam for tests (monkeypatch to simulate unreadable files)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    return os.open(path, flags | (getattr(os, "O_NOFOLLOW", 0) if nofollow else 0))


#: the record of a file that is not the one the walk judged (swapped while the scan ran)
CHANGED = "replaced while the scan ran (not the file the walk found): not read"


def scan_file(
    path: str,
    *,
    kernels: bool = False,
    package: str | None = None,
    expect: tuple[int, int] | None = None,
    nofollow: bool = False,
) -> FileRecord:
    """Describe one file on disk (never raises for a bad or unreadable file). ``expect``: the (device,
    inode) the walk judged — another file found at ``path`` now is not read; ``nofollow``: the path
    was no symlink then, and is opened without following one."""
    rec = FileRecord(path=path, package=package)
    try:
        fd = _open_file(path, nofollow)
    except OSError as exc:
        rec.error = CHANGED if nofollow and exc.errno == errno.ELOOP else os_error(exc)
        return rec
    try:
        st = os.fstat(fd)
        if expect is not None and (st.st_dev, st.st_ino) != expect:
            rec.error = CHANGED
            return rec
        if not stat.S_ISREG(st.st_mode):
            what = describe_mode(st.st_mode)
            rec.error = "is a directory" if what == "a folder" else f"{what}, not a regular file: not read"
            return rec
        rec.size = st.st_size
        # One read for the first HEAD_READ bytes: a cubin's ELF header and its .nv.compat /
        # .note.nv.* sections usually lie there (2 reads per cubin instead of 5).
        head = os.pread(fd, min(HEAD_READ, st.st_size), 0)
        reader = elf.Reader(_head_then_pread(fd, head), st.st_size)
        describe(reader, rec, name=path, kernels=kernels)
    except OSError as exc:
        rec.error = os_error(exc)
    finally:
        os.close(fd)
    return rec


def _head_then_pread(fd: int, head: bytes) -> Callable[[int, int], bytes]:
    end = len(head)

    def read(off: int, n: int) -> bytes:
        if off + n <= end:
            return head[off : off + n]
        return os.pread(fd, n, off)

    return read


_LIBRARY_NAME = re.compile(r"\.so(\.\d+)*$")


def not_a_library(name: str, head: bytes) -> bool:
    """A file named like a shared library (``.so``, ``.so.N``) whose first 4 bytes are not the ELF
    magic (a GNU ld script, a text stub): not a CUDA extension, skipped without an error. A
    truncated or corrupt ELF (``\\x7fELF``…), a non-ELF ``.cubin`` / ``.fatbin`` stay errors."""
    return len(head) >= 4 and head[:4] != elf.ELF_MAGIC and bool(_LIBRARY_NAME.search(name))


def describe(reader: elf.Reader, rec: FileRecord, *, name: str, kernels: bool) -> None:
    """Fill ``rec`` (kind, containers, entries, error) from the bytes behind ``reader``."""
    rec.size = reader.size
    if reader.size == 0:
        rec.error = "empty file"
        return
    head = reader.read_upto(0, 64)
    try:
        if elf.is_elf(head):
            hdr = elf.parse_header(reader, head)
            if hdr.is_cuda:
                rec.kind = "cubin"
                _describe_cubin(reader, rec, kernels, hdr)
            else:
                rec.kind = "elf"
                _describe_host_elf(reader, rec, kernels)
        elif fatbin.is_container_start(head):
            rec.kind = "fatbin"
            res = fatbin.walk_region(reader, 0, reader.size, section="fatbin")
            add_walk(reader, rec, res, kernels)
        elif name.endswith(".ptx"):
            rec.kind = "ptx"
            _describe_ptx(reader, rec, kernels)
        else:
            rec.kind = "other"  # no error for a GNU ld script / text named libc.so: not device code
            if not not_a_library(name, head):
                rec.error = "not an ELF file" if head[:4] != elf.ELF_MAGIC else "unrecognised content"
    except elf.ElfParseError as exc:
        rec.error = str(exc)
    except fatbin.FatbinParseError as exc:
        rec.error = str(exc)


def _disjoint(sections: list[elf.Section], problems: list[str]) -> list[elf.Section]:
    """The device sections that overlap none walked before them (the same bytes listed by several
    sections would be walked, and their entries held, once per section)."""
    kept: list[tuple[int, elf.Section]] = []
    end = -1
    for i, sec in sorted(enumerate(sections), key=lambda x: (x[1].offset, x[0])):
        if sec.offset >= end:
            kept.append((i, sec))
            end = sec.offset + sec.size
    if len(kept) < len(sections):
        n = len(sections) - len(kept)
        problems.append(f"{n:,} device section(s) overlap another: their bytes are not read again")
    return [sec for _i, sec in sorted(kept, key=lambda x: x[0])]


def _describe_host_elf(reader: elf.Reader, rec: FileRecord, kernels: bool) -> None:
    problems: list[str] = []
    for sec in _disjoint(elf.device_sections(reader), problems):
        if len(rec.entries) > fatbin.MAX_ENTRIES:
            problems.append(f"more than {fatbin.MAX_ENTRIES:,} entries in the file; stopped")
            break
        res = fatbin.walk_region(
            reader,
            sec.offset,
            sec.offset + sec.size,
            section=sec.name,
            first_container=rec.containers + rec.relocatable_containers,
        )
        add_walk(reader, rec, res, kernels)
        problems.extend(res.problems)
    if problems and not rec.error:
        rec.error = "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")


def add_walk(reader: elf.Reader, rec: FileRecord, res: fatbin.WalkResult, kernels: bool) -> None:
    """Add the containers and entries of one fatbin walk to ``rec`` (kernels read when asked)."""
    if res.entries and res.entries[0].section == "__nv_relfatbin":
        rec.relocatable_containers += res.containers
    else:
        rec.containers += res.containers
    for raw in res.entries:
        rec.entries.append(entry_from_raw(raw, reader if kernels else None))
    if res.problems and not rec.error:
        rec.error = "; ".join(res.problems[:5])
    if kernels:
        rec.kernels = kernel_index(rec.entries)


def entry_from_raw(raw: fatbin.RawEntry, reader: elf.Reader | None) -> Entry:
    loadable = raw.section in (".nv_fatbin", "fatbin") and raw.kind in ("sass", "ptx")
    e = Entry(
        section=cast(Section, raw.section),  # the walk's placeholder names are replaced by now
        container=raw.container,
        kind=raw.kind,
        arch=raw.label,
        sm=raw.arch,
        suffix=raw.suffix,
        ptx_isa=raw.ptx_isa,
        code_version=f"{raw.major}.{raw.minor}" if raw.kind == "sass" else None,
        compression=raw.compression,
        loadable=loadable,
        size=raw.payload_length or raw.padded_size,
        uncompressed_size=raw.uncompressed_size or None,
        offset=raw.offset,
        flags=raw.flags,
        nested=raw.nested,
        identifier=raw.identifier,
    )
    if reader is not None and raw.kind in ("sass", "ptx") and not raw.nested:
        try:
            data = fatbin.payload(reader, raw)
            e.kernels = elf.cubin_kernels(data) if raw.kind == "sass" else fatbin.ptx_kernels(data)
        except (fatbin.FatbinParseError, elf.ElfParseError) as exc:
            e.kernels_error = str(exc)
    return e


def kernel_index(entries: Iterable[Entry]) -> list[KernelInfo]:
    """Mangled kernel -> the loadable codes holding it (relocatable copies are left out)."""
    from probe.arch.demangle import demangle  # ctypes: only with --kernels

    codes: dict[str, set[str]] = {}
    for e in entries:
        if e.kernels is None:
            continue
        for k in e.kernels:
            s = codes.setdefault(k, set())
            if e.loadable and e.arch:
                s.add(e.arch)
    return sorted(
        (KernelInfo(name=demangle(k), mangled=k, codes=sorted(v, key=_label_key)) for k, v in codes.items()),
        key=lambda ki: ki.name,
    )


def _label_key(label: str) -> tuple[int, int, str]:
    m = re.match(r"(sm|compute)_(\d+)(\w?)", label)
    return (0 if label.startswith("sm") else 1, int(m.group(2)), m.group(3)) if m else (2, 0, label)


def _describe_cubin(
    reader: elf.Reader, rec: FileRecord, kernels: bool, hdr: elf.ElfHeader | None = None
) -> None:
    info = elf.cubin_info(reader, hdr)
    e = Entry(
        section="cubin",
        container=0,
        kind="sass",
        arch=f"sm_{info.sm}{info.suffix}",
        sm=info.sm,
        suffix=info.suffix,
        code_version=str(info.abi_version),
        loadable=info.e_type != elf.ET_REL,
        size=reader.size,
        offset=0,
        flags=info.e_flags,
        toolkit=info.toolkit,
    )
    if kernels and reader.size > MAX_HELD:
        e.kernels_error = f"not read: {size_text(reader.size)}, more than {size_text(MAX_HELD)} per member"
        rec.error = f"kernels not read: the cubin is larger than the {size_text(MAX_HELD)} --kernels reads"
    elif kernels:
        try:
            e.kernels = elf.cubin_kernels(reader.whole())  # (the buffer itself when in memory)
        except elf.ElfParseError as exc:
            e.kernels_error = str(exc)
    rec.entries.append(e)
    if kernels:
        rec.kernels = kernel_index(rec.entries)


_PTX_TARGET = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


def _describe_ptx(reader: elf.Reader, rec: FileRecord, kernels: bool) -> None:
    if reader.size > MAX_PTX_FILE:
        rec.error = f"PTX file larger than {size_text(MAX_PTX_FILE)}: not read"
        return
    text = reader.read(0, reader.size)
    target = fatbin.ptx_target(text)
    version = fatbin.ptx_version(text)
    m = _PTX_TARGET.match(target or "")
    if not m or not version:
        rec.error = "not a PTX file (no .version / .target directive)"
        return
    sm, suffix = int(m.group(2)), cast(Suffix, m.group(3))  # [af]? by the pattern
    e = Entry(
        section="ptx",
        container=0,
        kind="ptx",
        arch=f"compute_{sm}{suffix}",
        sm=sm,
        suffix=suffix,
        ptx_isa=version,
        loadable=True,
        size=reader.size,
        offset=0,
    )
    if kernels:
        try:
            e.kernels = fatbin.ptx_kernels(text)
        except fatbin.FatbinParseError as exc:
            e.kernels_error = str(exc)
    rec.entries.append(e)
    if kernels:
        rec.kernels = kernel_index(rec.entries)
