"""Plain-text tables (``simple`` and GitHub Markdown), laid out as ``tabulate`` lays them out, in time
linear in the number of cells: a 100,000-row matrix renders in well under a second (``tabulate``
takes seconds). Control characters (ANSI escapes from logs, newlines) become spaces: a matrix from
elsewhere cannot drive the terminal it is shown in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: characters outside these ranges may be wide or zero-width: only then is wcwidth asked (slow)
_MAYBE_NOT_ONE = re.compile(
    "[^\x20-\x7e\u00a0-\u00ac\u00ae-\u02ff\u2010-\u2027\u2030-\u205e\u20a0-\u20bf\u2190-\u21ff\u2500-\u257f]"
)
MIN_PADDING = 2  # as tabulate: a column is at least its header's width + 2


def _width_fn() -> Callable[[str], int]:
    try:
        from wcwidth import wcswidth  # what tabulate uses for wide characters, when installed
    except ImportError:
        return len

    def width(s: str) -> int:
        if s.isascii() or not _MAYBE_NOT_ONE.search(s):
            return len(s)
        w = wcswidth(s)
        return w if w >= 0 else len(s)

    return width


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], fmt: str = "simple") -> str:
    """``fmt``: ``simple`` (columns two spaces apart, a dashed rule) or ``github`` (Markdown)."""
    width = _width_fn()

    def clean(s: str) -> str:
        return _CONTROL.sub(" ", s).strip()

    head = [_CONTROL.sub(" ", h) for h in headers]  # (headers keep their spaces, as in tabulate)
    body = [[clean(x) for x in r] for r in rows]
    widths = [width(h) + MIN_PADDING for h in head]
    for r in body:
        for i, x in enumerate(r):
            w = width(x)
            if w > widths[i]:
                widths[i] = w

    def line(cells: Sequence[str]) -> str:
        padded = [x + " " * (w - width(x)) for x, w in zip(cells, widths, strict=True)]
        return ("| " + " | ".join(padded) + " |") if fmt == "github" else "  ".join(padded).rstrip()

    if fmt == "github":
        rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    else:
        rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(head), rule, *(line(r) for r in body)])
