"""The unit of dynamic work: a cell spec (what to run) and a cell result (what happened).

Shared contract between ``probe.sandbox`` (runs specs, writes results to the journal),
``probe.probes`` (the code that runs inside the child) and ``probe.matrix`` (publishes results).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from probe.outcomes import Outcome

CellKind = Literal["import", "moe", "attention", "engine", "fixture"]


class CellSpec(BaseModel):
    """What to run. ``target`` is ``"module:function"``, imported inside the sandboxed child."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="stable key, unique within a run, e.g. 'moe/marlin/nvfp4/E=256/H=3072/tp=1'")
    kind: CellKind
    target: str = Field(description="'package.module:function' called as function(params, ctx) in the child")
    params: dict[str, Any] = {}
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for the child")
    timeout_s: float = Field(default=300.0, gt=0)
    isolate: bool = Field(default=False, description="run in a fresh child even when a warm worker is up")


class CellResult(BaseModel):
    """What happened. Written as one JSON line per cell to the journal."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: CellKind
    params: dict[str, Any] = {}
    outcome: Outcome
    degraded: bool = False
    degraded_reasons: list[str] = []
    phase: str | None = Field(default=None, description="import / build / weights / forward …")
    root_cause: str | None = None
    hint: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    wall_s: float = 0.0
    peak_rss_mb: float | None = None
    timings: dict[str, float] = Field(default_factory=dict, description="e.g. forward_ms_b1 (medians, ms)")
    ref_error: float | None = Field(default=None, description="max relative error vs the torch reference")
    details: dict[str, Any] = Field(default_factory=dict, description="selected kernel class, versions, ...")
    log_excerpt: str | None = None
    worker: Literal["warm", "isolated"] = "isolated"
    started_at: str | None = None


class ProbeContext(Protocol):
    """Handed to a probe function in the child."""

    def phase(self, name: str) -> None:
        """Announce the phase about to start (recorded by the parent even if the child dies)."""

    def note(self, key: str, value: Any) -> None:
        """Attach a detail to the result (kept even if the child dies later)."""
