"""Stream the members of one image layer: a tar, gzip / zstd compressed or not, read once.

Nothing is extracted: :class:`TarStream` yields :class:`Member` headers in archive order and the
caller reads (a prefix of) a member's bytes through :class:`MemberStream` before asking for the
next header; what it leaves unread is skipped. An uncompressed layer lying in a file (an OCI blob,
a ``layer.tar`` inside a docker-save tarball) is seekable: skipping costs nothing and a member can
be read at random (:meth:`TarStream.pread`), exactly like a file on disk. Compressed layers are
inflated in bounded pieces (``OUT_MAX``), so a decompression bomb costs time, never memory.

Member names are made safe here (:func:`safe_name`): leading ``/`` and ``./`` dropped, ``a/../b``
folded; a name that climbs above the root is reported as unsafe, never used as a path, and so is one
longer than :data:`~probe.arch.limits.MAX_PATH` (a link target that long is kept cut, and never
resolved). A layer holds at most :data:`~probe.arch.limits.MAX_ARCHIVE_MEMBERS` members, and the
extension headers (pax, GNU long names) before one member hold at most
:data:`~probe.arch.limits.MAX_EXTENSIONS` bytes in all.
Every malformed input raises :class:`LayerError` (truncated, corrupt compression, not a tar).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from probe.arch.image.streams import (
    IN_CHUNK,
    Blob,
    Digest,
    ImageBudget,
    Inflater,
    LayerError,
    Prefetch,
    RawSource,
    compression_of,
    hash_blob,
)
from probe.arch.limits import MAX_ARCHIVE_MEMBERS, MAX_EXTENSIONS, MAX_PATH, MAX_PATH_DEPTH

__all__ = ["Blob", "LayerError", "Member", "MemberStream", "TarStream", "safe_name"]

BLOCK = 512
MAX_PAX = 1 << 20  # a pax / GNU long-name header larger than this is corrupt

# tar type flags
REGULAR = "0"
HARDLINK = "1"
SYMLINK = "2"
DIRECTORY = "5"
_REGULAR_TYPES = frozenset(("0", "\0", "7", ""))


def safe_name(name: str) -> str | None:
    """The member's path in the image without a leading ``/`` (``./a//b/../c`` -> ``a/c``); None when
    it climbs above the root (``../x``, ``a/../../x``) or is longer than ``MAX_PATH``: such a name is
    never used as a path."""
    if len(name) > MAX_PATH or name.count("/") > 2 * MAX_PATH_DEPTH:
        return None
    stack: list[str] = []
    for part in name.split("/"):
        if part == "..":
            if not stack:
                return None
            stack.pop()
        elif part and part != ".":
            stack.append(part)
    if len(stack) > MAX_PATH_DEPTH:
        return None
    return "/".join(stack) or "."


@dataclass
class Member:
    name: str  # raw name from the archive (pax path / GNU long name applied)
    path: str | None  # safe_name(name); None: unsafe
    type: str
    size: int
    linkname: str
    data_offset: int  # offset of the data in the uncompressed layer


def _octal(field: bytes, what: str) -> int:
    if field and field[0] & 0x80:  # GNU base-256
        v = int.from_bytes(field[1:], "big")
        return -v if field[0] & 0x40 else v
    s = field.split(b"\0", 1)[0].strip(b" \0")
    try:
        return int(s, 8) if s else 0
    except ValueError:
        raise LayerError(f"not a tar archive (bad {what} field {s[:20]!r})") from None


def _pax(data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        sp = data.find(b" ", pos)
        if sp < 0:
            break
        try:
            length = int(data[pos:sp])
        except ValueError:
            raise LayerError("corrupt pax header") from None
        if length <= 0:
            raise LayerError("corrupt pax header")
        rec = data[sp + 1 : pos + length - 1]
        key, _, val = rec.partition(b"=")
        out[key.decode("utf-8", "replace")] = val.decode("utf-8", "surrogateescape")
        pos += length
    return out


class _Extensions:
    """The extension headers (pax ``x``, GNU long names ``L`` / ``K``) read before one member: at most
    :data:`~probe.arch.limits.MAX_EXTENSIONS` bytes of them (they pile up in memory until it comes)."""

    def __init__(self) -> None:
        self.pax: dict[str, str] = {}
        self.long_name: str | None = None
        self.long_link: str | None = None
        self.size = 0

    def add(self, kind: str, data: bytes) -> None:
        self.size += len(data)
        if self.size > MAX_EXTENSIONS:
            raise LayerError(
                f"tar extension headers of more than {MAX_EXTENSIONS >> 20} MiB before one member (corrupt)"
            )
        if kind == "x":
            self.pax.update(_pax(data))
        elif kind == "L":
            self.long_name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        elif kind == "K":
            self.long_link = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")

    def apply(self, member: Member, size: int, padded: int, pos: int) -> tuple[Member, int]:
        """The member as its extension headers describe it (name, link, size), and its padded size."""
        name = self.pax.get("path") or self.long_name or member.name
        link = self.pax.get("linkpath") or self.long_link or member.linkname
        if len(link) > MAX_PATH:  # kept cut: never resolved (probe.arch.image.tree.resolve)
            link = link[: MAX_PATH + 1]
        if "size" in self.pax:
            try:
                size = int(self.pax["size"])
            except ValueError:
                raise LayerError("corrupt pax size") from None
            if size < 0:
                raise LayerError("corrupt pax size")
            padded = (size + BLOCK - 1) // BLOCK * BLOCK
        if member.type not in _REGULAR_TYPES:
            size = padded = 0 if member.type in (HARDLINK, SYMLINK, DIRECTORY) else size
        typ = REGULAR if member.type in _REGULAR_TYPES else member.type
        return Member(name, safe_name(name), typ, size, link, pos), padded


class TarStream:
    """One pass over the members of a layer (see the module docstring)."""

    def __init__(
        self,
        fd: int,
        blob: Blob,
        *,
        threads: bool = True,
        verify: bool = False,
        budget: ImageBudget | None = None,
    ) -> None:
        """``verify``: hash the blob's bytes as they are read (:meth:`digest_mismatch` at the end);
        ``budget``: what the image's layers inflated to together (a bomb spread over layers)."""
        self.compression = compression_of(os.pread(fd, 4, blob.offset))
        self.seekable = self.compression is None
        self.digest = Digest(blob.digest) if verify and Digest.verifiable(blob, not self.seekable) else None
        self._hasher: threading.Thread | None = None
        self._stop = threading.Event()
        # a compressed blob is hashed as the inflater reads it; a plain one (read at random with
        # pread) by a helper thread reading it in order beside the parse
        self._raw = RawSource(fd, blob, None if self.seekable else self.digest)
        self._inf: Inflater | Prefetch | None = None
        self._inflater: Inflater | None = None
        if self.compression:
            inf = self._inflater = Inflater(self._raw, self.compression, budget)
            self._inf = Prefetch(inf) if threads else inf
        elif self.digest is not None:
            self._hasher = threading.Thread(
                target=self._hash_plain, args=(fd, blob, self.digest), name="probe-hash", daemon=True
            )
            self._hasher.start()
        self._hash_error: Exception | None = None
        self._buf = bytearray()
        self._bpos = 0  # read position inside _buf
        self.pos = 0  # uncompressed offset of the next byte to be consumed
        self._fd = fd
        self._blob = blob

    def _hash_plain(self, fd: int, blob: Blob, digest: Digest) -> None:
        try:
            hash_blob(fd, blob, digest, self._stop)
        except (OSError, LayerError) as exc:
            self._hash_error = exc.with_traceback(None)  # (no cycle through this frame)

    def close(self) -> None:
        """Stop the helper threads (call when done, also after an error)."""
        self._stop.set()
        if isinstance(self._inf, Prefetch):
            self._inf.close()
        if self._hasher is not None:
            self._hasher.join()
        if self._inflater is not None:
            self._inflater.settle()

    def digest_mismatch(self) -> str | None:
        """After the last member: hash what is left of the blob; the error when it does not match
        the digest it claims (None: it matches, or nothing was to be verified)."""
        if self.digest is None:
            return None
        if self._hasher is not None:
            self._hasher.join()
            if self._hash_error is not None:
                raise LayerError(f"cannot hash the layer: {self._hash_error}")
        else:
            if isinstance(self._inf, Prefetch):
                self._inf.close()  # the inflater thread reads the blob no more
            self._raw.drain()
        return self.digest.mismatch()

    # -- low level
    def _fill(self, n: int) -> None:
        while len(self._buf) - self._bpos < n:
            if self._bpos:
                del self._buf[: self._bpos]
                self._bpos = 0
            chunk = self._inf.read() if self._inf else self._raw.read(max(n, IN_CHUNK))
            if not chunk:
                return
            self._buf += chunk

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer only at the end of the layer)."""
        if self.seekable and not (len(self._buf) - self._bpos):
            data = self._raw.read(n) if n else b""
            self.pos += len(data)
            return data
        self._fill(n)
        data = bytes(self._buf[self._bpos : self._bpos + n])
        self._bpos += len(data)
        self.pos += len(data)
        return data

    def read_exact(self, n: int, what: str) -> bytes:
        data = self.read(n)
        if len(data) != n:
            raise LayerError(f"layer ends inside {what} (truncated)")
        return data

    def skip(self, n: int) -> None:
        if n <= 0:
            return
        have = len(self._buf) - self._bpos
        take = min(have, n)
        self._bpos += take
        self.pos += take
        n -= take
        if not n:
            return
        if self.seekable:
            if self._raw.pos + n > self._raw.end:
                raise LayerError("layer ends inside a member (truncated)")
            self._raw.pos += n
            self.pos += n
            return
        assert self._inf is not None
        self._buf.clear()
        self._bpos = 0
        while n > 0:
            chunk = self._inf.read()
            if not chunk:
                raise LayerError("layer ends inside a member (truncated)")
            if len(chunk) > n:
                self._buf += chunk[n:]
                self.pos += n
                return
            n -= len(chunk)
            self.pos += len(chunk)

    def pread(self, offset: int, n: int) -> bytes:
        """Random access to the uncompressed layer (seekable layers only)."""
        start = self._blob.offset + offset
        n = max(0, min(n, self._blob.offset + self._blob.size - start))
        return os.pread(self._fd, n, start)

    # -- headers
    def members(self) -> Iterator[Member]:
        """Headers in archive order; the caller may read a member's data before the next one."""
        ext = _Extensions()
        end = count = 0
        while True:
            start = self.pos
            hdr = self.read(BLOCK)
            if not hdr and start == 0:
                raise LayerError("empty layer (not a tar archive)")
            if len(hdr) < BLOCK:
                if end or (not hdr and start > 0):
                    return  # end of archive (some writers omit the second zero block)
                raise LayerError("layer ends inside a tar header (truncated)")
            if hdr == bytes(BLOCK):
                end += 1
                if end == 2:
                    return
                continue
            member, size = self._parse(hdr, start)
            padded = (size + BLOCK - 1) // BLOCK * BLOCK
            if member.type in ("x", "g", "L", "K"):
                ext.add(member.type, self._extension(size, padded))
                continue
            count += 1
            if count > MAX_ARCHIVE_MEMBERS:
                raise LayerError(f"more than {MAX_ARCHIVE_MEMBERS:,} members in one layer: not read further")
            m, padded = ext.apply(member, size, padded, self.pos)
            ext = _Extensions()
            yield m
            self.skip(m.data_offset + padded - self.pos)

    def _extension(self, size: int, padded: int) -> bytes:
        if size > MAX_PAX:
            raise LayerError(f"tar extension header of {size} bytes (corrupt)")
        data = self.read_exact(size, "a tar extension header")
        self.skip(padded - size)
        return data

    def _parse(self, hdr: bytes, start: int) -> tuple[Member, int]:
        try:
            chksum = _octal(hdr[148:156], "checksum")
        except LayerError:
            chksum = -1
        if chksum != sum(hdr[:148]) + 256 + sum(hdr[156:]):
            raise LayerError("not a tar archive" if start == 0 else f"corrupt tar header at offset {start}")
        name = hdr[:100].split(b"\0", 1)[0]
        if hdr[257:262] == b"ustar" and hdr[345:500].strip(b"\0"):
            name = hdr[345:500].split(b"\0", 1)[0] + b"/" + name
        size = _octal(hdr[124:136], "size")
        if size < 0:
            raise LayerError(f"negative member size at offset {start}")
        typ = chr(hdr[156]) if hdr[156] else "0"
        link = hdr[157:257].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        decoded = name.decode("utf-8", "surrogateescape")
        return Member(decoded, None, typ, size, link, 0), size


class MemberStream:
    """The bytes of the current member, forward only; ``peek`` keeps what it read for ``read``."""

    def __init__(self, tar: TarStream, member: Member) -> None:
        self._tar = tar
        self.size = member.size
        self._left = member.size
        self._head = b""

    def peek(self, n: int) -> bytes:
        if len(self._head) < n:
            self._head += self._take(n - len(self._head))
        return self._head[:n]

    def _take(self, n: int) -> bytes:
        n = min(n, self._left)
        data = self._tar.read(n) if n else b""
        if len(data) != n:
            raise LayerError("layer ends inside a member (truncated)")
        self._left -= n
        return data

    def read(self, n: int = 1 << 20) -> bytes:
        if self._head:
            data, self._head = self._head[:n], self._head[n:]
            return data
        return self._take(n)

    def read_all(self) -> bytearray:
        """What is left of the member, in one buffer (read in pieces: never held twice)."""
        out = bytearray(self._head)
        self._head = b""
        while self._left:
            out += self._take(min(self._left, 8 << 20))
        return out

    def __enter__(self) -> MemberStream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
