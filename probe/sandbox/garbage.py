"""Garbage generated text: a line that is, for a good part, one token or symbol repeated.

A model whose kernels compute garbage does not raise: it emits the same token over and over
(``!!!!!!!!``, ``-SIP-SIP-SIP``, ``<|reserved_special_token_247|>`` repeated, runs of zeros), or loops
on one phrase (the same sentence of several words again and again, back to back). The
classifier reads such a line as ``wrong_output`` evidence when nothing states a cause
(docs/sandbox.md "Decision order", rule ``garbage-output``).

What is *not* garbage, although it repeats: separators and rules (``=====``, ``-----``, ``#####``),
progress bars (``█████``), traceback carets (``^^^^``), tables of empty cells (``|  |  |``), hex dumps
and numbers (``0x0000000000000000``, ``00 00 00 00``, ``0., 0., 0.``).

Cost: a run of one character is one cheap regex search; the search for longer units runs only on lines
whose distinct trigrams are few for their length (the matcher computes that set anyway).
"""

from __future__ import annotations

import re

MIN_LENGTH = 32  # shorter lines are judged only when they are one character repeated
MAX_DIVERSITY = 0.5  # distinct trigrams / length above this: an ordinary line
SINGLE_RUN = 12  # one character repeated at least this many times in a row
UNIT_RUN = 8  # a unit of 2..40 characters repeated at least this many times in a row
SPECIAL_RUN = 4  # a special token (``<|...|>``) repeated at least this many times in a row
PHRASE_RUN = 4  # a phrase of PHRASE_WORDS words or more repeated at least this many times in a row
PHRASE_WORDS = (3, 40)
MAX_WORDS = 4000  # words of one line searched for a phrase loop

_SINGLE = re.compile(rf"(.)\1{{{SINGLE_RUN - 1},}}")
_UNIT = re.compile(rf"(.{{2,40}}?)\1{{{UNIT_RUN - 1},}}")
_SPECIAL = re.compile(rf"(<\|[^|<>\s]{{1,60}}\|>)\s*(?:\1\s*){{{SPECIAL_RUN - 1},}}")
# characters of rules, tables, bars, carets and box drawing: runs of these are layout
_LAYOUT = frozenset(" \t=-_*#~.+|/\\<>:;,`'\"^()[]{}") | {chr(c) for c in range(0x2500, 0x2600)}
# escaped blank lines or tabs of a JSON / repr dump (``\\n\\n\\n``)
_ESCAPES = re.compile(r"(?:\\[nrt]|\s)+")
# a unit made of these only is a number, a hex dump or a tensor print
_NUMERIC = frozenset("0123456789abcdefABCDEFxX.,:;+-eE ()[]")


def _digit_run_is_a_token(line: str, start: int, end: int) -> bool:
    """A run of one digit counts only as a token of its own (``' 000000000000000'``), not inside a number
    or a hex word (``0x0000000000000000``, ``1.0000000000000000``, ``11500000000000001``)."""
    before = line[start - 1] if start > 0 else " "
    after = line[end] if end < len(line) else " "
    return not (before.isalnum() or before in "._") and not (after.isalnum() or after in "._")


def repeated_unit(line: str, distinct_trigrams: int) -> str | None:
    """The token or symbol repeated in ``line`` if it is garbage text, else None. ``distinct_trigrams``
    (how many distinct trigrams the line has) gates the costly search for units of several characters."""
    whole = line.strip()
    if len(whole) >= SINGLE_RUN and whole[0] not in _LAYOUT and whole == whole[0] * len(whole):
        return whole[0]  # the whole line is one character repeated (``GGGGGGGGGGGGGGGG``), however short
    if len(line) < MIN_LENGTH:
        return None
    if "<|" in line:
        m = _SPECIAL.search(line)
        if m:
            return m.group(1)
    for m in _SINGLE.finditer(line):
        ch = m.group(1)
        if ch in _LAYOUT or ch.isspace():
            continue
        if ch.isdigit() and not _digit_run_is_a_token(line, m.start(), m.end()):
            continue
        return ch
    if distinct_trigrams >= MAX_DIVERSITY * (len(line) - 2):
        return None
    for m in _UNIT.finditer(line):
        unit = m.group(1)
        if len(set(unit)) < 2 or all(c in _LAYOUT for c in unit) or all(c in _NUMERIC for c in unit):
            continue
        if not any(c.isalnum() or c in "!?" for c in unit) or _ESCAPES.fullmatch(unit):
            continue
        return unit
    return _repeated_phrase(line.split())


def _repeated_phrase(words: list[str]) -> str | None:
    """A phrase of PHRASE_WORDS words, three or more of them different words of letters, said PHRASE_RUN
    times back to back: a generation loop. Linear per phrase length: a run of positions where each word
    equals the one k words before it, (PHRASE_RUN - 1) * k long, is the phrase repeated."""
    lo, hi = PHRASE_WORDS
    words = words[:MAX_WORDS]
    for k in range(lo, min(hi, len(words) // PHRASE_RUN) + 1):
        need, run = (PHRASE_RUN - 1) * k, 0
        for p in range(k, len(words)):
            run = run + 1 if words[p] == words[p - k] else 0
            if run != need:
                continue  # judged once per run: further on in it the phrase is only rotated
            unit = words[p - need - k + 1 : p - need + 1]
            if len({w.strip(".,;:!?'\"").lower() for w in unit if w.strip(".,;:!?'\"").isalpha()}) >= lo:
                return " ".join(unit)  # several different words of letters: a phrase, not one token
    return None
