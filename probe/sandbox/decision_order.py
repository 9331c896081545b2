"""The classifier's decision order: which evidence decides when a log holds several.

The order is data (``decision_order`` in ``probe/data/signatures.json``, each rule with its reason and a
corpus log it decides); this module holds one function per rule. Each returns a verdict or None (the
rule does not apply), and the first rule that answers decides; its id is the verdict's ``rule``.
In short: stated causes > causes in generic words > fault markers > garbage output > echoes > unexplained
exceptions > the runner's evidence > wrappers > catch-all, then, for a log with no failure, a stall or ok
(docs/sandbox.md "Decision order").
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from probe.outcomes import Outcome
from probe.sandbox.logtext import strip_prefixes

if TYPE_CHECKING:
    from probe.catalog.signatures import Signature, SignatureDB

_WRAPPER_ONLY = (
    "only wrapper lines found (the real error was printed elsewhere, e.g. by another process or before "
    "this excerpt)"
)
_EXCERPT_NOTE = (
    "the log ends on the program saying it waits ({line}); if this is only an excerpt of a run that went "
    "on, it is not a hang"
)


@dataclass
class Classification:
    """The classifier's answer; ``rule`` names the step of the decision order that decided."""

    outcome: Outcome
    root_cause: str | None = None
    hint: str | None = None
    phase: str | None = None
    degraded: bool = False
    degraded_reasons: list[str] = field(default_factory=list)
    line_number: int | None = None
    signature: str | None = None
    lines: int = 0
    rule: str | None = None

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
            "rule": self.rule,
        }


@dataclass
class Hit:
    """One line of evidence: a signature match, an exception line or a garbage line."""

    line_no: int
    text: str
    sig: Signature | None = None
    exc_type: str | None = None
    exc_msg: str | None = None
    outcome: Outcome | None = None
    name: str | None = None  # the exception rule or garbage unit that explains the line
    words: str | None = None  # the cause words that name its cause (``cause_words``)


@dataclass(frozen=True)
class RunEvidence:
    """What the runner (or the user, through flags) knows besides the log."""

    exit_code: int | None = None
    signal_name: str | None = None
    timed_out: bool = False
    reported: Outcome | None = None
    memory_killed: bool = False
    completed: bool | None = None

    @property
    def failed(self) -> bool:
        """The runner saw the run fail (or end without a result)."""
        return (
            self.timed_out
            or bool(self.signal_name)
            or self.exit_code not in (None, 0)
            or self.completed is not None
        )


class LogScanner(Protocol):
    """What the decision order reads of a scanned log (:class:`probe.sandbox.classifier.LogScanner`)."""

    db: SignatureDB
    n: int  # lines read
    hits: dict[str, list[Hit]]  # signature matches by outcome
    exceptions: list[Hit]
    garbage: list[Hit]
    inferred: list[Hit]  # lines whose generic words name a cause
    degraded_reasons: list[str]
    phase_marks: list[tuple[int, str]]
    tail: collections.deque[tuple[int, str, Signature | None]]
    last_finish: int | None

    def reported_line(self, line_no: int | None) -> int | None: ...


def _earliest(hits: list[Hit]) -> Hit | None:
    return min(hits, key=lambda h: h.line_no) if hits else None


def _phase_at(sc: LogScanner, line_no: int | None) -> str | None:
    if line_no is None:
        return sc.phase_marks[-1][1] if sc.phase_marks else None
    phase = None
    for n, p in sc.phase_marks:
        if n > line_no:
            break
        phase = p
    return phase


def _hint(sc: LogScanner, outcome: Outcome, sig: Signature | None = None) -> str | None:
    if sig is not None and sig.hint:
        return sig.hint
    return sc.db.outcome_hints.get(outcome)


def from_hit(sc: LogScanner, hit: Hit, outcome: Outcome | None = None) -> Classification:
    """A verdict whose root cause is a log line."""
    out = outcome or hit.outcome or Outcome.CRASHED
    sig = hit.sig
    phase = (sig.phase if sig is not None and sig.phase else None) or (
        "import" if out is Outcome.IMPORT_ERROR else _phase_at(sc, hit.line_no)
    )
    if sig is not None:
        name = sig.id
    elif hit.words is not None:
        name = f"words:{hit.words}"
    elif hit.exc_type is not None:
        name = f"exception:{hit.name or hit.exc_type}"
    else:
        name = "garbage-output"
    # the root cause without its logger prefix (level, timestamp, pid): stable across runs, so
    # `probe diff` / `gate` compare what failed, not when
    cause = strip_prefixes(hit.text).strip() or hit.text
    return Classification(
        out,
        cause,
        _hint(sc, out, sig),
        phase,
        line_number=sc.reported_line(hit.line_no),
        signature=name,
        lines=sc.n,
    )


def bare(
    sc: LogScanner, outcome: Outcome, cause: str | None = None, signature: str | None = None
) -> Classification:
    """A verdict with no log line behind it (the runner's evidence, or nothing at all)."""
    return Classification(
        outcome, cause, _hint(sc, outcome), _phase_at(sc, None), lines=sc.n, signature=signature
    )


def _ok(sc: LogScanner) -> Classification:
    reasons = list(sc.degraded_reasons)
    return Classification(
        Outcome.OK,
        None,
        None,
        _phase_at(sc, None),
        degraded=bool(reasons),
        degraded_reasons=reasons,
        lines=sc.n,
    )


def _failing_wrappers(sc: LogScanner) -> list[Hit]:
    return [h for h in sc.hits.get("wrapper", []) if h.sig is not None and h.sig.fails]


# An exception line whose message is empty ("ImportError: ") prints its message on the lines below it:
# a decisive line among them states the cause better than the bare type does.
_MESSAGE_BELOW = 40


