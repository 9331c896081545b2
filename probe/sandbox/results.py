"""Turn what the parent observed of one cell (:class:`CellRun`) into a :class:`CellResult`.

The child's ``done`` event is parsed once into a typed :class:`ChildReport`; the classifier
(``probe.sandbox.classifier``) decides the outcome from the captured output, the exit status and what
the child reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probe.cells import CellResult, CellSpec
from probe.outcomes import Outcome
from probe.sandbox import stacks
from probe.sandbox.cellrun import CellRun
from probe.sandbox.worker_parent import WorkerKind

if TYPE_CHECKING:
    from probe.sandbox.classifier import Classification

_OOM_HINT = "lower the probe's memory (gpu_memory_utilization / batch) or run with fewer -j"
_JIT_HINT = (
    "a JIT build outlived the compile budget (unknown, not a failure): give JIT builds more time "
    "(--jit-timeout, --budget), keep the JIT caches between runs, or compile first (--warm-jit)"
)
_BUDGET_HINT = "not measured (unknown): give the run a larger --budget, or run it again with --resume"

# Folders (and files) holding probe's own cell code: an exception raised there (innermost traceback
# frame) is most likely a probe bug, not a backend failure: the sandbox, the probes, and the cell
# contract (cell parameters that do not fit their kind). A module-level list so tests can add one.
PROBE_CODE_DIRS: list[Path] = [
    Path(__file__).resolve().parent,
    Path(__file__).resolve().parent.parent / "probes",
    Path(__file__).resolve().parent.parent / "cells.py",
    Path(__file__).resolve().parent.parent / "cell_params.py",
]


def _as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@dataclass
class ChildReport:
    """The child's ``done`` event: its result dict (``probe.probes.common.result``) and error, typed."""

    outcome: Outcome | None = None
    bad_outcome: str | None = None  # an outcome value the vocabulary does not have
    root_cause: str | None = None
    hint: str | None = None
    degraded: bool = False
    degraded_reasons: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    ref_error: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    phase: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # any other key the probe returned
    error: dict[str, Any] | None = None

    @classmethod
    def parse(cls, done: dict[str, Any] | None) -> ChildReport:
        if done is None:
            return cls()
        rep = dict(done.get("result") or {})
        out = cls(error=done.get("error") or None)
        raw_outcome = rep.pop("outcome", None)
        if raw_outcome is not None:
            try:
                out.outcome = Outcome(raw_outcome)
            except ValueError:
                out.bad_outcome = str(raw_outcome)
        out.root_cause = rep.pop("root_cause", None)
        out.hint = rep.pop("hint", None)
        out.degraded = bool(rep.pop("degraded", False))
        out.degraded_reasons = list(rep.pop("degraded_reasons", []) or [])
        t = rep.pop("timings", None)
        if isinstance(t, dict):
            out.timings = {str(k): float(v) for k, v in t.items() if _as_float(v) is not None}
        out.ref_error = _as_float(rep.pop("ref_error", None))
        d = rep.pop("details", None)
        out.details = dict(d) if isinstance(d, dict) else {}
        out.phase = rep.pop("phase", None)
        out.extra = rep
        if out.outcome is None and out.error is None:
            out.outcome = Outcome.OK  # a probe that returned without an outcome ran fine
        return out


def probe_code_location(error: dict[str, Any] | None, dirs: list[Path] | None = None) -> str | None:
    """``file:line`` (relative to the probe package's parent) when ``error`` was raised in probe's own
    code (``PROBE_CODE_DIRS``), else None. ImportErrors are never attributed to probe: a missing or
    renamed backend module is what the ``import_error`` / ``api_mismatch`` outcomes report; a
    :class:`probe.outcomes.StackFailure` hands on a failure of the probed stack."""
    if not isinstance(error, dict) or error.get("import_error") or error.get("stack_failure"):
        return None
    frame = error.get("frame")
    if not isinstance(frame, dict) or not frame.get("file"):
        return None
    try:
        path = Path(str(frame["file"])).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    for root in dirs if dirs is not None else PROBE_CODE_DIRS:
        root = root.resolve()
        if path == root or root in path.parents:
            base = Path(__file__).resolve().parent.parent.parent  # the folder holding the package
            try:
                shown = path.relative_to(base).as_posix()
            except ValueError:
                shown = str(path)
            return f"{shown}:{frame.get('line')}"
    return None


