"""Log text hygiene for the classifier: ANSI escapes, ``\\r`` progress redraws, log-line prefixes.

A line is cleaned (:func:`clean_line`) and stripped of its log prefixes (:func:`strip_prefixes`: vLLM's
``(EngineCore_DP0 pid=1234) ERROR 05-10 12:00:01 [core.py:700]``, glog, Ray, Python logging, syslog,
docker compose, Kubernetes CRI, dmesg ...) before any signature is matched; :func:`looks_binary` tells a
log from a binary file; :class:`LineMatcher` finds the signature and phase marker of a line.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Callable

from probe.catalog.signatures import CauseWords, Signature, SignatureDB

# ECMA-48 escapes: CSI (also the 8-bit \x9b), OSC / DCS / SOS / PM / APC strings (terminated or cut off),
# nF escapes such as the charset designation ``ESC ( B``, and two-character Fe / Fp / Fs escapes
_ANSI = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]+[0-~]|\x1b[0-~]"
)
# control characters left after the escapes (a bare ESC, BEL, backspace ...): never part of a log line
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_PREFIXES = [
    re.compile(r"^\s*\(?[^()]*\bpid=\d+[^()]*\)\s?"),  # (EngineCore_DP0 pid=1), its "(" cut off too
    re.compile(r"^\w+\[(?:error|info|warn\w*|debug)\]", re.I),  # runpod id[error]
    re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,.]+ [IWEF] \d+ \d+\] \S+:\d+:\s?"),  # ray C++ logging
    re.compile(
        r"^\[\d{4}-\d\d-\d\d[ T][\d:.,]+(?: [A-Z]+\d+)+\]\s*"
    ),  # SGLang (before the bare timestamp) [2024-12-13 01:44:59 TP0]
    re.compile(r"^\[?\d{4}-\d\d-\d\d[ T][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\]?\s*"),  # ISO timestamp
    re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+\s+\S+:\d+\]\s?"),  # glog (torch)
    re.compile(
        r"^(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\s+\d\d-\d\d\s+[\d:.]+\s+(?:\[[^\]]*\]|\S+:\d+\])\s?"
    ),
    re.compile(
        r"^-\s*(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\s*-\s*(?:\S+:\d+\s*-\s*)?"
    ),  # python logging rest
    re.compile(
        r"^-\s*[\w.]+\s+-\s+(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\s+-\s+"
    ),  # python logging "%(asctime)s - %(name)s - %(levelname)s - ", after its timestamp
    re.compile(r"^(?:INFO|WARNING|ERROR|DEBUG|CRITICAL):\s+"),
    re.compile(r"^E {2,}"),  # pytest failure lines
    re.compile(r"^(?:stdout|stderr) [FP] "),  # Kubernetes CRI log (after its timestamp)
    re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w.@/-]+(?:\[\d+\])?: "),  # syslog / journal
    re.compile(r"^\[\s*\d+\.\d+\]\s?"),  # dmesg [ 1843.308145]
    re.compile(r"^\[rank\d+\]:\s?"),  # torch.distributed [rank0]:
    re.compile(r"^(?:\S+\s+)?\[default\d+\]:\s?"),  # torchrun --tee [default6]: (after a job-step tag)
    re.compile(r"^[\w.-]+\s+\| "),  # docker compose service prefix
    re.compile(r"^(?:`+|>\s)"),  # markdown quoting of a pasted line
]


def looks_binary(sample: bytes) -> bool:
    """True if a chunk is not log text: NUL bytes or mostly non-printable, non-UTF-8 bytes."""
    if not sample:
        return False
    if sample.count(0) > len(sample) // 100:
        return True
    text = sample.decode("utf-8", "replace")
    bad = sum(1 for ch in text if ch == "\ufffd" or (ord(ch) < 32 and ch not in "\t\n\r\x1b\x0c\x0b"))
    return bad > len(text) * 0.3


def clean_line(raw: str) -> str:
    """Strip ANSI escapes and control characters, keep the last redraw of a ``\\r`` progress line (a line
    of escapes only is blank)."""
    line = raw.rstrip("\n")
    if "\x1b" in line or "\x9b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    return _CONTROL.sub("", line) if not line.isprintable() else line


_PREFIX_ANY = re.compile(
    "|".join(f"(?i:{rx.pattern})" if rx.flags & re.IGNORECASE else f"(?:{rx.pattern})" for rx in _PREFIXES)
)


def strip_prefixes(line: str) -> str:
    body = line
    for _ in range(8):
        m = _PREFIX_ANY.match(body)
        if m is None or not m.group(0):
            break
        body = body[m.end() :]
    return body


class LineMatcher:
    """Signatures and phase markers over cleaned line bodies, with a literal pre-check: a line can only
    match a regex if it contains one of the literals every match of it contains (found through a
    trigram index, so a line costs a few set lookups, not one regex per signature)."""

    def __init__(self, db: SignatureDB) -> None:
        # highest priority first (stable: file order among equals), each with its literal pre-check
        self._gates = [(s, s.literals) for s in sorted(db.signatures, key=lambda s: -s.priority)]
        self._phase_gates = [(p, p.literals) for p in db.phases]
        self._word_gates = [(w, w.literals) for w in db.cause_words]
        self._sig_always = [i for i, (_, g) in enumerate(self._gates) if g is None]
        self._sig_by_lit: dict[str, list[int]] = collections.defaultdict(list)
        for i, (_, g) in enumerate(self._gates):
            for x in g or ():
                self._sig_by_lit[x].append(i)
        self._by_trigram: dict[str, list[str]] = collections.defaultdict(list)
        self._short: list[str] = []  # two-character literals: looked up directly
        gated = [*self._phase_gates, *self._word_gates]
        for x in set(self._sig_by_lit) | {x for _, g in gated for x in g or ()}:
            if len(x) < 3:
                self._short.append(x)
            else:
                self._by_trigram[x[:3]].append(x)
        self._trigrams = frozenset(self._by_trigram)
        self._lit_body: str | None = None
        self._lit_hits: set[str] = set()
        self._lit_tris = 0

    def literal_hits(self, body: str) -> set[str]:
        if body is self._lit_body:
            return self._lit_hits
        low = body.lower()
        line_tris = {low[i : i + 3] for i in range(len(low) - 2)}
        tris = self._trigrams.intersection(line_tris)
        self._lit_body = body
        self._lit_tris = len(line_tris)
        self._lit_hits = {x for t in tris for x in self._by_trigram[t] if x in low}
        self._lit_hits.update(x for x in self._short if x in low)
        return self._lit_hits

    def distinct_trigrams(self, body: str) -> int:
        """How many distinct (lower-cased) trigrams ``body`` has: few for its length = repetitive."""
        self.literal_hits(body)
        return self._lit_tris

    def best(self, body: str, kinds: tuple[str, ...] | None = None) -> Signature | None:
        """The highest-priority signature matching ``body`` (ties: file order)."""
        hits = self.literal_hits(body)
        cand = set(self._sig_always)
        for x in hits:
            cand.update(self._sig_by_lit.get(x, ()))
        for i in sorted(cand):
            s = self._gates[i][0]
            if (kinds is None or s.kind in kinds) and s.pattern.search(body):
                return s
        return None

    def cause_words(self, body: str, marked: Callable[[], bool]) -> CauseWords | None:
        """The first ``cause_words`` entry found in ``body``; ``marked()``: whether the line carries an
        error marker (asked only when an entry that needs one could match: without one only the
        ``unmarked`` entries are read)."""
        hits = self.literal_hits(body)
        has_marker: bool | None = None
        for w, lits in self._word_gates:
            if lits is not None and lits.isdisjoint(hits):
                continue
            if not w.unmarked:
                if has_marker is None:
                    has_marker = marked()
                if not has_marker:
                    continue
            if w.pattern.search(body):
                return w
        return None

    def phase(self, body: str) -> str | None:
        """The phase of the first phase marker matching ``body``."""
        hits = self.literal_hits(body)
        for pm, lits in self._phase_gates:
            if lits is not None and lits.isdisjoint(hits):
                continue
            if pm.pattern.search(body):
                return pm.phase
        return None
