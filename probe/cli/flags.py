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
    """``path`` when a file can be written there: a regular file or a new one, in a folder that exists
    (not a folder, FIFO or device: :func:`probe.outfile.output_problem`); else a
    :class:`~probe.errors.UsageError` naming ``flag`` (checked before any work is done)."""
    from probe.outfile import output_problem

    problem = output_problem(path)
    if problem is not None:
        raise UsageError(f"{flag} {path}: {problem}")
    return path


def written(flag: str, path: str, write: Callable[[], _T]) -> _T:
    """Call ``write``; an ``OSError`` (permission denied, disk full) is a usage error naming the flag."""
    try:
        return write()
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None
