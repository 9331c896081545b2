"""The crash classifier: from a log (+ exit status when known) to an outcome and its root-cause line.

Rules (the signatures themselves live in ``probe/data/signatures.json``):

1. Each line is cleaned (ANSI colours, ``\\r`` progress redraws) and stripped of log prefixes
   (``(EngineCore_DP0 pid=1234) ERROR 05-10 12:00:01 [core.py:700]``, glog, Ray, Python logging)
   before matching; the root cause is reported as the cleaned line.
2. On one line, the matching signature with the highest priority wins (so a benign context such
   as the autotuner's "Skipping tactic ..." beats the decisive text it quotes).
3. The root cause is the **earliest decisive** line. Without one: the earliest Python exception
   line no signature explains, mapped by exception type; then a degraded-kind line that carries an
   outcome (e.g. a fatal TMA-WS init failure); then echoes (cuBLAS execution failures after a CUDA
   error); then the run's own evidence (timeout, signal, exit code); wrapper lines ("Engine core
   initialization failed", EngineDeadError) come last.
4. Benign and degraded lines never make a run fail; when the run succeeded they set ``degraded``.
5. A log with no failure evidence that *ends* on a progress line (stats with queued requests,
   "# GPU blocks") is a hang (``timeout``); otherwise it is ``ok``.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from probe.catalog.signatures import Signature, SignatureDB, signature_db
from probe.outcomes import Outcome

MAX_LINE = 16 * 1024  # characters of one line that are matched (the rest is ignored)
_MAX_KEEP = 64  # matches kept per kind

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_PREFIXES = [
    re.compile(r"^\s*\([^()]*\bpid=\d+[^()]*\)\s?"),  # (EngineCore_DP0 pid=1)
    re.compile(r"^\w+\[(?:error|info|warn\w*|debug)\]", re.I),  # runpod id[error]
    re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,.]+ [IWEF] \d+ \d+\] \S+:\d+:\s?"),  # ray C++ logging
    re.compile(r"^\[?\d{4}-\d\d-\d\d[ T][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\]?\s*"),  # ISO timestamp
    re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+\s+\S+:\d+\]\s?"),  # glog (torch)
    re.compile(
        r"^(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\s+\d\d-\d\d\s+[\d:.]+\s+(?:\[[^\]]*\]|\S+:\d+\])\s?"
    ),
    re.compile(
        r"^-\s*(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\s*-\s*(?:\S+:\d+\s*-\s*)?"
    ),  # python logging rest
    re.compile(r"^(?:INFO|WARNING|ERROR|DEBUG|CRITICAL):\s+"),
    re.compile(r"^E {2,}"),  # pytest failure lines
    re.compile(r"^\[\d{4}-\d\d-\d\d[ T][\d:.,]+(?: [A-Z]+\d+)+\]\s*"),  # SGLang [2024-12-13 01:44:59 TP0]
    re.compile(r"^(?:stdout|stderr) [FP] "),  # Kubernetes CRI log (after its timestamp)
    re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w.@/-]+(?:\[\d+\])?: "),  # syslog / journal
    re.compile(r"^\[\s*\d+\.\d+\]\s?"),  # dmesg [ 1843.308145]
    re.compile(r"^\[rank\d+\]:\s?"),  # torch.distributed [rank0]:
    re.compile(r"^[\w.-]+\s+\| "),  # docker compose service prefix
    re.compile(r"^(?:`+|>\s)"),  # markdown quoting of a pasted line
]
# Python's warnings module: "path.py:12: SomeWarning: message" (+ message lines, then the indented source)
_PYWARN = re.compile(r"^\S.*?:\d+: (?:[A-Z]\w*)?Warning: ")
# a finished progress bar ("100%|", "35/35") is not a stall
_DONE_PROGRESS = re.compile(r"\b100%|\b(\d+)/\1\b(?!\d)")
_EXC = re.compile(
    r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Fault|Failure))(?::\s?(.*))?$"
)
_TB_START = "Traceback (most recent call last)"


@dataclass
class Verdict:
    """The classifier's answer."""

    outcome: Outcome
    root_cause: str | None = None
    hint: str | None = None
    phase: str | None = None
    degraded: bool = False
    degraded_reasons: list[str] = field(default_factory=list)
    line_number: int | None = None
    signature: str | None = None
    lines: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "root_cause": self.root_cause,
            "hint": self.hint,
            "degraded": self.degraded,
            "degraded_reasons": self.degraded_reasons,
            "phase": self.phase,
            "line_number": self.line_number,
            "signature": self.signature,
        }


