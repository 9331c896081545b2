"""Scan the device code of a container image, layer by layer, without running or unpacking it.

Layers are read **from the top one down**, each once. By the time a layer is read, every layer
above it has been, so whether one of its members is visible in the final image is known when its
header passes (an upper layer holds the same path, a whiteout ``.wh.NAME`` or an opaque marker
``.wh..wh..opq`` covers it, or a non-folder replaced one of its parent folders): hidden members
are never read. A visible member whose name looks like device code (``.so``, ``.so.N``,
``.cubin``, ``.fatbin``, ``.ptx``) is described with the per-file engine of
:mod:`probe.arch.scanner` — at random through ``pread`` in an uncompressed layer; else its first
64 bytes decide (not ELF: done), small ones are described in memory, large host ELFs streamed
header by header (:func:`probe.arch.elfstream.stream_elf`). ``RECORD`` files of ``*.dist-info``
folders are read for package attribution. Symlinks and hard links are resolved inside the image
(absolute targets from the image root, ``..`` stops at the root): each physical file is reported
once, under its own path, as ``IMAGE!/usr/lib/…/x.so``.
"""

from __future__ import annotations

import logging
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any

from probe.arch import elf, fatbin
from probe.arch.describe import MAX_PTX_FILE, describe
from probe.arch.image.cache import LayerCache, layer_key
from probe.arch.image.envs import MAX_RECORD, RECORD_RE, record_paths
from probe.arch.image.layers import (
    DIRECTORY,
    HARDLINK,
    REGULAR,
    SYMLINK,
    Blob,
    LayerError,
    Member,
    MemberStream,
    TarStream,
)
from probe.arch.image.streams import ImageBudget, compression_of
from probe.arch.inputs import open_regular
from probe.arch.limits import MAX_HELD, MAX_IMAGE_MEMBERS, size_text
from probe.arch.records import FileRecord
from probe.arch.roots import DEVICE_FILE_RE

log = logging.getLogger(__name__)

#: members up to this size are described in memory; larger host ELFs are streamed
SMALL_MEMBER = 16 << 20
MAX_SYMLINK_HOPS = 40


@dataclass
class LayerIndex:
    """What one layer holds (JSON-serialisable: the per-layer cache value)."""

    types: dict[str, str] = field(default_factory=dict)  # path -> tar type ("0", "2", "5" …)
    links: dict[str, str] = field(default_factory=dict)  # symlink / hard link path -> target
    whiteouts: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    dist: dict[str, list[str]] = field(default_factory=dict)  # RECORD path -> device-code paths
    records: dict[str, FileRecord] = field(default_factory=dict)  # path -> record (path: the member)
    unsafe: list[str] = field(default_factory=list)  # names climbing above the root
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["records"] = {p: r.to_dict() for p, r in self.records.items()}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LayerIndex:
        idx = cls(**{**d, "records": {}})
        idx.records = {p: FileRecord.from_dict({**r, "cached": True}) for p, r in d["records"].items()}
        return idx


def is_device_name(path: str) -> bool:
    return bool(DEVICE_FILE_RE.search(path)) and not path.endswith(".whl")


class Upper:
    """The union of the layers above the one being read: decides a lower member's visibility."""

    def __init__(self) -> None:
        self.types: dict[str, str] = {}
        self.links: dict[str, str] = {}
        self.deleted: set[str] = set()  # whiteouts and opaque folders
        self.layer_of: dict[str, int] = {}

    def hidden(self, path: str) -> bool:
        if path in self.types or path in self.deleted or "" in self.deleted:  # "": opaque image root
            return True
        i = path.rfind("/")
        while i > 0:
            a = path[:i]
            t = self.types.get(a)
            if (t is not None and t != DIRECTORY) or a in self.deleted:
                return True
            i = path.rfind("/", 0, i)
        return False

    def add(self, idx: LayerIndex, n: int) -> None:
        for p, t in idx.types.items():
            if not self.hidden(p):
                self.types[p] = t
                self.layer_of[p] = n
                if p in idx.links:
                    self.links[p] = idx.links[p]
        # a layer's own whiteouts hide only what lies below it: add them after its entries
        self.deleted.update(idx.whiteouts)
        self.deleted.update(idx.opaque)


