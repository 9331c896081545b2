"""Failure signatures (``probe/data/signatures.json``) for the crash classifier, validated at load.

Each signature is a regular expression over one log line with a *kind*:

- ``decisive``  states a root cause (its ``outcome`` is required);
- ``fault``     a fault marker: a debugger, sanitizer, the driver, the kernel or the C runtime reports that
  the GPU or the process faulted (cuda-gdb ``CUDA Exception:``, compute-sanitizer ``Invalid __global__
  read``, ``NVRM: Xid``, ``Segmentation fault``, ``core dumped``); its ``outcome`` is required and a log
  with one is never ``ok``;
- ``wrapper``   says *that* something failed, never *why* (vLLM's "Engine core initialization failed");
- ``echo``      follows a first CUDA error (cuBLAS execution failures, ``~CUDAEvent`` warnings);
- ``benign``    never makes a run fail (may set ``degraded_reason``);
- ``degraded``  a performance warning when the run succeeded; its ``outcome`` (if any) is used only
  when the run failed and nothing better explains it;
- ``stall``     the program states it is stuck (a wait, no progress): a log with no failure that *ends* on one
  is a hang;
- ``finish``    evidence the program finished normally.

On one line the matching signature with the highest ``priority`` wins (ties: file order). Which kind of
evidence decides when a log holds several is the ``decision_order`` (docs/sandbox.md "Decision order").
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from probe.catalog import datafiles
from probe.outcomes import Outcome

Kind = Literal["decisive", "fault", "wrapper", "echo", "benign", "degraded", "stall", "finish"]


def _compile(pattern: str, ignore_case: bool = True) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE if ignore_case else 0)


try:  # Python >= 3.11
    from re import _constants as _sre_c  # type: ignore[attr-defined, unused-ignore]
    from re import _parser as _sre_p  # type: ignore[attr-defined, unused-ignore]
except ImportError:  # Python 3.10
    import sre_constants as _sre_c  # type: ignore[no-redef, unused-ignore]
    import sre_parse as _sre_p  # type: ignore[no-redef, unused-ignore]

_MIN_LITERAL = 3


def _required(items: Any, min_len: int = _MIN_LITERAL) -> frozenset[str] | None:
    """Lower-cased literals of which at least one occurs in every match of ``items`` (None: unknown)."""
    cands: list[frozenset[str]] = []
    run = ""

    def flush() -> None:
        nonlocal run
        if len(run) >= min_len:
            cands.append(frozenset({run.lower()}))
        run = ""

    for op, av in items:
        if op is _sre_c.LITERAL:
            run += chr(av)
            continue
        flush()
        sub: frozenset[str] | None = None
        if op is _sre_c.SUBPATTERN:
            sub = _required(av[-1], min_len)
        elif op is _sre_c.BRANCH:
            alts = [_required(a, min_len) for a in av[1]]
            sub = None if any(a is None for a in alts) else frozenset().union(*alts)  # type: ignore[arg-type]
        elif op in (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT) and av[0] >= 1:
            sub = _required(av[2], min_len)
        if sub:
            cands.append(sub)
    flush()
    if not cands:
        return None
    return max(cands, key=lambda c: (min(len(x) for x in c), -len(c)))


def required_literals(pattern: str) -> frozenset[str] | None:
    """A cheap pre-check for a regex: at least one of these lower-cased strings is in any line it
    matches (searched in the lower-cased line), or None when no such set can be derived. Literals of
    three characters or more are preferred; two-character ones (``%|`` of a progress bar, ``ok``) are
    the fallback before None."""
    try:
        parsed = _sre_p.parse(pattern)
        return _required(parsed) or _required(parsed, 2)
    except Exception:
        return None


def _valid_regex(v: str) -> str:
    try:
        re.compile(v)
    except re.error as exc:
        raise ValueError(f"bad regex {v!r}: {exc}") from exc
    return v


Regex = Annotated[
    str, AfterValidator(_valid_regex)
]  # a Python regular expression, compiled at load to check it


class Signature(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    kind: Kind
    regex: Regex
    outcome: Outcome | None = None
    priority: int = Field(default=50, ge=0, le=100)
    ignore_case: bool = True
    hint: str | None = None
    degraded_reason: str | None = None
    phase: str | None = None
    fails: bool = Field(default=True, description="wrapper only: does this line alone mean the run failed?")
    source: str | None = None
    example: str | None = Field(
        default=None, description="a corpus log with a line this signature matches: COLLECTION/FILE"
    )

    @model_validator(mode="after")
    def _check(self) -> Signature:
        if self.kind in ("decisive", "fault") and self.outcome is None:
            raise ValueError(f"{self.kind} signature {self.id} needs an outcome")
        if self.kind == "benign" and self.outcome is not None:
            raise ValueError(f"benign signature {self.id} must not carry an outcome")
        if self.outcome in (Outcome.OK, Outcome.SKIPPED):
            raise ValueError(f"signature {self.id}: outcome {self.outcome.value} is not a failure")
        return self

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        return _compile(self.regex, self.ignore_case)

    @functools.cached_property
    def literals(self) -> frozenset[str] | None:
        return required_literals(self.regex)


class ExceptionRule(BaseModel):
    """A Python exception line no signature matched: its type (+ message) may state a cause. A rule
    without ``type`` reads the message of an exception of any type (``Exception: flashinfer_python is
    installed with version 0.6.3, which is less than the minimum required version``); rules are tried in
    file order, the first that matches decides, and an exception no rule explains is ``crashed``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    type: Regex | None = None
    message: Regex | None = None
    frame: Regex | None = None  # the file of the innermost traceback frame (where it was raised)
    outcome: Outcome
    reason: str | None = None
    example: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ExceptionRule:
        if self.type is None and self.message is None and self.frame is None:
            raise ValueError(f"exception rule {self.id} needs a type, a message or a frame")
        return self

    @functools.cached_property
    def type_pattern(self) -> re.Pattern[str] | None:
        return None if self.type is None else re.compile(rf"(?:^|\.)(?:{self.type})$")

    @functools.cached_property
    def message_pattern(self) -> re.Pattern[str] | None:
        return None if self.message is None else re.compile(self.message, re.IGNORECASE)

    @functools.cached_property
    def frame_pattern(self) -> re.Pattern[str] | None:
        return None if self.frame is None else re.compile(self.frame)

    def explains(self, etype: str, msg: str, frame: str | None) -> bool:
        """Whether this rule reads an exception of this type and message, raised in this file."""
        return (
            (self.type_pattern is None or self.type_pattern.search(etype) is not None)
            and (self.message_pattern is None or self.message_pattern.search(msg) is not None)
            and (
                self.frame_pattern is None
                or (frame is not None and self.frame_pattern.search(frame) is not None)
            )
        )


