"""One exception hierarchy; each class carries the process exit code the CLI returns.

Exit codes (documented in README.md, stable for CI scripts):

====  ==========================================================================
code  meaning
====  ==========================================================================
0     success (``gate``: nothing regressed)
1     ``gate``: regression found
2     usage or configuration error (bad flag, unknown model, bad target name)
3     ``gate`` / ``diff``: nothing to compare (no overlapping cells, empty matrix)
4     probe infrastructure failed (the prober itself, not a probed backend)
5     partial result: the command finished but some inputs could not be read
      (``scan``: files with errors; ``run``: cells that could not be run)
6     invalid input data (a matrix / journal that is not JSON, another schema
      version, or internally inconsistent)
130   interrupted (Ctrl-C)
====  ==========================================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_NOTHING_TO_COMPARE = 3
EXIT_INFRA = 4
EXIT_PARTIAL = 5
EXIT_BAD_INPUT = 6
EXIT_INTERRUPTED = 130


class ProbeError(Exception):
    """Base class: a failure the CLI reports as one clear message, never a traceback."""

    exit_code: int = EXIT_INFRA

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(ProbeError):
    """The user asked for something that cannot be done as asked (bad flag value, unknown name)."""

    exit_code = EXIT_USAGE


class OptionError(UsageError):
    """A setting has a value that cannot be used. ``option`` names the setting (``kinds``,
    ``slowdown``), never a command-line flag: the CLI words it as its own flag."""

    def __init__(self, option: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{option}: {message}", hint=hint)
        self.option = option
        self.detail = message


class BadInputError(ProbeError):
    """An input file (matrix, journal, log, config.json) is unreadable or invalid."""

    exit_code = EXIT_BAD_INPUT


class NothingToCompareError(ProbeError):
    """``gate`` / ``diff`` found no common ground between baseline and current."""

    exit_code = EXIT_NOTHING_TO_COMPARE


class InfraError(ProbeError):
    """The prober's own machinery failed (could not start a worker, disk full, ...)."""

    exit_code = EXIT_INFRA


class DataFileError(ProbeError):
    """A packaged data file (catalog, profiles, signatures) failed validation: a bug in probe."""

    exit_code = EXIT_INFRA
