"""Per-layer scan results keyed by layer digest: a rebuild that changed one layer re-reads only it.

One entry per (layer digest, blob size, ``--kernels``, probe version) in the scan cache folder
(:func:`probe.cachedir.cache_dir`, user-only), file ``image-layers-v2.sqlite``: the layer's member
list (paths, types, link targets, whiteouts, opaque folders), the device-code lists of its
``RECORD`` files, and the records of the members read.

Only **verified** digests key an entry: a layer is stored after its bytes hashed to the digest it
claims while it streamed (:class:`probe.arch.image.streams.Digest`), never one whose reading
failed or whose digest did not match. A hit is used only for a blob known to hold that digest: the
same file, unchanged since it was verified (its identity — path, offset, size, device, inode,
mtime, ctime — is remembered with the digest), else the blob is hashed first. So an image whose
layer *claims* another layer's digest can neither write nor read that layer's entry. A cache that
cannot be opened, or whose folder others can write, is ignored (the scan goes on uncached).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import zlib
from typing import Any

from probe import __version__
from probe.arch.image.streams import Blob, Digest, LayerError, hash_blob
from probe.cachedir import secure_cache_dir

log = logging.getLogger(__name__)

CACHE_FILE = "image-layers-v2.sqlite"
_FORMAT = 3


def layer_key(blob: Blob, kernels: bool, compressed: bool) -> str | None:
    """The cache key of a layer, or None when its digest cannot be verified (not cached)."""
    if not Digest.verifiable(blob, compressed):
        return None
    return json.dumps([_FORMAT, __version__, bool(kernels), blob.digest, blob.size])


def blob_identity(fd: int, blob: Blob) -> str:
    """What makes the bytes of a blob the ones verified before: the file, unchanged."""
    st = os.fstat(fd)
    return json.dumps(
        [blob.path, blob.offset, blob.size, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    )


class LayerCache:
    def __init__(self) -> None:
        self._conn: sqlite3.Connection | None = None
        folder = secure_cache_dir()
        if folder is None:
            return
        path = folder / CACHE_FILE
        try:
            conn = sqlite3.connect(str(path), timeout=5.0)
            conn.execute("CREATE TABLE IF NOT EXISTS layers (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS verified (identity TEXT PRIMARY KEY, digest TEXT NOT NULL)"
            )
            conn.commit()
            self._conn = conn
        except (sqlite3.Error, OSError) as exc:
            log.warning("image layer cache %s disabled: %s", path, exc)

    def get(self, key: str | None) -> dict[str, Any] | None:
        if self._conn is None or key is None:
            return None
        try:
            row = self._conn.execute("SELECT value FROM layers WHERE key = ?", (key,)).fetchone()
            return json.loads(zlib.decompress(row[0])) if row else None
        except (sqlite3.Error, zlib.error, ValueError, RecursionError) as exc:
            log.warning("image layer cache read failed: %s", exc)
            return None

    def put(self, key: str | None, value: dict[str, Any]) -> None:
        if self._conn is None or key is None:
            return
        blob = zlib.compress(json.dumps(value, separators=(",", ":")).encode(), 3)
        self._write("INSERT OR REPLACE INTO layers (key, value) VALUES (?, ?)", (key, blob))

    def remember_verified(self, fd: int, blob: Blob) -> None:
        """The blob's bytes hashed to its digest: remember it for this file as it is now."""
        if self._conn is not None:
            ident = blob_identity(fd, blob)
            sql = "INSERT OR REPLACE INTO verified (identity, digest) VALUES (?, ?)"
            self._write(sql, (ident, blob.digest))

    def holds_digest(self, fd: int, blob: Blob) -> bool:
        """Whether the blob's bytes hash to its digest: known for this unchanged file, else hashed now
        (and remembered when they do)."""
        if self._conn is None:
            return False
        ident = blob_identity(fd, blob)
        try:
            row = self._conn.execute("SELECT digest FROM verified WHERE identity = ?", (ident,)).fetchone()
        except sqlite3.Error:
            row = None
        if row is not None and row[0] == blob.digest:
            return True
        digest = Digest(blob.digest)
        try:
            hash_blob(fd, blob, digest)
        except (OSError, LayerError):
            return False
        if digest.mismatch() is not None:
            return False
        self.remember_verified(fd, blob)
        return True

    def _write(self, sql: str, args: tuple[Any, ...]) -> None:
        assert self._conn is not None
        try:
            with self._conn:
                self._conn.execute(sql, args)
        except sqlite3.Error as exc:
            log.warning("image layer cache write failed: %s", exc)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