class CauseWords(BaseModel):
    """Words that name a class of cause (``out of memory``, ``illegal memory access``, ``failed to
    compile``), read on an error line no signature knows or in the message of an exception no exception
    rule explains: the generic reading behind the specific signatures. Entries are tried in file order,
    the first that matches decides."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    words: Regex
    outcome: Outcome
    reason: str
    unmarked: bool = Field(
        default=False, description="read on a line with no error marker too (words no benign line says)"
    )
    example: str | None = Field(default=None, description="a corpus log it decides: COLLECTION/FILE")

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.words, re.IGNORECASE)

    @functools.cached_property
    def literals(self) -> frozenset[str] | None:
        return required_literals(self.words)


class ErrorLine(BaseModel):
    """Which lines report an error (``marker``), less those that only warn or go on (``not_marker``:
    warnings, info lines, fallbacks, retries): the lines cause words are read on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    marker: Regex
    not_marker: Regex

    @functools.cached_property
    def marker_pattern(self) -> re.Pattern[str]:
        return re.compile(self.marker, re.IGNORECASE)

    @functools.cached_property
    def not_marker_pattern(self) -> re.Pattern[str]:
        return re.compile(self.not_marker)

    def marked(self, line: str) -> bool:
        """The line carries an error marker."""
        return self.marker_pattern.search(line) is not None

    def only_warns(self, line: str) -> bool:
        """The line only warns or goes on: no cause words are read on it."""
        return self.not_marker_pattern.search(line) is not None


DecisionRuleId = Literal[
    "probe-report",
    "memory-kill",
    "stated-cause",
    "inferred-cause",
    "fault-marker",
    "garbage-output",
    "echo",
    "unexplained-exception",
    "fatal-degraded",
    "runner-timeout",
    "runner-signal",
    "wrapper",
    "catch-all",
    "stall",
    "no-failure",
]


class DecisionRule(BaseModel):
    """One step of the classifier's decision order: which evidence it reads, why it ranks where it
    does, and a corpus log it decides (``example``: COLLECTION/FILE, classified with ``example_args``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: DecisionRuleId
    evidence: str
    outcome: str
    reason: str
    example: str | None = Field(description="COLLECTION/FILE; None only for evidence from the sandbox itself")
    example_args: list[str] = []


class PhaseMarker(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    regex: Regex
    phase: str

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.regex)

    @functools.cached_property
    def literals(self) -> frozenset[str] | None:
        return required_literals(self.regex)


class SignatureDB(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1]
    description: str = ""
    signatures: list[Signature]
    exceptions: list[ExceptionRule]
    cause_words: list[CauseWords]
    error_line: ErrorLine
    phases: list[PhaseMarker] = []
    outcome_hints: dict[Outcome, str] = {}
    decision_order: list[DecisionRule]

    @model_validator(mode="after")
    def _unique(self) -> SignatureDB:
        seen: set[str] = set()
        for s in self.signatures:
            if s.id in seen:
                raise ValueError(f"duplicate signature id {s.id}")
            seen.add(s.id)
        rules = [r.id for r in self.decision_order]
        missing = set(get_args(DecisionRuleId)) - set(rules)
        if missing or len(rules) != len(set(rules)):
            raise ValueError(f"decision_order must name every rule once (missing: {sorted(missing)})")
        if len({e.id for e in self.exceptions}) != len(self.exceptions):
            raise ValueError("duplicate exception rule id")
        if len({w.id for w in self.cause_words}) != len(self.cause_words):
            raise ValueError("duplicate cause_words id")
        return self


@functools.cache
def signature_db() -> SignatureDB:
    return datafiles.load("signatures.json", SignatureDB)
