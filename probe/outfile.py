"""Where probe writes a file a user named (``-o``, ``--junit``, ``--summary``, a report file): only a
regular file, or a new one in a folder that exists.

A FIFO, socket or device named as an output is refused (a usage error, exit 2): writing "atomically"
(a temporary file renamed over the path) would replace ``/dev/null`` with a regular file, and opening
a FIFO for writing waits for a reader. Checked before any work is done (:func:`output_problem`, the
CLI words it with its flag), again on the descriptor when a file is opened for writing
(:func:`open_for_write`: the open never blocks, the type is checked on what was opened), and once more
right before a temporary file is renamed over the path (:func:`check_replaceable`). Folders are never
created for a path a user named. Standard library only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

from probe.errors import UsageError

__all__ = ["check_replaceable", "open_for_write", "output_problem"]

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _special(mode: int) -> str | None:
    return next((what for test, what in _KINDS if test(mode)), None)


def output_problem(path: str | os.PathLike[str]) -> str | None:
    """Why no file can be written at ``path`` (None: it can): a folder, a special file, or a folder
    that does not exist."""
    p = Path(path).absolute()
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return f"cannot be written: {exc.strerror or exc}"
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            return "is a folder; give a file name"
        what = _special(st.st_mode)
        if what is not None:
            return f"is {what}, not a regular file: not written (name a regular file or a new one)"
        return None
    if not p.parent.is_dir():
        return f"the folder {p.parent} does not exist"
    return None


def check_replaceable(path: str | os.PathLike[str]) -> None:
    """A :class:`~probe.errors.UsageError` when ``path`` is there and is not a regular file (or a
    link to one): it is never replaced by what probe writes."""
    try:
        st = Path(path).stat()
    except OSError:
        return
    what = "a folder" if stat.S_ISDIR(st.st_mode) else _special(st.st_mode)
    if what is not None:
        raise UsageError(f"{os.fspath(path)}: is {what}, not a regular file: not replaced")


def open_for_write(path: str | os.PathLike[str], *, append: bool = False) -> IO[str]:
    """``path`` opened for writing text (created when missing, emptied unless ``append``): only a
    regular file; the open never blocks (``O_NONBLOCK``: a FIFO without a reader fails at once)."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NOCTTY", 0) | (os.O_APPEND if append else 0)
    fd = os.open(path, flags, 0o666)
    try:
        st = os.fstat(fd)
        what = _special(st.st_mode)
        if what is not None:
            raise UsageError(f"{os.fspath(path)}: is {what}, not a regular file: not written")
        if not append:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "a" if append else "w", encoding="utf-8")
