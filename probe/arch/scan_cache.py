"""Scan result cache: a re-scan of an unchanged environment reads no device code at all.

Records are keyed by ``(path, size, mtime_ns, ctime_ns, inode, device)`` plus the probe version and
the ``--kernels`` flag, and stored in one SQLite file (transactions make every write atomic; several
probe processes may share it). Location: ``$PROBE_CACHE_DIR``, else ``$XDG_CACHE_HOME/probe``,
else ``~/.cache/probe``.

Keys cannot go stale: a file rewritten in place keeps its size and can be given back its mtime
(``touch -d``), never its ctime (the kernel sets it on every write and every ``utime``). A file whose
ctime lies within :data:`RACY_S` seconds of the scan (or ahead of it) could still change within the
same clock tick: its entry carries the SHA-256 of the whole file, checked on every hit (as git does
with "racily clean" index entries).

A database that is not one (``SQLITE_NOTADB``, ``SQLITE_CORRUPT``) is moved aside once; one another
process holds locked past the timeout is left alone (never taken for corrupt: its writer's commit
must not fail) and this scan goes on uncached, as it does when the cache cannot be opened at all.
Records with an error are never stored (the error may be transient: a file that vanished).

The folder is the user's alone (:func:`probe.cachedir.secure_cache_dir`): created with mode 0700, and one that
another user owns or that group / others may write is refused with the reason (a warning; the scan
goes on uncached) — whoever can write the cache decides what a scan reports.
"""

# ruff: noqa: PTH116, PTH105
# (paths stay str on the scan's hot path: os.path is several times cheaper than pathlib)

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path

from probe import __version__
from probe.arch.records import FileRecord
from probe.cachedir import secure_cache_dir

log = logging.getLogger(__name__)

CACHE_FILE = "scan-v1.sqlite"
_FORMAT = 3
#: a file changed this close to the scan (seconds) gets a content digest with its entry
RACY_S = 2.0
#: the SQLite errors that mean "not a database": the only ones that move the file aside
_NOT_A_DATABASE = ("SQLITE_NOTADB", "SQLITE_CORRUPT")
_NOT_A_DATABASE_TEXT = ("file is not a database", "malformed", "file is encrypted")


def stat_key(path: str, kernels: bool, member: str = "", expect: tuple[int, int] | None = None) -> str | None:
    """The cache key of ``path`` as it is now (None: it cannot be stat'ed, or it is not the file
    ``expect`` names: the (device, inode) the walk judged)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if expect is not None and (st.st_dev, st.st_ino) != expect:
        return None
    return json.dumps(
        [_FORMAT, __version__, bool(kernels), path, member, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
         st.st_ino, st.st_dev]
    )  # fmt: skip


def _racy(key: str) -> str | None:
    """The path of a key whose file changed within :data:`RACY_S` of now (or ahead of it), else None."""
    try:
        k = json.loads(key)
        path, ctime_ns = k[3], k[7]
    except (ValueError, IndexError, TypeError):
        return None
    return path if ctime_ns >= (time.time() - RACY_S) * 1e9 else None


def content_digest(path: str) -> str | None:
    """SHA-256 of a regular file's bytes (None when it cannot be read)."""
    from probe.arch.inputs import open_regular

    h = hashlib.sha256()
    try:
        fd = open_regular(path)
    except OSError:
        return None
    try:
        while data := os.read(fd, 4 << 20):
            h.update(data)
    except OSError:
        return None
    finally:
        os.close(fd)
    return h.hexdigest()


def _not_a_database(exc: sqlite3.Error) -> bool:
    """The error says the file is no SQLite database (a lock, a full disk or a read-only file do not)."""
    name = getattr(exc, "sqlite_errorname", None)  # (Python >= 3.11)
    if name is not None:
        return str(name) in _NOT_A_DATABASE
    return not isinstance(exc, sqlite3.OperationalError) and any(t in str(exc) for t in _NOT_A_DATABASE_TEXT)


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
            if retry and self.path.exists() and isinstance(exc, sqlite3.Error) and _not_a_database(exc):
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
            value = json.loads(raw)
            if isinstance(value, dict):  # a racy entry: its file's content must be the one scanned
                digest = value.get("sha256")
                if not digest or digest != content_digest(json.loads(key)[3]):
                    return None
                value = value["records"]
            recs = [FileRecord.from_dict(r) for r in value]
        except (ValueError, TypeError, KeyError, IndexError):
            return None
        for r in recs:
            r.cached = True
        return recs

    def put_many(self, key: str, records: list[FileRecord]) -> None:
        if self._conn is None or any(r.error for r in records):
            return
        stored: object = [_stored(r) for r in records]
        racy = _racy(key)
        if racy is not None:
            digest = content_digest(racy)
            if digest is None:
                return
            stored = {"sha256": digest, "records": stored}
        value = json.dumps(stored)
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
