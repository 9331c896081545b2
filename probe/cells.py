"""The unit of dynamic work: a cell spec (what to run) and its record (what happened).

Shared contract between ``probe.sandbox`` (runs specs, writes results to the journal), ``probe.probes``
(the code that runs inside the child) and ``probe.matrix`` (publishes results). :class:`CellRecord` is
the one definition of what happened in a cell: the journal's :class:`CellResult` and the matrix's
``probe.matrix.schema.Cell`` both extend it. A cell's kind and typed parameters: :mod:`probe.cell_params`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from probe.cell_params import CellBudget, CellKind, CellParams, as_float, as_int
from probe.outcomes import Outcome


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

    @classmethod
    def make(
        cls,
        cid: str,
        target: str,
        params: CellParams,
        budget: CellBudget,
        *,
        env: Mapping[str, str] | None = None,
        isolate: bool = False,
    ) -> CellSpec:
        """A spec from typed parameters and a budget (the only way the planner writes one)."""
        return cls(
            id=cid,
            kind=params.KIND,
            target=target,
            params=params.to_wire(budget),
            env=dict(env or {}),
            timeout_s=budget.timeout_s,
            isolate=isolate,
        )

    @property
    def budget(self) -> CellBudget:
        """The scheduler's view (``mem_gib`` / ``exclusive`` travel in ``params`` on the wire)."""
        return CellBudget(
            timeout_s=self.timeout_s,
            mem_gib=as_float(self.params.get("mem_gib")),
            exclusive=bool(self.params.get("exclusive")),
            gpus=max(1, as_int(self.params.get("gpus")) or 1),
        )


class CellRecord(BaseModel):
    """What happened in one cell: the fields the journal's :class:`CellResult` and the published matrix's
    ``Cell`` share (each adds its own: the worker and start time; evidence, shape and citation)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
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


def ordered(data: dict[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
    """``data`` with the keys of ``order`` first, in that order (the field order its file is written in)."""
    out = {k: data[k] for k in order if k in data}
    out.update((k, v) for k, v in data.items() if k not in out)
    return out


class CellResult(CellRecord):
    """What happened, as the runner records it: one JSON line per cell in the journal."""

    kind: CellKind
    worker: Literal["warm", "isolated"] = "isolated"
    started_at: str | None = None

    @model_serializer(mode="wrap")
    def _journal_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return ordered(handler(self), ("id", "kind", "params"))


class ProbeContext(Protocol):
    """Handed to a probe function in the child."""

    def phase(self, name: str) -> None:
        """Announce the phase about to start (recorded by the parent even if the child dies)."""

    def note(self, key: str, value: Any) -> None:
        """Attach a detail to the result (kept even if the child dies later)."""
