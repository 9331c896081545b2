"""The evidence cells of a matrix / prediction / scan file, kept between answers.

Parsing a published matrix is most of what an answer costs (the 3 MB H200 matrix: ~45 ms of JSON,
nesting check, cell checks and conversion). The cells one file gives are stored, ``marshal``-ed,
in ``<cache folder>/evidence/`` (:mod:`probe.cachedir`: user-only; a folder another user could write
is refused and nothing is cached), under a key made of

- the file's path, the GPU asked (``only_sm``) and the file's *content* (SHA-256 of its bytes, read
  in chunks: a changed file never hits);
- probe's version and the size and modification time of every file of the code and data that turn a
  file into cells (``probe/recommend``, ``probe/matrix``, ``probe/catalog``, ``probe/data`` and the core
  modules): a changed probe never hits either.

A missing, unreadable or malformed entry is a miss (the file is read as without a cache). Files over
:data:`MAX_FILE_BYTES` are not cached; the folder keeps the :data:`MAX_ENTRIES` newest entries.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import marshal
import os
from collections.abc import Callable
from pathlib import Path

from probe import __version__
from probe.recommend.types import EvidenceCell

log = logging.getLogger(__name__)

_FORMAT = 1
MAX_FILE_BYTES = 64 << 20
MAX_ENTRIES = 64
_CODE_FOLDERS = ("recommend", "matrix", "catalog", "data")

FileEvidence = tuple[list[EvidenceCell], bool]  # the cells, and whether the file counts as used


@functools.cache
def _code_stamp() -> bytes:
    """Size and modification time of every file the conversion of a file into cells depends on."""
    root = Path(__file__).resolve().parent.parent
    parts = [f"{_FORMAT}|{__version__}"]
    folders = [root] + [root / name for name in _CODE_FOLDERS]
    while folders:
        folder = folders.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if e.is_symlink():
                continue  # (probe/data/matrices: the published data, keyed by content anyway)
            if e.is_dir():
                if folder != root and e.name != "__pycache__":
                    folders.append(Path(e.path))
            elif e.name.endswith((".py", ".json")):
                st = e.stat()
                parts.append(f"{e.path}|{st.st_size}|{st.st_mtime_ns}")
    return "\n".join(parts).encode()


def _key(path: Path, only_sm: int | None) -> str | None:
    """The entry's name for ``path`` as it is now; None when it cannot be read or is too big."""
    h = hashlib.sha256(_code_stamp())
    h.update(f"\n{path.resolve()}|{only_sm}\n".encode())
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _folder() -> Path | None:
    from probe.cachedir import secure_cache_dir

    base = secure_cache_dir(warn=False)  # an answer without the cache is the same answer
    if base is None:
        return None
    folder = base / "evidence"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        log.debug("evidence cache %s disabled: %s", folder, exc)
        return None
    return folder


def _load(entry: Path) -> FileEvidence | None:
    try:
        used, rows = marshal.loads(entry.read_bytes())
        return [EvidenceCell(*row) for row in rows], bool(used)
    except FileNotFoundError:
        return None
    except (OSError, EOFError, ValueError, TypeError) as exc:
        log.debug("evidence cache entry %s unreadable (%s): read again", entry, exc)
        entry.unlink(missing_ok=True)
        return None


def _store(folder: Path, entry: Path, value: FileEvidence) -> None:
    cells, used = value
    rows = [(c.cell, c.source, c.vllm, c.gpu_name, c.gpu_count, c.image_versions) for c in cells]
    tmp = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(marshal.dumps((used, rows)))
        tmp.replace(entry)
    except (OSError, ValueError) as exc:  # ValueError: a value marshal cannot write
        log.debug("evidence cache write failed (%s)", exc)
        tmp.unlink(missing_ok=True)
        return
    _prune(folder)


def _prune(folder: Path) -> None:
    try:
        entries = sorted(folder.glob("*.marshal"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in entries[MAX_ENTRIES:]:
            old.unlink(missing_ok=True)
    except OSError as exc:
        log.debug("evidence cache prune failed (%s)", exc)


def cached(path: Path, only_sm: int | None, read: Callable[[Path, int | None], FileEvidence]) -> FileEvidence:
    """``read(path, only_sm)``, or what it gave for the same file content, code and data before."""
    folder = _folder() if os.environ.get("PROBE_EVIDENCE_CACHE", "1") != "0" else None
    key = _key(path, only_sm) if folder is not None else None
    if folder is None or key is None:
        return read(path, only_sm)
    entry = folder / f"{key}.marshal"
    hit = _load(entry)
    if hit is not None:
        return hit
    value = read(path, only_sm)
    _store(folder, entry, value)
    return value