def _text_with_error(run: CellRun, error: dict[str, Any] | None) -> str:
    """The captured output, plus the child's exception line when the output lacks it."""
    text = run.capture.text()
    if error:
        line = f"{error.get('type')}: {error.get('message')}".strip()
        first = line.splitlines()[0] if line else ""
        if first and first not in text:
            text = text + ("\n" if text and not text.endswith("\n") else "") + line + "\n"
    return text


def _classify(text: str, run: CellRun, report: ChildReport) -> Classification:
    from probe.sandbox.classifier import classify_text

    return classify_text(
        text,
        exit_code=run.exit_code if run.died or run.timed_out or run.mem_kill else None,
        signal_name=run.signal if run.died else None,
        timed_out=run.timed_out,
        reported=report.outcome,
        memory_killed=run.mem_kill is not None,
        completed=run.done is not None,
    )


def _cause(
    run: CellRun, report: ChildReport, verdict: Classification
) -> tuple[Outcome, str | None, str | None]:
    """(outcome, root cause, hint): the classifier's, overridden by a memory kill, explained for a hang
    or a death without a recognised cause."""
    outcome = verdict.outcome
    root_cause = report.root_cause or verdict.root_cause
    hint = report.hint or verdict.hint
    if run.mem_kill:
        outcome = Outcome.OOM
        oom_line = verdict.outcome is Outcome.OOM and verdict.root_cause
        root_cause = verdict.root_cause if oom_line else run.mem_kill
        hint = hint or _OOM_HINT
    if run.timed_out and not root_cause:
        root_cause = f"probe: no result after {run.wall_s:.0f} s (phase {run.phase or 'unknown'}); killed"
        frames = stacks.cell_stack(run.capture.text())
        if frames:
            root_cause += f"; stuck at {stacks.stuck_at(frames)}"
    if run.died and not root_cause:
        how = f"was killed by {run.signal}" if run.signal else f"exited with code {run.exit_code}"
        root_cause = f"probe: the child {how} before reporting a result (phase {run.phase or 'unknown'})"
    return outcome, root_cause, hint


def _gpu_details(run: CellRun, gpus: int) -> dict[str, Any]:
    """The after-teardown GPU check (``probe.sandbox.gpu_procs``): leftovers always, the check itself
    for multi-GPU cells (and whenever something was left)."""
    gpu = run.gpu_check
    out: dict[str, Any] = {}
    if gpu is not None and gpu.leftovers:
        out["gpu_leftovers"] = [a.as_dict() for a in gpu.leftovers]
    if gpu is not None and (gpu.leftovers or gpus > 1):
        out["gpu_check"] = gpu.details()
    return out


def _details(
    run: CellRun, report: ChildReport, worker: WorkerKind, probe_bug_at: str | None
) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if run.notes:
        details["notes"] = run.notes
    details["output_bytes"] = run.capture.total
    if run.strays_killed:
        details["strays_killed"] = len(run.strays_killed)
    if report.bad_outcome is not None:
        details["bad_reported_outcome"] = report.bad_outcome
    details.update(report.details)
    details.update(report.extra)  # anything else the probe returned
    if report.error:
        error = dict(report.error)
        known = error.pop("details", None)
        if isinstance(known, dict):
            details.update(known)  # what the probe knew of a failure it handed on (a DP engine's ranks)
        details["exception"] = error
    if probe_bug_at:
        details["probe_error"] = True
    if run.done is not None and run.exit_code not in (None, 0) and worker == "isolated":
        details["exit_after_result"] = run.exit_code
    return details


