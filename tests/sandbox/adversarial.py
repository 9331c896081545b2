"""Long adversarial lines for a regular expression: what makes a backtracking matcher slow.

For a pattern, the lines repeat (to a given length) what nearly matches it: strings generated from
the pattern's own syntax tree, cut short by a character or by half (a match that never completes),
joined with nothing, a space or a slash; its literal words, run together or spaced; and runs of one
character (spaces, letters, digits, punctuation). A pattern whose time grows faster than the line
(``a.*b.*c`` started at every ``a``, ``\\S* ?\\S*`` split every possible way) shows it on these.
"""

from __future__ import annotations

import random
import re
from typing import Any

try:  # Python >= 3.11
    from re import _constants as _c  # type: ignore[attr-defined, unused-ignore]
    from re import _parser as _p  # type: ignore[attr-defined, unused-ignore]
except ImportError:  # Python 3.10
    import sre_constants as _c  # type: ignore[no-redef, unused-ignore]
    import sre_parse as _p  # type: ignore[no-redef, unused-ignore]

_CATEGORY = {
    _c.CATEGORY_DIGIT: "1",
    _c.CATEGORY_WORD: "w",
    _c.CATEGORY_SPACE: " ",
    _c.CATEGORY_NOT_SPACE: "s",
    _c.CATEGORY_NOT_DIGIT: "d",
    _c.CATEGORY_NOT_WORD: "-",
}
_REPEATS = tuple(x for x in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)) if x)


def _one_of(items: Any) -> str:
    """A character of a character class (``[...]``)."""
    ch = None
    negated = any(op is _c.NEGATE for op, _ in items)
    for op, av in items:
        if op is _c.LITERAL:
            ch = chr(av)
        elif op is _c.RANGE:
            ch = chr(av[0])
        elif op is _c.CATEGORY:
            ch = _CATEGORY.get(av, "a")
        if ch is not None:
            break
    if negated:
        return "q" if ch != "q" else "z"
    return ch or "a"


def sample(items: Any, rnd: random.Random) -> str:
    """A string the parsed pattern ``items`` (nearly) matches: lookarounds and anchors left out."""
    out: list[str] = []
    for op, av in items:
        if op is _c.LITERAL:
            out.append(chr(av))
        elif op is _c.NOT_LITERAL:
            out.append("x" if chr(av) != "x" else "y")
        elif op is _c.ANY:
            out.append("a")
        elif op is _c.IN:
            out.append(_one_of(av))
        elif op is _c.SUBPATTERN:
            out.append(sample(av[-1], rnd))
        elif op is _c.BRANCH:
            out.append(sample(rnd.choice(av[1]), rnd))
        elif op in _REPEATS:
            lo, hi, sub = av
            top = 3 if hi is _c.MAXREPEAT else hi
            n = lo if rnd.random() < 0.5 else min(max(lo, 1), top)
            out.append("".join(sample(sub, rnd) for _ in range(n)))
        elif op is _c.CATEGORY:
            out.append("a")
    return "".join(out)


def samples(pattern: str, n: int = 6, seed: int = 0) -> list[str]:
    rnd = random.Random(seed)
    tree = _p.parse(pattern)
    found: dict[str, None] = {}
    for _ in range(n * 3):
        found.setdefault(sample(tree, rnd), None)
    return list(found)[:n]


def _fill(unit: str, length: int) -> str:
    return (unit * (length // len(unit) + 1))[:length]


def adversarial_lines(pattern: str, length: int = 16384, seed: int = 0) -> list[str]:
    """Lines of ``length`` characters that make a backtracking matcher work hard on ``pattern``."""
    words = re.findall(r"[A-Za-z_]{2,}", pattern) or ["a"]
    pieces = [*samples(pattern, seed=seed), " ".join(words), "".join(words)]
    out: list[str] = []
    for s in pieces:
        for cut in (s, s[:-1], s[1:], s[: len(s) // 2]):
            if cut:
                out.extend(_fill(cut + sep, length) for sep in ("", " ", "/"))
    out.extend(ch * length for ch in "a 1/.:-('\"_")
    return list(dict.fromkeys(out))
