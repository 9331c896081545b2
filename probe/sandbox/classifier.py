"""The crash classifier: from a log (+ exit status when known) to an outcome, its root-cause line and the
rule that decided (signatures and the decision order live in ``probe/data/signatures.json``).

Reading (this module):

1. Each line is cleaned (ANSI escapes, control characters, ``\\r`` progress redraws) and stripped of log
   prefixes (``(EngineCore_DP0 pid=1234) ERROR 05-10 12:00:01 [core.py:700]``, glog, Ray, Python
   logging ...) before matching; the root cause is reported as the cleaned line.
2. On one line the matching signature with the highest priority wins (so a benign context such as the
   autotuner's "Skipping tactic ..." beats the decisive text it quotes).
3. Python tracebacks: the frames and the source lines they quote are not evidence (a traceback is known
   from its header or from a ``File "...", line N`` frame, so an excerpt cut inside one is read right);
   the exception line that ends it is, in the ``Type: message`` and the ``Type('message')`` forms; a bare
   ``AssertionError`` takes the ``assert`` source line above it as its message.
4. A line of generated text that is one token repeated is garbage-output evidence (``garbage.py``).
   An error line no signature knows, an exception no exception rule explains and a generic wrapper's text
   are read for generic cause words (``cause_words``: "out of memory", "failed to compile", ...).
5. Only bounded state is kept (a few hits per kind, the last lines, phase marks), and a stream is read
   through ``loginput.read_window`` (its head and tail), so any input costs bounded memory and time.

Deciding (``verdict.py``): the decision order, docs/sandbox.md "Decision order".
"""

from __future__ import annotations

import collections
import re
from collections.abc import Callable
from typing import IO, Any

from probe.catalog.signatures import Signature, SignatureDB, signature_db
from probe.outcomes import Outcome
from probe.sandbox import garbage
from probe.sandbox.decision_order import Classification, Hit, RunEvidence, decide
from probe.sandbox.exclines import EXC, EXC_REPR, exc_parts, native_exception
from probe.sandbox.loginput import LogWindow, read_window
from probe.sandbox.logtext import LineMatcher, clean_line, looks_binary, strip_prefixes

__all__ = [
    "Classification",
    "LogScanner",
    "classify_stream",
    "classify_text",
    "clean_line",
    "looks_binary",
    "strip_prefixes",
]

MAX_LINE = 16 * 1024  # characters of one line that are matched (the rest is ignored)
_MAX_KEEP = 64  # matches kept per kind
_MESSAGE_LINES = 2  # lines below an exception line read as its message's continuation

# Python's warnings module: "path.py:12: SomeWarning: message" (+ message lines, then the indented source)
_PYWARN = re.compile(r"^\S.*?:\d+: (?:[A-Z]\w*)?Warning: ")
# a finished progress bar ("100%|", "35/35") is not a stall
_DONE_PROGRESS = re.compile(r"\b100%|\b(\d+)/\1\b(?!\d)")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line \d+')
# a native backtrace frame: "4   0x7f6ce80a9b72 ns::Class::fn(...) + 50", "#3 0x...", "[ 2] /lib/x.so(+0x...)"
_NATIVE_FRAME = re.compile(r"^\s*(?:#?\d+\s+0x[0-9a-fA-F]+\s|\[\s*\d+\]\s)")
_FRAME_REACH = 64  # lines a backtrace may run below the error it belongs to
_TB_START = "Traceback (most recent call last)"


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


