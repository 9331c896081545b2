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
