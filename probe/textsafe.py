"""One sanitiser for everything probe prints: text from files probe did not write (a wheel's member
names, a matrix's provenance, a log's root-cause line, a report's URL) never reaches the terminal with
its control characters.

:func:`clean` writes every character a terminal would act on instead of showing as ``\\uXXXX``: the C0
controls but tab and newline (ESC starts the escape sequences that recolour, move the cursor, retitle
the window or set the clipboard; CR overwrites the line), DEL, the 8-bit C1 controls (``\\x9b`` is a
CSI of its own), and the Unicode bidi controls and line / paragraph separators (which reorder or split
what is shown: a file name that reads as another). Inside a JSON string ``\\uXXXX`` is the same
character, so a JSON document printed through it stays the same document.

:func:`install` wraps ``sys.stdout`` and ``sys.stderr`` (the CLI does it once, for every verb: its
prints, its log lines and its error messages). Standard library only.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from typing import IO, Any

__all__ = ["SafeStream", "clean", "install"]

#: what is written as ``\\uXXXX``: C0 but tab / newline, DEL, C1, bidi controls, line separators
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
#: the same, among ASCII characters only (the fast path: most output is ASCII)
_UNSAFE_ASCII = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def _escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def clean(text: str) -> str:
    """``text`` with every control a terminal acts on written as ``\\uXXXX`` (see the module doc)."""
    if text.isascii():  # (O(1) in CPython)
        return _UNSAFE_ASCII.sub(_escape, text) if _UNSAFE_ASCII.search(text) else text
    return UNSAFE.sub(_escape, text)


class SafeStream:
    """A text stream whose every write goes through :func:`clean` (the rest is the stream's own)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(clean(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self._stream.write(clean(line))

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer …
        return getattr(self._stream, name)


def install() -> Callable[[], None]:
    """Wrap ``sys.stdout`` / ``sys.stderr`` in :class:`SafeStream`; returns what undoes it."""
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, SafeStream) and sys.stdout is not None:
        sys.stdout = SafeStream(sys.stdout)
    if not isinstance(sys.stderr, SafeStream) and sys.stderr is not None:
        sys.stderr = SafeStream(sys.stderr)

    def restore() -> None:
        sys.stdout, sys.stderr = saved

    return restore