def _probe_bug_hint(where: str | None, hint: str | None) -> str | None:
    """Say in the hint that the exception was raised in probe's own code (most likely a probe bug)."""
    if not where:
        return hint
    own = (
        f"raised in probe's own code ({where}): most likely a probe bug, "
        "not a backend failure — please report it"
    )
    return f"{own}; {hint}" if hint else own


def _stopped(run: CellRun, outcome: Outcome) -> tuple[Outcome, str, str | None, str | None] | None:
    """(not_run, cause, hint, phase) for a cell stopped unfinished by a limit: while it compiled (its JIT
    budget, or the run's time budget: the compile did not finish, which says nothing about the backend),
    or by the run's time budget; None for a plain hang (``timeout``)."""
    why = "the run's time budget was spent" if run.budget_stopped else None
    if run.jit is not None and (run.budget_stopped or outcome is Outcome.TIMEOUT):
        cause = run.jit.stopped_cause(why)
        if cause:
            return Outcome.NOT_RUN, cause, _JIT_HINT, "jit"
    if run.budget_stopped:
        cause = f"run budget spent: stopped after {run.wall_s:.0f} s in phase {run.phase or 'unknown'}"
        return Outcome.NOT_RUN, cause, _BUDGET_HINT, None
    return None


def not_run_result(spec: CellSpec, reason: str) -> CellResult:
    """The row of a planned cell that was not started (the run's time budget, a JIT module that did not
    finish building): ``not_run`` with the reason, never a failure; a later ``--resume`` runs it."""
    return CellResult(
        id=spec.id,
        kind=spec.kind,
        params=spec.params,
        outcome=Outcome.NOT_RUN,
        root_cause=reason,
        hint=_BUDGET_HINT,
        started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def build_result(spec: CellSpec, run: CellRun, worker: WorkerKind, excerpt_chars: int = 6000) -> CellResult:
    """Turn what the parent observed into a CellResult (the classifier decides the outcome)."""
    report = ChildReport.parse(run.done)
    text = _text_with_error(run, report.error)
    verdict = _classify(text, run, report)
    outcome, root_cause, hint = _cause(run, report, verdict)
    reasons = report.degraded_reasons + [
        r for r in verdict.degraded_reasons if r not in report.degraded_reasons
    ]
    probe_bug_at = probe_code_location(report.error) if report.error else None
    details = _details(run, report, worker, probe_bug_at)
    details.update(_gpu_details(run, spec.budget.gpus))
    hint = _probe_bug_hint(probe_bug_at, hint)
    phase = report.phase or run.phase or verdict.phase
    if run.timed_out:
        frames = stacks.cell_stack(run.capture.text())
        if frames:
            details["stack_at_timeout"] = frames
    if run.timed_out or run.budget_stopped:  # stopped by a limit: a compile or the budget says nothing
        stop = _stopped(run, outcome)
        if stop is not None:
            outcome, root_cause, hint, phase = stop[0], stop[1], stop[2], stop[3] or phase
    if run.jit is not None:  # after the stop's recount of the build's units
        details.update(run.jit.details())
    if verdict.line_number is not None:
        details["root_cause_line"] = verdict.line_number
    return CellResult(
        id=spec.id,
        kind=spec.kind,
        params=spec.params,
        outcome=outcome,
        degraded=report.degraded or verdict.degraded,
        degraded_reasons=list(dict.fromkeys(reasons)),
        phase=phase,
        root_cause=root_cause,
        hint=hint,
        exit_code=run.exit_code if run.done is None or worker == "isolated" else None,
        signal=run.signal,
        wall_s=round(run.wall_s, 3),
        peak_rss_mb=round(run.peak_rss / (1 << 20), 1) if run.peak_rss else None,
        timings=report.timings,
        ref_error=report.ref_error,
        details=details,
        log_excerpt=text[-excerpt_chars:] if text else None,
        worker=worker,
        started_at=run.started_at,
    )
