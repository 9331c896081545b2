"""Failure signatures (``probe/data/signatures.json``) for the crash classifier, validated at load.

Each signature is a regular expression over one log line with a *kind*:

- ``decisive``  names a root cause (its ``outcome`` is required);
- ``wrapper``   says *that* something failed, never *why* (vLLM's "Engine core initialization failed");
- ``echo``      follows a first CUDA error (cuBLAS execution failures, ``~CUDAEvent`` warnings);
- ``benign``    never makes a run fail (may set ``degraded_reason``);
- ``degraded``  a performance warning when the run succeeded; its ``outcome`` (if any) is used only
  when the run failed and nothing better explains it;
- ``stall``     a progress line: when a log with no failure *ends* on one, it is a hang;
- ``finish``    evidence the program finished normally.

On one line the matching signature with the highest ``priority`` wins (ties: file order).
"""

from __future__ import annotations

import functools
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from probe.catalog._load import load_data_file
from probe.outcomes import Outcome

Kind = Literal["decisive", "wrapper", "echo", "benign", "degraded", "stall", "finish"]


def _compile(pattern: str, ignore_case: bool = True) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE if ignore_case else 0)


class Signature(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    kind: Kind
    regex: str
    outcome: Outcome | None = None
    priority: int = Field(default=50, ge=0, le=100)
    ignore_case: bool = True
    hint: str | None = None
    degraded_reason: str | None = None
    phase: str | None = None
    fails: bool = Field(default=True, description="wrapper only: does this line alone mean the run failed?")
    source: str | None = None

    @field_validator("regex")
    @classmethod
    def _valid_regex(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"bad regex {v!r}: {exc}") from exc
        return v

    @model_validator(mode="after")
    def _check(self) -> Signature:
        if self.kind == "decisive" and self.outcome is None:
            raise ValueError(f"decisive signature {self.id} needs an outcome")
        if self.kind == "benign" and self.outcome is not None:
            raise ValueError(f"benign signature {self.id} must not carry an outcome")
        if self.outcome in (Outcome.OK, Outcome.SKIPPED):
            raise ValueError(f"signature {self.id}: outcome {self.outcome.value} is not a failure")
        return self

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        return _compile(self.regex, self.ignore_case)


class ExceptionRule(BaseModel):
    """Fallback for a Python exception line no signature matched: map by exception type (+ message)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str
    message: str | None = None
    outcome: Outcome

    @functools.cached_property
    def type_pattern(self) -> re.Pattern[str]:
        return re.compile(rf"(?:^|\.)(?:{self.type})$")

    @functools.cached_property
    def message_pattern(self) -> re.Pattern[str] | None:
        return None if self.message is None else re.compile(self.message, re.IGNORECASE)


class PhaseMarker(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    regex: str
    phase: str

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.regex)


class SignatureDB(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1]
    description: str = ""
    signatures: list[Signature]
    exceptions: list[ExceptionRule]
    phases: list[PhaseMarker] = []
    outcome_hints: dict[Outcome, str] = {}

    @model_validator(mode="after")
    def _unique(self) -> SignatureDB:
        seen: set[str] = set()
        for s in self.signatures:
            if s.id in seen:
                raise ValueError(f"duplicate signature id {s.id}")
            seen.add(s.id)
        return self


@functools.cache
def signature_db() -> SignatureDB:
    return load_data_file("signatures.json", SignatureDB)