@dataclass
class _Hit:
    line_no: int
    text: str
    sig: Signature | None = None
    exc_type: str | None = None
    exc_msg: str | None = None
    outcome: Outcome | None = None


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
    """Strip ANSI escapes and keep the last redraw of a ``\\r`` progress line."""
    line = _ANSI.sub("", raw.rstrip("\n"))
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    return line


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


class LogScanner:
    """Streams lines, keeping only what the verdict needs (bounded memory for any log size)."""

    def __init__(self, db: SignatureDB | None = None) -> None:
        self.db = db or signature_db()
        # highest priority first (stable: file order among equals), each with its literal pre-check
        self._sigs = sorted(self.db.signatures, key=lambda s: -s.priority)
        self._gates = [(s, s.literals) for s in self._sigs]
        self._phase_gates = [(p, p.literals) for p in self.db.phases]
        # literal index: a line can only match a signature if it contains one of its literals
        self._sig_always = [i for i, (_, g) in enumerate(self._gates) if g is None]
        self._sig_by_lit: dict[str, list[int]] = collections.defaultdict(list)
        for i, (_, g) in enumerate(self._gates):
            for x in g or ():
                self._sig_by_lit[x].append(i)
        self._by_trigram: dict[str, list[str]] = collections.defaultdict(list)
        for x in set(self._sig_by_lit) | {x for _, g in self._phase_gates for x in g or ()}:
            self._by_trigram[x[:3]].append(x)
        self._trigrams = frozenset(self._by_trigram)
        self._lit_body: str | None = None
        self._lit_hits: set[str] = set()
        self.n = 0
        self.hits: dict[str, list[_Hit]] = collections.defaultdict(list)
        self.exceptions: list[_Hit] = []
        self.degraded_reasons: list[str] = []
        self.phase_marks: list[tuple[int, str]] = []
        self.tail: collections.deque[tuple[int, str, Signature | None]] = collections.deque(maxlen=3)
        self.last_finish: int | None = None
        self._in_tb = False
        self._warn_body = 0  # lines left of a Python warning's message
        self.bytes_in = 0  # bytes read by feed_stream
        self.text_lines = 0  # non-blank lines seen
        self.looks_binary = False  # feed_stream: the first chunk is not text

    # -- feeding ----------------------------------------------------------------------------------
    def feed_text(self, text: str) -> None:
        for line in text.splitlines():
            self.feed_line(line)

    def feed_stream(self, stream: IO[bytes], chunk: int = 1 << 20) -> None:
        """Read a binary stream line by line with bounded memory (over-long lines are cut)."""
        buf = b""
        while True:
            data = stream.read(chunk)
            if not data:
                break
            if self.bytes_in == 0:
                self.looks_binary = looks_binary(data[:65536])
            self.bytes_in += len(data)
            buf += data
            start = 0
            while True:
                nl = buf.find(b"\n", start)
                if nl < 0:
                    break
                self.feed_line(buf[start : min(nl, start + MAX_LINE * 4)].decode("utf-8", "replace"))
                start = nl + 1
            buf = buf[start:]
            if len(buf) > MAX_LINE * 4:  # a giant line without newline: keep its start only
                self.feed_line(buf[: MAX_LINE * 4].decode("utf-8", "replace"))
                buf = b""
                self._skip_rest_of_line(stream, chunk)
        if buf:
            self.feed_line(buf.decode("utf-8", "replace"))

    def _skip_rest_of_line(self, stream: IO[bytes], chunk: int) -> None:
        # Not seekable in general (stdin): the remainder will be fed as a new line; acceptable.
        return

    def _literal_hits(self, body: str) -> set[str]:
        if body is self._lit_body:
            return self._lit_hits
        low = body.lower()
        tris = self._trigrams.intersection({low[i : i + 3] for i in range(len(low) - 2)})
        self._lit_body = body
        self._lit_hits = {x for t in tris for x in self._by_trigram[t] if x in low}
        return self._lit_hits

    def _best(self, body: str, kinds: tuple[str, ...] | None = None) -> Signature | None:
        """The highest-priority signature matching ``body`` (ties: file order)."""
        hits = self._literal_hits(body)
        cand = set(self._sig_always)
        for x in hits:
            cand.update(self._sig_by_lit.get(x, ()))
        for i in sorted(cand):
            s = self._gates[i][0]
            if (kinds is None or s.kind in kinds) and s.pattern.search(body):
                return s
        return None

    def feed_line(self, raw: str) -> None:
        self.n += 1
        n = self.n
        if len(raw) > MAX_LINE:  # keep the last redraw of a progress line, then both ends
            cut = raw.rfind("\r", 0, len(raw) - 1)
            if cut >= 0:
                raw = raw[cut + 1 :]
            if len(raw) > MAX_LINE:
                raw = raw[: MAX_LINE // 2] + " ... " + raw[-(MAX_LINE // 2) :]
        line = clean_line(raw)
        body = strip_prefixes(line)
        stripped = body.strip()
        sig = self._best(body) if stripped else None
        # phase markers
        hits = self._literal_hits(body)
        for pm, lits in self._phase_gates:
            if lits is not None and lits.isdisjoint(hits):
                continue
            if pm.pattern.search(body):
                changed = not self.phase_marks or self.phase_marks[-1][1] != pm.phase
                if changed and len(self.phase_marks) < 10000:
                    self.phase_marks.append((n, pm.phase))
                break
        text = line.strip()[:1000]
        if stripped:
            self.text_lines += 1
        # A Python warning never ends a run: its header may carry benign/degraded evidence only,
        # and its message continuation lines (until the indented source line) carry none.
        if stripped and _PYWARN.match(body):
            self._warn_body = 3
            if sig is not None and sig.kind not in ("benign", "degraded"):
                sig = self._best(body, kinds=("benign", "degraded"))
            self.tail.append((n, text, sig))
            if sig is not None:
                self._record(n, text, sig)
            return
        if self._warn_body and stripped:
            new_record = body != line or stripped.startswith(_TB_START)
            if body[:1].isspace() or new_record:
                self._warn_body = 0
                if not new_record:  # the quoted source line of the warning
                    self.tail.append((n, text, None))
                    return
            else:
                self._warn_body -= 1
                self.tail.append((n, text, None))
                return
        if sig is not None and sig.kind == "stall" and _DONE_PROGRESS.search(body):
            sig = None
        # Python tracebacks: the exception line ends a traceback block; the source lines quoted
        # inside the block ("    raise NoTritonConfigsError(") are not evidence of anything.
        exc_m = None
        if stripped.startswith(_TB_START):
            self._in_tb = True
        elif stripped:
            indented = body[:1].isspace() or stripped.startswith(("File ", "^", "~"))
            if self._in_tb and indented:
                sig = None
            else:
                exc_m = _EXC.match(body)
                self._in_tb = False
        if (
            exc_m is not None
            and sig is not None
            and sig.kind in ("benign", "degraded", "stall", "finish")
            and not exc_m.group(1).endswith("Warning")
        ):
            # a raised exception is never benign: look for a failure signature on it, else map its type
            sig = self._best(body, kinds=("decisive", "wrapper", "echo"))
        if sig is not None:
            self._record(n, text, sig)
        elif exc_m is not None and len(self.exceptions) < _MAX_KEEP:
            etype, msg = exc_m.group(1), (exc_m.group(2) or "")
            if not etype.endswith("Warning"):
                self.exceptions.append(_Hit(n, text, None, etype, msg, self._map_exception(etype, msg)))
        if stripped:
            self.tail.append((n, text, sig))

    def _record(self, n: int, text: str, sig: Signature) -> None:
        bucket = self.hits[sig.kind]
        if len(bucket) < _MAX_KEEP:
            bucket.append(_Hit(n, text, sig, outcome=sig.outcome))
        if (
            sig.kind in ("benign", "degraded")
            and sig.degraded_reason
            and sig.degraded_reason not in self.degraded_reasons
        ):
            self.degraded_reasons.append(sig.degraded_reason)
        if sig.kind == "finish":
            self.last_finish = n

    def _map_exception(self, etype: str, msg: str) -> Outcome:
        for rule in self.db.exceptions:
            if rule.type_pattern.search(etype) and (
                rule.message_pattern is None or rule.message_pattern.search(msg)
            ):
                return rule.outcome
        return Outcome.CRASHED

    # -- deciding ---------------------------------------------------------------------------------
    def _phase_at(self, line_no: int | None) -> str | None:
        if line_no is None:
            return self.phase_marks[-1][1] if self.phase_marks else None
        phase = None
        for n, p in self.phase_marks:
            if n > line_no:
                break
            phase = p
        return phase

    def _hint(self, outcome: Outcome, sig: Signature | None = None) -> str | None:
        if sig is not None and sig.hint:
            return sig.hint
        return self.db.outcome_hints.get(outcome)

    def failure_evidence(self) -> bool:
        return bool(
            self.hits.get("decisive")
            or self.exceptions
            or any(h.outcome for h in self.hits.get("echo", []))
            or any(h.sig is not None and h.sig.fails for h in self.hits.get("wrapper", []))
        )

    def _from_hit(self, hit: _Hit, outcome: Outcome | None = None) -> Verdict:
        out = outcome or hit.outcome or Outcome.CRASHED
        sig = hit.sig
        phase = (sig.phase if sig is not None and sig.phase else None) or (
            "import" if out is Outcome.IMPORT_ERROR else self._phase_at(hit.line_no)
        )
        name = sig.id if sig is not None else f"exception:{hit.exc_type}"
        # the root cause without its logger prefix (level, timestamp, pid): stable across runs, so
        # `probe diff` / `gate` compare what failed, not when
        cause = strip_prefixes(hit.text).strip() or hit.text
        return Verdict(
            out, cause, self._hint(out, sig), phase, line_number=hit.line_no, signature=name, lines=self.n
        )

    def verdict(
        self,
        *,
        exit_code: int | None = None,
        signal_name: str | None = None,
        timed_out: bool = False,
        reported: Outcome | None = None,
        memory_killed: bool = False,
        completed: bool | None = None,
    ) -> Verdict:
        """Decide. ``completed``: True if the probe returned (reported holds its outcome, None if it
        raised), False if the child died / hung, None when unknown (a pasted log)."""
        decisive = self.hits.get("decisive", [])
        echoes = [h for h in self.hits.get("echo", []) if h.outcome]
        wrappers = self.hits.get("wrapper", [])
        degr = [h for h in self.hits.get("degraded", []) if h.outcome]

        def first_of(hs: list[_Hit]) -> _Hit | None:
            return min(hs, key=lambda h: h.line_no) if hs else None

        def best_line() -> _Hit | None:
            for group in (decisive, self.exceptions, degr, echoes):
                if group:
                    return first_of(group)
            return None

        if reported is not None and reported is not Outcome.OK:
            hit = best_line()
            v = (
                self._from_hit(hit, reported)
                if hit
                else Verdict(reported, None, self._hint(reported), self._phase_at(None), lines=self.n)
            )
            v.outcome = reported
            if hit is None:
                v.hint = self._hint(reported)
            return v
        if reported is Outcome.OK and not (timed_out or memory_killed):
            return self._ok()
        if memory_killed:
            hit = first_of([h for h in decisive if h.outcome is Outcome.OOM])
            return (
                self._from_hit(hit)
                if hit
                else Verdict(Outcome.OOM, None, self._hint(Outcome.OOM), self._phase_at(None), lines=self.n)
            )
        runner_failed = (
            timed_out or bool(signal_name) or (exit_code not in (None, 0)) or completed is not None
        )
        if not runner_failed and not self.failure_evidence():
            return self._stall_or_ok(exit_code)
        if decisive:
            return self._from_hit(first_of(decisive))
        if self.exceptions:
            return self._from_hit(first_of(self.exceptions))
        if degr:
            return self._from_hit(first_of(degr))
        if echoes:
            return self._from_hit(first_of(echoes))
        if timed_out:
            return Verdict(
                Outcome.TIMEOUT, None, self._hint(Outcome.TIMEOUT), self._phase_at(None), lines=self.n
            )
        if signal_name:
            out = Outcome.CRASHED
            kill_hit = first_of([h for h in wrappers if h.outcome is Outcome.OOM])
            if signal_name == "SIGKILL" and kill_hit is not None:
                out = Outcome.OOM
            return Verdict(
                out,
                f"killed by {signal_name}",
                self._hint(out),
                self._phase_at(None),
                lines=self.n,
                signature="signal",
            )
        failing = [h for h in wrappers if h.sig is not None and h.sig.fails] or wrappers
        if failing:
            v = self._from_hit(first_of(failing))
            if v.outcome is Outcome.CRASHED:
                v.hint = (
                    "only wrapper lines found (the real error was printed elsewhere, e.g. by another process "
                    "or before this excerpt); " + (v.hint or "")
                ).rstrip("; ")
            return v
        if exit_code not in (None, 0):
            last = self.tail[-1][1] if self.tail else None
            cause = f"exit code {exit_code} with no recognizable error" + (
                f" (last line: {last})" if last else " and no output"
            )
            return Verdict(
                Outcome.CRASHED,
                cause,
                self._hint(Outcome.CRASHED),
                self._phase_at(None),
                lines=self.n,
                signature="exit-code",
            )
        # completed with an exception the log does not show, or nothing at all
        return Verdict(Outcome.CRASHED, None, self._hint(Outcome.CRASHED), self._phase_at(None), lines=self.n)

    def _ok(self) -> Verdict:
        reasons = list(self.degraded_reasons)
        return Verdict(
            Outcome.OK,
            None,
            None,
            self._phase_at(None),
            degraded=bool(reasons),
            degraded_reasons=reasons,
            lines=self.n,
        )

    def _stall_or_ok(self, exit_code: int | None) -> Verdict:
        if exit_code is None:
            stalls = [(n, t, s) for n, t, s in self.tail if s is not None and s.kind == "stall"]
            if stalls and (self.last_finish is None or self.last_finish < stalls[-1][0]):
                n, t, s = stalls[-1]
                return Verdict(
                    Outcome.TIMEOUT,
                    t,
                    self._hint(Outcome.TIMEOUT, s),
                    self._phase_at(n),
                    line_number=n,
                    signature=s.id,
                    lines=self.n,
                )
        return self._ok()


def classify_lines(lines: Iterable[str], **kw: Any) -> Verdict:
    scanner = LogScanner()
    for line in lines:
        scanner.feed_line(line)
    return scanner.verdict(**kw)


def classify_text(
    text: str,
    *,
    exit_code: int | None = None,
    signal_name: str | None = None,
    timed_out: bool = False,
    reported: Outcome | None = None,
    memory_killed: bool = False,
    completed: bool | None = None,
) -> Verdict:
    """Classify captured output. See the module docstring for the rules."""
    scanner = LogScanner()
    scanner.feed_text(text)
    return scanner.verdict(
        exit_code=exit_code,
        signal_name=signal_name,
        timed_out=timed_out,
        reported=reported,
        memory_killed=memory_killed,
        completed=completed,
    )


def classify_stream(stream: IO[bytes], **kw: Any) -> Verdict:
    scanner = LogScanner()
    scanner.feed_stream(stream)
    return scanner.verdict(**kw)


def iter_lines(text: str) -> Iterator[str]:
    yield from text.splitlines()