def _one_shot(stream: MemberStream) -> Any:
    used = False

    def open_member() -> MemberStream:
        nonlocal used
        if used:
            raise elf.ElfParseError("section data outside the window kept while streaming the member")
        used = True
        return stream

    return open_member


def describe_member(tar: TarStream, m: Member, *, kernels: bool) -> FileRecord:
    """Describe one regular member (never raises for bad content; LayerError passes through)."""
    assert m.path is not None
    rec = FileRecord(path=m.path, size=m.size)
    name = m.path
    try:
        if tar.seekable:  # random access, exactly as a file on disk
            base = m.data_offset
            describe(
                elf.Reader(lambda off, n: tar.pread(base + off, n), m.size), rec, name=name, kernels=kernels
            )
            return rec
        ms = MemberStream(tar, m)
        head = ms.peek(min(64, m.size))
        is_ptx = name.endswith(".ptx")
        if not (elf.is_elf(head) or fatbin.is_container_start(head) or is_ptx) or m.size == 0:
            describe(elf.Reader(lambda off, n: head[off : off + n], m.size), rec, name=name, kernels=False)
            return rec
        if is_ptx and m.size > MAX_PTX_FILE:
            rec.kind, rec.error = "ptx", f"PTX file larger than {size_text(MAX_PTX_FILE)}: not read"
            return rec
        is_host_elf = elf.is_elf(head) and int.from_bytes(head[18:20], "little") != elf.EM_CUDA
        too_big = m.size > MAX_HELD
        if is_host_elf and m.size > SMALL_MEMBER and (too_big or not kernels):
            from probe.arch.elfstream import stream_elf

            stream_elf(_one_shot(ms), m.size, rec, False)
            if kernels and not rec.error:
                rec.error = (
                    f"kernels not read: {size_text(m.size)}, more than the {size_text(MAX_HELD)} --kernels "
                    "holds in memory per member of a compressed layer (its arches are listed)"
                )
            return rec
        if too_big:
            rec.kind = "cubin" if elf.is_elf(head) else "fatbin"
            rec.error = (
                f"{size_text(m.size)}: more than the {size_text(MAX_HELD)} held in memory per member "
                "of a compressed layer: not read"
            )
            return rec
        describe(elf.Reader.from_buffer(ms.read_all()), rec, name=name, kernels=kernels)
    except (elf.ElfParseError, fatbin.FatbinParseError) as exc:
        rec.error = str(exc)
    return rec


def read_layer(
    fd: int, blob: Blob, upper: Upper, *, kernels: bool, idx: LayerIndex, budget: ImageBudget | None = None
) -> bool:
    """One pass over a layer: fill ``idx`` (member list, RECORDs, records of visible members).
    The blob is checked against its digest as it streams: a mismatch sets ``idx.error``. True when
    the digest was verified (only then may the layer be cached under it). ``budget``: the image's
    (what its layers inflated to and held, together)."""
    budget = budget if budget is not None else ImageBudget()
    tar = TarStream(fd, blob, verify=True, budget=budget)
    try:
        _read_members(tar, upper, kernels=kernels, idx=idx, budget=budget)
        bad = tar.digest_mismatch()
    finally:
        tar.close()
    if bad:
        idx.error = bad
    return tar.digest is not None and bad is None


def _read_members(
    tar: TarStream, upper: Upper, *, kernels: bool, idx: LayerIndex, budget: ImageBudget
) -> None:
    for m in tar.members():
        budget.members += 1
        if budget.members > MAX_IMAGE_MEMBERS:
            raise LayerError(
                f"the image's layers hold more than {MAX_IMAGE_MEMBERS:,} members: not read further"
            )
        if m.path is None:
            if len(idx.unsafe) < 1000:  # (each one a record: a few are enough to say it)
                idx.unsafe.append(m.name if len(m.name) <= 300 else m.name[:300] + "…")
            continue
        path = m.path
        d, base = posixpath.split(path)
        if base.startswith(".wh."):
            if base == ".wh..wh..opq":
                idx.opaque.append(d)
            else:
                idx.whiteouts.append(posixpath.join(d, base[4:]))
            continue
        idx.types[path] = m.type
        if m.type in (SYMLINK, HARDLINK):
            idx.links[path] = m.linkname
        elif path in idx.links:
            del idx.links[path]
        if m.type != REGULAR:
            idx.records.pop(path, None)
            continue
        if base == "RECORD" and m.size <= MAX_RECORD and RECORD_RE.match(path):
            idx.dist[path] = record_paths(path, MemberStream(tar, m).read_all())
        elif is_device_name(base) and not upper.hidden(path):
            idx.records[path] = describe_member(tar, m, kernels=kernels)
        else:
            idx.records.pop(path, None)


