"""Scan result cache: a re-scan of an unchanged environment reads no device code at all.

Records are keyed by ``(path, size, mtime_ns, inode, device)`` plus the probe version and the
``--kernels`` flag, and stored in one SQLite file (transactions make every write atomic; several
probe processes may share it). Location: ``$PROBE_CACHE_DIR``, else ``$XDG_CACHE_HOME/probe``,
else ``~/.cache/probe``. A cache that cannot be opened or read (corrupt, read-only, locked for
too long) is moved aside once and otherwise ignored: the scan goes on uncached.
Records with an error are never stored (the error may be transient: a file that vanished).

The folder is the user's alone (:func:`probe.cachedir.secure_cache_dir`): created with mode 0700, and one that
another user owns or that group / others may write is refused with the reason (a warning; the scan
goes on uncached) — whoever can write the cache decides what a scan reports.
"""

# ruff: noqa: PTH116, PTH105
# (paths stay str on the scan's hot path: os.path is several times cheaper than pathlib)

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from pathlib import Path

from probe import __version__
from probe.arch.records import FileRecord
from probe.cachedir import secure_cache_dir

log = logging.getLogger(__name__)

CACHE_FILE = "scan-v1.sqlite"
_FORMAT = 2


def stat_key(path: str, kernels: bool, member: str = "") -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return json.dumps(
        [_FORMAT, __version__, bool(kernels), path, member, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]
    )


def _stored(record: FileRecord) -> dict[str, object]:
    """What the cache keeps of a record: everything but the ``cached`` mark."""
    d = record.to_dict()
    del d["cached"]
    return d


class ScanCache:
    def __init__(self, db_path: Path) -> None:
        self.path = db_path
        self._lock = threading.Lock()
        self._pending: dict[str, str] = {}
        self._conn: sqlite3.Connection | None = None
        self._open(retry=True)

    @classmethod
    def open_default(cls) -> ScanCache | None:
        """The cache in the user's cache folder; None when that folder is refused."""
        folder = secure_cache_dir()
        return cls(folder / CACHE_FILE) if folder is not None else None

    def _open(self, retry: bool) -> None:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=5.0, check_same_thread=False)
            conn.execute("CREATE TABLE IF NOT EXISTS records (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("SELECT count(*) FROM records LIMIT 1").fetchone()
            conn.commit()
            self._conn = conn
        except (sqlite3.Error, OSError) as exc:
            self._conn = None
            if retry and self.path.exists() and isinstance(exc, sqlite3.DatabaseError):
                log.warning("scan cache %s is unreadable (%s): moving it aside", self.path, exc)
                try:
                    os.replace(self.path, str(self.path) + ".corrupt")
                except OSError:
                    return
                self._open(retry=False)
            else:
                log.warning("scan cache %s disabled: %s", self.path, exc)

    @property
    def enabled(self) -> bool:
        return self._conn is not None

    def _get_raw(self, key: str) -> str | None:
        if self._conn is None:
            return None
        with self._lock:
            try:
                row = self._conn.execute("SELECT value FROM records WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error as exc:
                log.warning("scan cache read failed (%s): cache disabled for this run", exc)
                self._conn = None
                return None
        return row[0] if row else None

    def get_many(self, key: str) -> list[FileRecord] | None:
        raw = self._get_raw(key)
        if raw is None:
            return None
        try:
            recs = [FileRecord.from_dict(r) for r in json.loads(raw)]
        except (ValueError, TypeError):
            return None
        for r in recs:
            r.cached = True
        return recs

    def put_many(self, key: str, records: list[FileRecord]) -> None:
        if self._conn is None or any(r.error for r in records):
            return
        value = json.dumps([_stored(r) for r in records])
        with self._lock:
            self._pending[key] = value
            if len(self._pending) >= 2000:
                self._flush_locked()

    def _flush_locked(self) -> None:
        if self._conn is None or not self._pending:
            self._pending.clear()
            return
        try:
            with self._conn:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO records (key, value) VALUES (?, ?)", list(self._pending.items())
                )
        except sqlite3.Error as exc:
            log.warning("scan cache write failed (%s): results not cached", exc)
        self._pending.clear()

    def close(self) -> None:
        with self._lock:
            self._flush_locked()
            if self._conn is not None:
                try:
                    self._conn.close()
                except sqlite3.Error:
                    pass
                self._conn = None
