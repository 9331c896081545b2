"""Result records shared by the probes (the dict a probe function returns to the sandbox)."""

from __future__ import annotations

import logging
import re
from typing import Any

from probe.outcomes import Outcome

log = logging.getLogger(__name__)

RESULT_KEYS = (
    "outcome",
    "reason",
    "root_cause",
    "hint",
    "timings",
    "ref_error",
    "details",
    "degraded_reasons",
)


def hint_for(outcome: Outcome, reason: str | None) -> str | None:
    """A one-line hint for a probe-decided non-ok outcome (the sandbox adds its own for crashes)."""
    if outcome is Outcome.OK or not reason:
        return None
    m = re.search(r"Expected one of (\[[^\]]*\])", reason)
    if outcome is Outcome.UNSUPPORTED and m:
        return f"this quant scheme's oracle accepts only {m.group(1)}; pick one of those"
    if outcome is Outcome.UNSUPPORTED and "current device" in reason:
        return "the backend's kernels are not built / not selectable for this GPU arch; use another backend"
    if outcome is Outcome.UNSUPPORTED and "disabled for this configuration" in reason:
        return "vLLM's CUTLASS FP8 MoE is only enabled for compressed-tensors / online FP8 checkpoints"
    if outcome is Outcome.UNSUPPORTED and "FlashAttention" in reason:
        return "that FlashAttention build is not in this vLLM install; use another FA version or TRITON_ATTN"
    if outcome is Outcome.UNSUPPORTED:
        return "vLLM refused this configuration cleanly; choose another backend for it"
    if outcome is Outcome.SKIPPED:
        return "not applicable to this vLLM / machine; nothing to fix"
    if outcome is Outcome.WRONG_OUTPUT:
        return "do not serve with this backend for this shape/quant; compare with the reference backend"
    return None


def result(
    outcome: str | Outcome,
    reason: str | None = None,
    *,
    timings: dict[str, float] | None = None,
    ref_error: float | None = None,
    details: dict[str, Any] | None = None,
    degraded: list[str] | None = None,
    hint: str | None = None,
) -> dict[str, Any]:
    """The probe -> sandbox record; ``outcome`` is one of ok / wrong_output / unsupported / skipped /
    not_run (planned, not measured: what it needs is not in the image)."""
    oc = Outcome(outcome)
    if oc not in (Outcome.OK, Outcome.WRONG_OUTPUT, Outcome.UNSUPPORTED, Outcome.SKIPPED, Outcome.NOT_RUN):
        raise ValueError(
            f"a probe returns ok/wrong_output/unsupported/skipped/not_run, not {oc.value}; "
            "other outcomes come from the sandbox's classifier"
        )
    if oc is not Outcome.OK and not reason:
        raise ValueError(f"outcome {oc.value} needs a reason")
    return {
        "outcome": oc.value,
        "reason": reason,
        "root_cause": reason,
        "hint": hint or hint_for(oc, reason),
        "timings": {k: round(float(v), 4) for k, v in (timings or {}).items()},
        "ref_error": None if ref_error is None else float(ref_error),
        "details": details or {},
        "degraded_reasons": list(degraded or []),
    }


def skipped(reason: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return result(Outcome.SKIPPED, reason, details=details)


def not_run(reason: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A cell that cannot be measured in this image (a package it needs is absent): unknown, never a
    failure of the backend."""
    return result(Outcome.NOT_RUN, reason, details=details)


def unsupported(reason: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return result(Outcome.UNSUPPORTED, reason, details=details)


class LocalContext:
    """A ProbeContext for running a probe function in-process (debug drivers, benchmarks, tests)."""

    def __init__(self) -> None:
        self.phases: list[str] = []
        self.notes: dict[str, Any] = {}

    def phase(self, name: str) -> None:
        self.phases.append(name)
        log.debug("phase %s", name)

    def note(self, key: str, value: Any) -> None:
        self.notes[key] = value