def _complete(idx: LayerIndex, upper: Upper) -> bool:
    """A cached layer is enough when every member visible now was read when it was stored."""
    return all(
        p in idx.records
        for p, t in idx.types.items()
        if t == REGULAR and is_device_name(p) and not upper.hidden(p)
    )


def _open_blob(fds: dict[str, int], blob: Blob) -> int:
    """The (shared) descriptor of the file holding ``blob``; a FIFO or device is never opened for
    reading (:class:`~probe.arch.inputs.NotRegularFile`)."""
    if blob.path not in fds:
        fds[blob.path] = open_regular(blob.path)
    return fds[blob.path]


def _from_cache(
    fd: int, blob: Blob, key: str | None, cache: LayerCache | None, upper: Upper
) -> tuple[LayerIndex | None, LayerIndex | None]:
    """(usable entry, entry to extend): a cached index is used only for a blob that holds its digest
    (:meth:`LayerCache.holds_digest`) and when it lists every member visible now."""
    if cache is None or key is None:
        return None, None
    hit = cache.get(key)
    if not hit:
        return None, None
    try:
        idx = LayerIndex.from_json(hit)
    except (TypeError, KeyError, ValueError, AttributeError):
        log.warning("unreadable layer cache entry for %s: ignored", blob.digest)
        return None, None
    if not cache.holds_digest(fd, blob):
        return None, None  # read it: the digest mismatch is found (and reported) while it streams
    return (idx, None) if _complete(idx, upper) else (None, idx)


def _one_layer(
    blob: Blob,
    fds: dict[str, int],
    upper: Upper,
    *,
    kernels: bool,
    cache: LayerCache | None,
    budget: ImageBudget,
) -> LayerIndex:
    """The index of one layer: from the cache when it may be used, else read (and then cached when
    its digest was verified)."""
    idx = LayerIndex()
    try:
        fd = _open_blob(fds, blob)
        key = layer_key(blob, kernels, compression_of(os.pread(fd, 4, blob.offset)) is not None)
        hit, old = _from_cache(fd, blob, key, cache, upper)
        if hit is not None:
            budget.members += len(hit.types)
            if budget.members > MAX_IMAGE_MEMBERS:
                hit.error = (
                    f"the image's layers hold more than {MAX_IMAGE_MEMBERS:,} members: not read further"
                )
            return hit
        verified = read_layer(fd, blob, upper, kernels=kernels, idx=idx, budget=budget)
    except LayerError as exc:
        idx.error = str(exc)
        return idx
    except OSError as exc:
        idx.error = f"cannot read: {exc.strerror or exc}"
        return idx
    if old is not None and idx.error is None:  # keep members read by earlier scans
        idx.records = {**{p: r for p, r in old.records.items() if p in idx.types}, **idx.records}
    if cache is not None and verified and idx.error is None:
        cache.put(key, idx.to_json())
        cache.remember_verified(fd, blob)
    return idx


def layer_indexes(
    blobs: list[Blob], *, kernels: bool, cache: LayerCache | None
) -> tuple[list[LayerIndex], Upper]:
    """Read every layer, top one first (see the module docstring); bottom layer first in the result."""
    upper = Upper()
    out: list[LayerIndex] = []
    fds: dict[str, int] = {}
    budget = ImageBudget()
    seen: set[tuple[str, int, int]] = set()
    try:
        for n in range(len(blobs) - 1, -1, -1):
            b = blobs[n]
            if (b.path, b.offset, b.size) in seen:  # the same bytes again: all it holds is hidden
                out.append(LayerIndex())  # by its copy above (its whiteouts too apply already)
                continue
            seen.add((b.path, b.offset, b.size))
            idx = _one_layer(b, fds, upper, kernels=kernels, cache=cache, budget=budget)
            upper.add(idx, n)
            out.append(idx)
    finally:
        for fd in fds.values():
            os.close(fd)
    out.reverse()
    return out, upper