def _stated(sc: LogScanner) -> list[Hit]:
    decisive = sc.hits.get("decisive", [])

    def told_below(h: Hit) -> bool:
        below = (d.line_no - h.line_no for d in decisive)
        return not (h.exc_msg or "").strip() and any(0 < gap <= _MESSAGE_BELOW for gap in below)

    return decisive + [h for h in sc.exceptions if h.outcome is not Outcome.CRASHED and not told_below(h)]


# -- the rules, one function each --------------------------------------------------------------------
def probe_report(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    if ev.reported is None or (ev.reported is Outcome.OK and (ev.timed_out or ev.memory_killed)):
        return None
    if ev.reported is not Outcome.OK:
        hit = _earliest(_stated(sc)) or _earliest(sc.hits.get("fault", [])) or _earliest(sc.exceptions)
        if hit is None:
            return bare(sc, ev.reported)
        v = from_hit(sc, hit, ev.reported)
        v.outcome = ev.reported
        return v
    fault = _earliest(sc.hits.get("fault", []))
    return from_hit(sc, fault) if fault is not None else _ok(sc)


def memory_kill(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    if not ev.memory_killed:
        return None
    oom = _earliest([h for h in _stated(sc) if h.outcome is Outcome.OOM])
    return from_hit(sc, oom) if oom is not None else bare(sc, Outcome.OOM)


def stated_cause(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    hit = _earliest(_stated(sc))
    return from_hit(sc, hit) if hit is not None else None


def inferred_cause(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    hit = _earliest(sc.inferred)
    return from_hit(sc, hit) if hit is not None else None


def fault_marker(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    hit = _earliest(sc.hits.get("fault", []))
    return from_hit(sc, hit) if hit is not None else None


def garbage_output(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    hit = _earliest(sc.garbage)
    if hit is None:
        return None
    v = from_hit(sc, hit)
    v.hint = (
        f"the generated text is one token repeated ({hit.name!r}) and no error line explains it: the "
        "model ran but its output is garbage (check the kernel backend, quantization and TP setup)"
    )
    return v


def echo(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    hit = _earliest([h for h in sc.hits.get("echo", []) if h.outcome])
    return from_hit(sc, hit) if hit is not None else None


def unexplained_exception(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    hit = _earliest(sc.exceptions)
    return from_hit(sc, hit) if hit is not None else None


def fatal_degraded(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    if not (ev.failed or _failing_wrappers(sc)):
        return None
    hit = _earliest([h for h in sc.hits.get("degraded", []) if h.outcome])
    return from_hit(sc, hit) if hit is not None else None


def runner_timeout(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    return bare(sc, Outcome.TIMEOUT) if ev.timed_out else None


def runner_signal(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    if not ev.signal_name:
        return None
    if ev.signal_name == "SIGKILL":  # with a kill notice ("Killed", exit 137): the OOM killer's kill
        notice = _earliest([h for h in sc.hits.get("wrapper", []) if h.outcome is Outcome.OOM])
        if notice is not None:
            return from_hit(sc, notice)
    return bare(sc, Outcome.CRASHED, f"killed by {ev.signal_name}", "signal")


def wrapper(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    hit = _earliest(_failing_wrappers(sc) or (sc.hits.get("wrapper", []) if ev.failed else []))
    if hit is None:
        return None
    v = from_hit(sc, hit)
    if v.outcome is Outcome.CRASHED:
        v.hint = f"{_WRAPPER_ONLY}; {v.hint}" if v.hint else _WRAPPER_ONLY
    return v


def catch_all(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    if not ev.failed:
        return None
    if ev.exit_code not in (None, 0):
        last = sc.tail[-1][1] if sc.tail else None
        cause = f"exit code {ev.exit_code} with no recognizable error" + (
            f" (last line: {last})" if last else " and no output"
        )
        return bare(sc, Outcome.CRASHED, cause, "exit-code")
    # completed with an exception the log does not show, or nothing at all
    return bare(sc, Outcome.CRASHED)


def stall(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    if ev.exit_code is not None or not sc.tail:
        return None
    n, t, s = sc.tail[-1]
    if s is None or s.kind != "stall" or (sc.last_finish is not None and sc.last_finish >= n):
        return None
    hint = f"{_hint(sc, Outcome.TIMEOUT, s)}; {_EXCERPT_NOTE.format(line=s.id)}"
    return Classification(
        Outcome.TIMEOUT,
        t,
        hint,
        _phase_at(sc, n),
        line_number=sc.reported_line(n),
        signature=s.id,
        lines=sc.n,
    )


def no_failure(sc: LogScanner, ev: RunEvidence) -> Classification | None:
    return _ok(sc)


RULES: dict[str, Callable[[LogScanner, RunEvidence], Classification | None]] = {
    "probe-report": probe_report,
    "memory-kill": memory_kill,
    "stated-cause": stated_cause,
    "inferred-cause": inferred_cause,
    "fault-marker": fault_marker,
    "garbage-output": garbage_output,
    "echo": echo,
    "unexplained-exception": unexplained_exception,
    "fatal-degraded": fatal_degraded,
    "runner-timeout": runner_timeout,
    "runner-signal": runner_signal,
    "wrapper": wrapper,
    "catch-all": catch_all,
    "stall": stall,
    "no-failure": no_failure,
}


def decide(sc: LogScanner, ev: RunEvidence) -> Classification:
    """Apply the decision order: the first rule that answers decides."""
    for rule in sc.db.decision_order:
        v = RULES[rule.id](sc, ev)
        if v is not None:
            v.rule = rule.id
            return v
    raise AssertionError("the decision order ends with no-failure, which always answers")
