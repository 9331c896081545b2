"""Word the core's :class:`~probe.errors.OptionError` (which names a setting) as a command-line flag."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from probe.errors import OptionError, UsageError

_T = TypeVar("_T")


def flag_error(exc: OptionError) -> UsageError:
    """``OptionError("fa_versions", "takes 2, 3 and/or 4")`` → ``--fa-versions: takes 2, 3 and/or 4``."""
    return UsageError(f"--{exc.option.replace('_', '-')}: {exc.detail}", hint=exc.hint)


def with_flag_errors(fn: Callable[[], _T]) -> _T:
    """Call ``fn``; an ``OptionError`` it raises comes back worded as a flag error."""
    try:
        return fn()
    except OptionError as exc:
        raise flag_error(exc) from exc


def output_file(path: str, flag: str) -> str:
    """``path`` when a file can be written there: not a folder, in a folder that exists; else a
    :class:`~probe.errors.UsageError` naming ``flag`` (checked before any work is done)."""
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    if not p.absolute().parent.is_dir():
        raise UsageError(f"{flag} {path}: the folder {p.absolute().parent} does not exist")
    return path


def written(flag: str, path: str, write: Callable[[], _T]) -> _T:
    """Call ``write``; an ``OSError`` (permission denied, disk full) is a usage error naming the flag."""
    try:
        return write()
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None
