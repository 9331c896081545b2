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
from dataclasses import dataclass, field
from typing import IO, Any

from probe.catalog.signatures import Signature, SignatureDB, signature_db
from probe.outcomes import Outcome
from probe.sandbox.logtext import LineMatcher, clean_line, looks_binary, strip_prefixes

MAX_LINE = 16 * 1024  # characters of one line that are matched (the rest is ignored)
_MAX_KEEP = 64  # matches kept per kind

# Python's warnings module: "path.py:12: SomeWarning: message" (+ message lines, then the indented source)
_PYWARN = re.compile(r"^\S.*?:\d+: (?:[A-Z]\w*)?Warning: ")
# a finished progress bar ("100%|", "35/35") is not a stall
_DONE_PROGRESS = re.compile(r"\b100%|\b(\d+)/\1\b(?!\d)")
_EXC = re.compile(
    r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Fault|Failure))(?::\s?(.*))?$"
)
_TB_START = "Traceback (most recent call last)"


@dataclass
class Classification:
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


def _cap(raw: str) -> str:
    """An over-long line: keep the last redraw of a progress line, then both ends."""
    if len(raw) <= MAX_LINE:
        return raw
    cut = raw.rfind("\r", 0, len(raw) - 1)
    if cut >= 0:
        raw = raw[cut + 1 :]
    if len(raw) > MAX_LINE:
        raw = raw[: MAX_LINE // 2] + " ... " + raw[-(MAX_LINE // 2) :]
    return raw


def _earliest(hits: list[_Hit]) -> _Hit:
    """The hit on the earliest line of a non-empty list."""
    return min(hits, key=lambda h: h.line_no)


class LogScanner:
    """Streams lines, keeping only what the verdict needs (bounded memory for any log size)."""

    def __init__(self, db: SignatureDB | None = None) -> None:
        self.db = db or signature_db()
        self.match = LineMatcher(self.db)
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
                # the rest of that line arrives with the next chunk and is fed as a new line
                self.feed_line(buf[: MAX_LINE * 4].decode("utf-8", "replace"))
                buf = b""
        if buf:
            self.feed_line(buf.decode("utf-8", "replace"))

    def feed_line(self, raw: str) -> None:
        self.n += 1
        n = self.n
        line = clean_line(_cap(raw))
        body = strip_prefixes(line)
        stripped = body.strip()
        sig = self.match.best(body) if stripped else None
        self._mark_phase(n, body)
        text = line.strip()[:1000]
        if stripped:
            self.text_lines += 1
        if stripped and self._python_warning(n, text, line, body, sig):
            return
        if sig is not None and sig.kind == "stall" and _DONE_PROGRESS.search(body):
            sig = None
        sig, exc_m = self._traceback(body, stripped, sig)
        if sig is not None:
            self._record(n, text, sig)
        elif exc_m is not None and len(self.exceptions) < _MAX_KEEP:
            etype, msg = exc_m.group(1), (exc_m.group(2) or "")
            if not etype.endswith("Warning"):
                self.exceptions.append(_Hit(n, text, None, etype, msg, self._map_exception(etype, msg)))
        if stripped:
            self.tail.append((n, text, sig))

    def _mark_phase(self, n: int, body: str) -> None:
        phase = self.match.phase(body)
        if phase is not None:
            changed = not self.phase_marks or self.phase_marks[-1][1] != phase
            if changed and len(self.phase_marks) < 10000:
                self.phase_marks.append((n, phase))

    def _python_warning(self, n: int, text: str, line: str, body: str, sig: Signature | None) -> bool:
        """A Python warning never ends a run: its header may carry benign/degraded evidence only, and
        its message continuation lines (until the indented source line) carry none. True: consumed."""
        stripped = body.strip()
        if _PYWARN.match(body):
            self._warn_body = 3
            if sig is not None and sig.kind not in ("benign", "degraded"):
                sig = self.match.best(body, kinds=("benign", "degraded"))
            self.tail.append((n, text, sig))
            if sig is not None:
                self._record(n, text, sig)
            return True
        if not self._warn_body:
            return False
        new_record = body != line or stripped.startswith(_TB_START)
        if body[:1].isspace() or new_record:
            self._warn_body = 0
            if new_record:
                return False
        else:
            self._warn_body -= 1
        self.tail.append((n, text, None))  # a message line, or the quoted source line of the warning
        return True

    def _traceback(
        self, body: str, stripped: str, sig: Signature | None
    ) -> tuple[Signature | None, re.Match[str] | None]:
        """Python tracebacks: the exception line ends a traceback block; the source lines quoted inside
        the block ("    raise NoTritonConfigsError(") are not evidence of anything."""
        exc_m = None
        if stripped.startswith(_TB_START):
            self._in_tb = True
        elif stripped:
            indented = body[:1].isspace() or stripped.startswith(("File ", "^", "~"))
            if self._in_tb and indented:
                return None, None
            exc_m = _EXC.match(body)
            self._in_tb = False
        if (
            exc_m is not None
            and sig is not None
            and sig.kind in ("benign", "degraded", "stall", "finish")
            and not exc_m.group(1).endswith("Warning")
        ):
            # a raised exception is never benign: look for a failure signature on it, else map its type
            sig = self.match.best(body, kinds=("decisive", "wrapper", "echo"))
        return sig, exc_m

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

    def _from_hit(self, hit: _Hit, outcome: Outcome | None = None) -> Classification:
        out = outcome or hit.outcome or Outcome.CRASHED
        sig = hit.sig
        phase = (sig.phase if sig is not None and sig.phase else None) or (
            "import" if out is Outcome.IMPORT_ERROR else self._phase_at(hit.line_no)
        )
        name = sig.id if sig is not None else f"exception:{hit.exc_type}"
        # the root cause without its logger prefix (level, timestamp, pid): stable across runs, so
        # `probe diff` / `gate` compare what failed, not when
        cause = strip_prefixes(hit.text).strip() or hit.text
        return Classification(
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
    ) -> Classification:
        """Decide. ``completed``: True if the probe returned (reported holds its outcome, None if it
        raised), False if the child died / hung, None when unknown (a pasted log)."""
        if reported is not None and reported is not Outcome.OK:
            return self._reported(reported)
        if reported is Outcome.OK and not (timed_out or memory_killed):
            return self._ok()
        if memory_killed:
            oom = [h for h in self.hits.get("decisive", []) if h.outcome is Outcome.OOM]
            return self._from_hit(_earliest(oom)) if oom else self._bare(Outcome.OOM)
        runner_failed = (
            timed_out or bool(signal_name) or (exit_code not in (None, 0)) or completed is not None
        )
        if not runner_failed and not self.failure_evidence():
            return self._stall_or_ok(exit_code)
        hit = self._best_line()
        if hit is not None:
            return self._from_hit(hit)
        if timed_out:
            return self._bare(Outcome.TIMEOUT)
        if signal_name:
            wrappers = self.hits.get("wrapper", [])
            killed_for_memory = any(h.outcome is Outcome.OOM for h in wrappers)
            out = Outcome.OOM if signal_name == "SIGKILL" and killed_for_memory else Outcome.CRASHED
            return self._bare(out, f"killed by {signal_name}", "signal")
        return self._wrapper_or_exit(exit_code)

    def _bare(
        self, outcome: Outcome, cause: str | None = None, signature: str | None = None
    ) -> Classification:
        """A verdict with no log line behind it (the runner's evidence, or nothing at all)."""
        return Classification(
            outcome, cause, self._hint(outcome), self._phase_at(None), lines=self.n, signature=signature
        )

    def _best_line(self) -> _Hit | None:
        """The earliest decisive line, else exception, degraded-with-outcome, echo line (in that order)."""
        degr = [h for h in self.hits.get("degraded", []) if h.outcome]
        echoes = [h for h in self.hits.get("echo", []) if h.outcome]
        for group in (self.hits.get("decisive", []), self.exceptions, degr, echoes):
            if group:
                return _earliest(group)
        return None

    def _reported(self, reported: Outcome) -> Classification:
        """The probe decided a non-ok outcome itself: keep it, with the best line as its evidence."""
        hit = self._best_line()
        if hit is None:
            return self._bare(reported)
        v = self._from_hit(hit, reported)
        v.outcome = reported
        return v

    def _wrapper_or_exit(self, exit_code: int | None) -> Classification:
        """Last resorts: a wrapper line ("Engine core initialization failed"), then the exit code."""
        wrappers = self.hits.get("wrapper", [])
        failing = [h for h in wrappers if h.sig is not None and h.sig.fails] or wrappers
        if failing:
            v = self._from_hit(_earliest(failing))
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
            return self._bare(Outcome.CRASHED, cause, "exit-code")
        # completed with an exception the log does not show, or nothing at all
        return self._bare(Outcome.CRASHED)

    def _ok(self) -> Classification:
        reasons = list(self.degraded_reasons)
        return Classification(
            Outcome.OK,
            None,
            None,
            self._phase_at(None),
            degraded=bool(reasons),
            degraded_reasons=reasons,
            lines=self.n,
        )

    def _stall_or_ok(self, exit_code: int | None) -> Classification:
        if exit_code is None:
            stalls = [(n, t, s) for n, t, s in self.tail if s is not None and s.kind == "stall"]
            if stalls and (self.last_finish is None or self.last_finish < stalls[-1][0]):
                n, t, s = stalls[-1]
                return Classification(
                    Outcome.TIMEOUT,
                    t,
                    self._hint(Outcome.TIMEOUT, s),
                    self._phase_at(n),
                    line_number=n,
                    signature=s.id,
                    lines=self.n,
                )
        return self._ok()


def classify_text(
    text: str,
    *,
    exit_code: int | None = None,
    signal_name: str | None = None,
    timed_out: bool = False,
    reported: Outcome | None = None,
    memory_killed: bool = False,
    completed: bool | None = None,
) -> Classification:
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


def classify_stream(stream: IO[bytes], **kw: Any) -> Classification:
    scanner = LogScanner()
    scanner.feed_stream(stream)
    return scanner.verdict(**kw)
