"""Per-layer scan results keyed by layer digest: a rebuild that changed one layer re-reads only it.

One entry per (layer digest, blob size, ``--kernels``, probe version) in the scan cache folder
(:func:`probe.arch.cache.cache_dir`), file ``image-layers-v1.sqlite``: the layer's member list
(paths, types, link targets, whiteouts, opaque folders), the device-code lists of its ``RECORD``
files, and the records of the members read. Layers whose reading failed are not stored. A cache
that cannot be opened is ignored (the scan goes on uncached).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import zlib
from typing import Any

from probe import __version__
from probe.arch.cache import cache_dir

log = logging.getLogger(__name__)

CACHE_FILE = "image-layers-v1.sqlite"
_FORMAT = 2


def layer_key(digest: str, size: int, kernels: bool) -> str | None:
    if not digest:
        return None
    return json.dumps([_FORMAT, __version__, bool(kernels), digest, size])


class LayerCache:
    def __init__(self) -> None:
        self._conn: sqlite3.Connection | None = None
        path = cache_dir() / CACHE_FILE
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(path), timeout=5.0)
            conn.execute("CREATE TABLE IF NOT EXISTS layers (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
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
        except (sqlite3.Error, zlib.error, ValueError) as exc:
            log.warning("image layer cache read failed: %s", exc)
            return None

    def put(self, key: str | None, value: dict[str, Any]) -> None:
        if self._conn is None or key is None:
            return
        blob = zlib.compress(json.dumps(value, separators=(",", ":")).encode(), 3)
        try:
            with self._conn:
                self._conn.execute("INSERT OR REPLACE INTO layers (key, value) VALUES (?, ?)", (key, blob))
        except sqlite3.Error as exc:
            log.warning("image layer cache write failed: %s", exc)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