class LogScanner:
    """Streams lines, keeping only what the verdict needs (bounded memory for any log size)."""

    def __init__(self, db: SignatureDB | None = None) -> None:
        self.db = db or signature_db()
        self.match = LineMatcher(self.db)
        self.n = 0
        self.hits: dict[str, list[Hit]] = collections.defaultdict(list)
        self.exceptions: list[Hit] = []
        self.garbage: list[Hit] = []
        self.inferred: list[Hit] = []  # lines whose generic words name a cause (``cause_words``)
        self.degraded_reasons: list[str] = []
        self.phase_marks: list[tuple[int, str]] = []
        self.tail: collections.deque[tuple[int, str, Signature | None]] = collections.deque(maxlen=3)
        self.last_finish: int | None = None
        self._in_tb = False
        self._after_frame = False  # the previous line was a traceback frame: this one is its source
        self._last_src: tuple[int, str] | None = None  # the last source line quoted in a traceback
        self._last_frame: str | None = None  # the file of the last traceback frame (where it was raised)
        self._last_error: tuple[int, str] | None = None  # the last error line a native backtrace may explain
        self._warn_body = 0  # lines left of a Python warning's message
        self._context_open = False  # the last line was benign context ending in ':' (its message follows)
        self._msg_below = 0  # lines left that may continue the last exception's message
        self.window: LogWindow | None = None  # what feed_stream read
        self.gap_after: int | None = None  # line numbers after this line are not known (bytes skipped)
        self.text_lines = 0  # non-blank lines seen

    @property
    def looks_binary(self) -> bool:
        return self.window is not None and self.window.binary

    # -- feeding ----------------------------------------------------------------------------------
    def feed_text(self, text: str) -> None:
        for line in text.splitlines():
            self.feed_line(line)

    def feed_bytes(self, data: bytes) -> None:
        for raw in data.split(b"\n"):
            self.feed_line(raw[: MAX_LINE * 4].decode("utf-8", "replace"))

    def feed_stream(self, stream: IO[bytes], size: int | None = None) -> None:
        """Read a stream through ``loginput.read_window`` (its head and tail) and feed what was read."""
        self.window = w = read_window(stream, size)
        if w.binary:
            return
        self.feed_bytes(w.head[:-1] if w.head.endswith(b"\n") else w.head)
        if w.tail:
            self.gap()
            self.feed_bytes(w.tail[:-1] if w.tail.endswith(b"\n") else w.tail)

    def gap(self) -> None:
        """Lines were skipped here: tracebacks and warnings do not continue across, and line numbers
        after it are unknown."""
        if self.gap_after is None:
            self.gap_after = self.n
        self._in_tb = self._after_frame = False
        self._warn_body = 0
        self._last_src = self._last_frame = None

    def reported_line(self, line_no: int | None) -> int | None:
        """The line number to report: None after a gap (the skipped lines were not counted)."""
        if line_no is None or (self.gap_after is not None and line_no > self.gap_after):
            return None
        return line_no

    def feed_line(self, raw: str) -> None:
        self.n += 1
        n = self.n
        line = clean_line(_cap(raw))
        body = strip_prefixes(line)
        stripped = body.strip()
        # indentation (CI logs, pip's build output, quoting) does not change what a line says
        sig = self.match.best(stripped) if stripped else None
        self._mark_phase(n, body)
        text = line.strip()[:1000]
        if not stripped:
            self._after_frame = False
            return
        self.text_lines += 1
        self._msg_below = max(self._msg_below - 1, 0)
        if self._python_warning(n, text, line, body, sig) or self._context_message(n, text, sig):
            return
        if sig is not None and sig.kind == "stall" and _DONE_PROGRESS.search(body):
            sig = None
        sig, exc, quoted = self._traceback(n, body, stripped, sig)
        if exc is not None and sig is not None and sig.kind == "wrapper":
            # a raised exception a wrapper matches ("CalledProcessError: ... returned non-zero exit status"):
            # an exception rule that states its cause outranks the wrapper's reading
            sig = None if self._map_exception(*exc)[0] is not Outcome.CRASHED else sig
        if exc is None and not quoted and (sig is None or sig.kind == "wrapper"):
            exc = self._native(n, text, stripped, sig)
            sig = None if exc is not None else sig
        if sig is not None:
            self._record(*self._frame_owner(n, text, body, sig), sig)
            if sig.kind == "wrapper":  # it says that something failed; its words may say what (else)
                self._infer(n, text, stripped, unless=sig.outcome)
            self._context_open = sig.kind in ("benign", "degraded") and stripped.endswith(":")
        elif exc is not None:
            self._exception(n, text, *exc)
        elif not quoted and not self._error_line(n, text, line, body):
            self._garbage(n, text, body)
        self.tail.append((n, text, sig))

    def _native(self, n: int, text: str, stripped: str, sig: Signature | None) -> tuple[str, str] | None:
        """A native assertion or a pytest summary line, read as an exception. On a wrapper line
        (TensorRT-LLM's ``[ERROR]``) one whose message states a cause leaves the wrapper's reading; one
        that states none (an internal invariant such as ``mNextBlocks.empty()``) is an unexplained
        exception, which outranks wrappers. A native backtrace below it explains this line
        (``_frame_owner``)."""
        exc = native_exception(stripped)
        if exc is None or (sig is not None and self._map_exception(*exc)[0] is not Outcome.CRASHED):
            return None
        self._last_error = (n, text)
        return exc

    def _context_message(self, n: int, text: str, sig: Signature | None) -> bool:
        """The line after a benign or degraded context that ends in ':' ("Skipping tactic ... due to failure
        while profiling:") is that context's message, quoted: not evidence of its own (a fault marker
        still is). True: consumed."""
        if not self._context_open:
            return False
        self._context_open = False
        if sig is not None and sig.kind not in ("decisive", "wrapper", "echo"):
            return False
        self.tail.append((n, text, None))
        return True

    def _frame_owner(self, n: int, text: str, body: str, sig: Signature) -> tuple[int, str]:
        """(line, text) a hit is reported on. A decisive match on a native backtrace frame (a frame
        naming ``deserializePlugin``) explains the error line that backtrace belongs to: that line is
        the root cause. Any other failure line becomes the error later frames may explain."""
        if sig.kind not in ("decisive", "wrapper", "fault", "echo"):
            return n, text
        if not _NATIVE_FRAME.match(body):
            self._last_error = (n, text)
        elif sig.kind == "decisive" and self._last_error and n - self._last_error[0] <= _FRAME_REACH:
            return self._last_error
        return n, text

    def _mark_phase(self, n: int, body: str) -> None:
        phase = self.match.phase(body)
        if phase is not None:
            changed = not self.phase_marks or self.phase_marks[-1][1] != phase
            if changed and len(self.phase_marks) < 10000:
                self.phase_marks.append((n, phase))

    def _python_warning(self, n: int, text: str, line: str, body: str, sig: Signature | None) -> bool:
        """A Python warning never ends a run: its header may carry benign/degraded evidence (or say the
        output is wrong: NaN cast to integers), and its message continuation lines (until the indented
        source line) carry none. True: consumed."""
        stripped = body.strip()
        if _PYWARN.match(body):
            self._warn_body = 3
            # a warning that the output holds NaN (numpy casting NaN to pixels / token ids) says it is wrong
            output_wrong = sig is not None and sig.outcome is Outcome.WRONG_OUTPUT and sig.kind == "decisive"
            if sig is not None and sig.kind not in ("benign", "degraded") and not output_wrong:
                sig = self.match.best(stripped, kinds=("benign", "degraded"))
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
        self, n: int, body: str, stripped: str, sig: Signature | None
    ) -> tuple[Signature | None, tuple[str, str] | None, bool]:
        """Python tracebacks: (signature, exception (type, message), quoted) for a line. The frames and the
        source lines quoted inside a traceback ("    raise NoTritonConfigsError(") are evidence of nothing."""
        after_frame, self._after_frame = self._after_frame, False
        if stripped.startswith(_TB_START):
            self._in_tb = True
            return None, None, True
        frame_m = _FRAME.match(body)
        if frame_m is not None:
            self._in_tb = self._after_frame = True
            self._last_frame = frame_m.group("file")
            return None, None, True
        exc_m = EXC.match(body) or EXC_REPR.match(body)
        carets = stripped.startswith(("^", "~"))
        if self._in_tb and exc_m is None and (after_frame or body[:1].isspace() or carets):
            if not carets:
                self._last_src = (n, stripped)
            return None, None, True
        if exc_m is None:
            self._last_src = None
        self._in_tb = False
        if (
            exc_m is not None
            and sig is not None
            and (sig.kind in ("benign", "degraded", "stall", "finish") or _bare_echo(sig))
            and not exc_m.group(1).endswith("Warning")
        ):
            # a raised exception is never benign, nor only an echo (torch glues "CUDA kernel errors might be
            # asynchronously reported" to its message): look for a failure signature on it, else map its type
            sig = self.match.best(stripped, kinds=("decisive", "fault", "wrapper", "echo"))
            sig = None if sig is not None and _bare_echo(sig) else sig
        return sig, exc_parts(exc_m) if exc_m is not None else None, False

    def _exception(self, n: int, text: str, etype: str, msg: str) -> None:
        if etype.endswith("Warning") or len(self.exceptions) >= _MAX_KEEP:
            return
        src, self._last_src = self._last_src, None
        frame, self._last_frame = self._last_frame, None
        if not msg.strip() and src is not None and src[1].startswith("assert "):
            # a bare AssertionError: the condition it checked is the quoted source line above it
            n, text, msg = src[0], src[1], src[1]
        outcome, rule = self._map_exception(etype, msg, frame)
        self.exceptions.append(Hit(n, text, None, etype, msg, outcome, rule))
        if outcome is Outcome.CRASHED:  # the whole line: a device assertion's words are before its message
            self._infer(n, text, text)
        self._msg_below = _MESSAGE_LINES + 1

    def _error_line(self, n: int, text: str, line: str, body: str) -> bool:
        """A line no signature knows: when it reports an error (``error_line``) its words may name the
        cause (``unmarked`` words: on a line with no error marker too). True: they did."""
        below = self._msg_below > 0  # the message of the exception above, continued: an error line
        return self._infer(n, text, body, lambda: below or self.db.error_line.marked(line), line=line)

    def _infer(
        self,
        n: int,
        text: str,
        words: str,
        marked: Callable[[], bool] = lambda: True,
        *,
        line: str = "",
        unless: Outcome | None = None,
    ) -> bool:
        """Record the cause ``words`` name, if any (``line``: unless it only warns; ``unless``: not when
        they name this outcome, which the line already says)."""
        if len(self.inferred) >= _MAX_KEEP:
            return False
        w = self.match.cause_words(words, marked)
        if w is None or w.outcome is unless or (line and self.db.error_line.only_warns(line)):
            return False
        self.inferred.append(Hit(n, text, outcome=w.outcome, words=w.id))
        return True

    def _garbage(self, n: int, text: str, body: str) -> None:
        if len(self.garbage) >= _MAX_KEEP:
            return
        unit = garbage.repeated_unit(body, self.match.distinct_trigrams(body))
        if unit is not None:
            self.garbage.append(Hit(n, text, outcome=Outcome.WRONG_OUTPUT, name=unit))

    def _record(self, n: int, text: str, sig: Signature) -> None:
        bucket = self.hits[sig.kind]
        if len(bucket) < _MAX_KEEP:
            bucket.append(Hit(n, text, sig, outcome=sig.outcome))
        if (
            sig.kind in ("benign", "degraded")
            and sig.degraded_reason
            and sig.degraded_reason not in self.degraded_reasons
        ):
            self.degraded_reasons.append(sig.degraded_reason)
        if sig.kind == "finish":
            self.last_finish = n

    def _map_exception(self, etype: str, msg: str, frame: str | None = None) -> tuple[Outcome, str | None]:
        """(outcome, exception rule id) of an exception line (``frame``: the file it was raised in, when a
        traceback showed it); (crashed, None) when no rule explains it."""
        for rule in self.db.exceptions:
            if rule.explains(etype, msg, frame):
                return rule.outcome, rule.id
        return Outcome.CRASHED, None

    # -- deciding ---------------------------------------------------------------------------------
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
        """Decide (verdict.py). ``completed``: True if the probe returned (reported holds its outcome,
        None if it raised), False if the child died / hung, None when unknown (a pasted log)."""
        return decide(
            self, RunEvidence(exit_code, signal_name, timed_out, reported, memory_killed, completed)
        )


def _bare_echo(sig: Signature) -> bool:
    """An echo that names no error class (CUDA's "errors might be asynchronously reported" notice)."""
    return sig.kind == "echo" and sig.outcome is None


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
    """Classify a byte stream, read through ``loginput.read_window`` (bounded)."""
    scanner = LogScanner()
    scanner.feed_stream(stream)
    return scanner.verdict(**kw)
