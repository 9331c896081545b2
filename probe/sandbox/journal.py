"""The run journal: JSON lines, one ``CellResult`` per line, fsync'ed after every cell.

Line 1 is a header ``{"probe_journal": 1, "run_id": ..., "plan_hash": ..., "probe_version": ...,
"started_at": ...}``; a resumed run appends a ``{"probe_journal": 1, "resumed_at": ...}`` line.
Every other line is one ``CellResult`` (``probe.cells``) as JSON. A ``not_run`` row (the time budget
was spent, a compile stopped unfinished) does not count as done: a resumed run runs that cell and its
new row supersedes the ``not_run`` one (:func:`latest`).

Crash safety: each row is written with one ``write`` + ``fsync``. After a kill -9 of the prober the
last line may be torn (no trailing newline): :meth:`Journal.open` ignores it and truncates it away
before appending, so a resume loses nothing that was fsync'ed and re-runs the cell that was in flight.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from probe import __version__, safejson
from probe.cells import CellResult, CellSpec
from probe.errors import BadInputError, OptionError
from probe.outcomes import Outcome

log = logging.getLogger(__name__)

JOURNAL_VERSION = 1


def plan_hash(specs: Iterable[CellSpec]) -> str:
    h = hashlib.sha256()
    for s in specs:
        h.update(json.dumps(s.model_dump(mode="json"), sort_keys=True).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


#: the largest journal read back (a 1,300-cell run writes ~10 MB)
MAX_JOURNAL = 256 << 20


def read_journal(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], list[CellResult], int]:
    """Parse a journal. Returns (header lines, results, byte length of the intact part).

    A final line without a newline (torn by a kill) is ignored; any other bad line is an error."""
    from probe.userfile import MissingFileError, read_bytes

    p = Path(path)
    try:  # a regular file only, bounded (a FIFO named as the journal is refused, not waited on)
        data = read_bytes(p, what="journal", limit=MAX_JOURNAL, gz=False)
    except MissingFileError:
        return [], [], 0
    good = data.rfind(b"\n") + 1
    if good < len(data):
        log.warning("journal %s: ignoring a torn last line (%d bytes)", p, len(data) - good)
    headers: list[dict[str, Any]] = []
    results: list[CellResult] = []
    for n, line in enumerate(data[:good].split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            obj = safejson.loads(line)
        except ValueError as exc:  # not JSON, or nested too deeply
            raise BadInputError(f"journal {p} line {n} is not JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise BadInputError(f"journal {p} line {n} is not a JSON object")
        if "probe_journal" in obj:
            if obj["probe_journal"] != JOURNAL_VERSION:
                raise BadInputError(
                    f"journal {p} has version {obj['probe_journal']}, expected {JOURNAL_VERSION}"
                )
            headers.append(obj)
            continue
        try:
            results.append(CellResult.model_validate(obj))
        except ValidationError as exc:
            raise BadInputError(f"journal {p} line {n} is not a cell result: {exc}") from exc
    if results and not headers:
        raise BadInputError(f"journal {p} has no header line (not a probe journal?)")
    return headers, results, good


def _open_for_append(p: Path, extra: int) -> int:
    """The journal opened for writing: a regular file only (the open never waits on a FIFO)."""
    from probe.outfile import check_replaceable

    check_replaceable(p)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | extra, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OptionError("journal", f"{p} is not a regular file: not written")
    return fd


def latest(results: Iterable[CellResult]) -> list[CellResult]:
    """One row per cell: the first measured row, else the last ``not_run`` row (a later run measured
    what an earlier one could not); in the order the kept rows were written."""
    chosen: dict[str, tuple[int, CellResult]] = {}
    for n, r in enumerate(results):
        had = chosen.get(r.id)
        if had is None or (had[1].outcome is Outcome.NOT_RUN):
            chosen[r.id] = (n, r)
    return [r for _, r in sorted(chosen.values(), key=lambda x: x[0])]


class Journal:
    """Append-only, fsync'ed JSON-lines journal of cell results."""

    def __init__(self, path: Path, fd: int, header: dict[str, Any], results: list[CellResult]) -> None:
        self.path = path
        self._fd = fd
        self.header = header
        self.results = latest(results)
        self.done_ids: set[str] = {r.id for r in self.results if r.outcome is not Outcome.NOT_RUN}

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, resume: bool, run_meta: dict[str, Any] | None = None
    ) -> Journal:
        """Start a new journal (refuses to overwrite a non-empty one unless ``resume``) or resume one."""
        p = Path(path)
        meta = dict(run_meta or {})
        headers, results, good = read_journal(p)
        if headers or results:
            if not resume:
                raise OptionError(
                    "journal", f"{p} already exists", hint="resume it, or choose another journal path"
                )
            first = headers[0]
            if meta.get("plan_hash") and first.get("plan_hash") and meta["plan_hash"] != first["plan_hash"]:
                log.warning(
                    "journal %s was written for another plan (hash %s, now %s); cells already "
                    "recorded are kept and skipped by id",
                    p,
                    first["plan_hash"],
                    meta["plan_hash"],
                )
            dups = len(results) - len({r.id for r in results if r.outcome is not Outcome.NOT_RUN})
            dups -= sum(1 for r in results if r.outcome is Outcome.NOT_RUN)
            if dups > 0:
                log.warning("journal %s holds %d duplicate cell rows; the first of each is used", p, dups)
            fd = _open_for_append(p, 0)
            os.ftruncate(fd, good)  # drop a torn last line
            os.lseek(fd, 0, os.SEEK_END)
            j = cls(p, fd, first, results)
            j._write(
                {
                    "probe_journal": JOURNAL_VERSION,
                    "resumed_at": _now(),
                    "probe_version": __version__,
                    **{k: v for k, v in meta.items() if k in ("plan_hash", "run_id")},
                }
            )
            return j
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = _open_for_append(p, os.O_TRUNC)
        header = {
            "probe_journal": JOURNAL_VERSION,
            "run_id": meta.pop("run_id", None),
            "plan_hash": meta.pop("plan_hash", None),
            "probe_version": __version__,
            "started_at": _now(),
            **meta,
        }
        j = cls(p, fd, header, [])
        j._write(header)
        return j

    def _write(self, obj: dict[str, Any]) -> None:
        self._write_lines([obj])

    def _write_lines(self, objs: list[dict[str, Any]]) -> None:
        data = "".join(json.dumps(o, separators=(",", ":"), default=str) + "\n" for o in objs).encode()
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        os.fsync(self._fd)

    def append(self, result: CellResult) -> None:
        self.extend([result])

    def extend(self, results: Iterable[CellResult]) -> None:
        """Append rows with one write and one fsync (rows copied from an earlier run, by the thousand)."""
        fresh: dict[str, CellResult] = {}
        for r in results:
            if r.id in self.done_ids or r.id in fresh:
                log.warning("cell %s is already in the journal; not written twice", r.id)
                continue
            fresh[r.id] = r
        if not fresh:
            return
        self._write_lines([r.model_dump(mode="json") for r in fresh.values()])
        superseded = {r.id for r in self.results if r.id in fresh}  # not_run rows of these cells
        if superseded:
            self.results = [r for r in self.results if r.id not in superseded]
        for r in fresh.values():
            self.results.append(r)
            if r.outcome is not Outcome.NOT_RUN:
                self.done_ids.add(r.id)

    @property
    def run_id(self) -> str | None:
        return self.header.get("run_id")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
