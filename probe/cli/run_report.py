"""What ``probe run`` prints while it runs (not a verb): the plan summary, a line per result, heartbeats
of long cells and compiles, the final summary; and the value-order inputs it asks ``probe recommend`` for."""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from probe.cells import CellResult
    from probe.run import RunReport
    from probe.run.order import Priorities
    from probe.run.planning import RunPlan
    from probe.sandbox.config import Heartbeat

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str) -> float:
    """``15m``, ``900``, ``900s``, ``1h``, ``1h30m``, ``2m30s`` -> seconds (ValueError otherwise)."""
    t = text.strip().lower()
    m = _DURATION.match(t)
    if not t or m is None or not any(m.groups()):
        raise ValueError(f"not a duration: {text!r} (e.g. 15m, 900, 900s, 1h, 1h30m)")
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    seconds = h * 3600 + mi * 60 + s
    if seconds <= 0:
        raise ValueError(f"must be > 0: {text!r}")
    return seconds


def clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Printer:
    """Progress lines on stderr, each with the time since the start (and of the budget, if any)."""

    def __init__(self, budget_s: float | None, started: float, out: TextIO | None = None) -> None:
        self.budget_s = budget_s
        self.started = started
        self.out = out

    def _stamp(self) -> str:
        spent = clock(time.monotonic() - self.started)
        return f"{spent} of {clock(self.budget_s)}" if self.budget_s else spent

    def _print(self, text: str) -> None:
        print(text, file=self.out or sys.stderr, flush=True)

    def result(self, r: CellResult, done: int, todo: int) -> None:
        extra = f"  {r.root_cause[:140]}" if r.root_cause and r.outcome.value != "ok" else ""
        degraded = " (degraded)" if r.degraded else ""
        tag = "jit " if r.id.startswith("warm/") else ""
        self._print(
            f"[{tag}{done}/{todo} {self._stamp()}] {r.id}: {r.outcome.value}{degraded} {r.wall_s:.1f}s{extra}"
        )

    def heartbeat(self, b: Heartbeat) -> None:
        if b.jit is not None:
            self._print(f"[jit {self._stamp()}] {b.cell_id}: {b.jit.text()}")
            return
        phase = f" in phase {b.phase}" if b.phase else ""
        self._print(
            f"[… {self._stamp()}] {b.cell_id}: running {b.elapsed_s:.0f} s{phase} (limit {b.limit_s:.0f} s)"
        )

    def plan(self, plan: RunPlan, budget_s: float | None, jobs: int) -> None:
        from probe.run.planning import budget_line

        for note in plan.notes:
            self._print(f"note: {note}")
        if plan.reused:
            runs = sorted({str(r.details.get("reused_from")) for r in plan.reused})
            self._print(f"reuse: {len(plan.reused)} cells copied from run {', '.join(runs)}")
        why = Counter(_reason_kind(c.why) for c in plan.cells if c.why)
        if why:
            self._print("reuse: running " + "; ".join(f"{n} {k}" for k, n in why.most_common(6)))
        for w in plan.warm:
            self._print(f"jit: pre-pass {w.spec.id} (~{clock(w.estimate_s)}: {w.note}) beside the cells; "
                        f"{w.waiting} cell(s) wait for it")  # fmt: skip
        self._print("plan: " + budget_line(plan, budget_s, jobs)[1])


def _reason_kind(why: str) -> str:
    """A reuse reason grouped for the summary: ``changed: flashinfer (a -> b)`` -> ``changed: flashinfer``."""
    if why.startswith("changed: "):
        return "changed: " + ", ".join(part.split(" (")[0] for part in why[len("changed: ") :].split(", "))
    return why


def summary(report: RunReport, journal_path: str, output: str | None) -> None:
    print(
        f"{len(report.results)}/{report.planned} cells recorded in {journal_path}: "
        + ", ".join(f"{k} {v}" for k, v in report.tally.items())
        + (f" ({len(report.reused)} reused)" if report.reused else "")
    )
    unknown = [r for r in report.results if r.outcome.value == "not_run"]
    if unknown:
        kinds = Counter((r.root_cause or "not run").split(":")[0] for r in unknown)
        print(f"{len(unknown)} cell(s) not_run (unknown, not failures): "
              + ", ".join(f"{n} {k}" for k, n in kinds.most_common()))  # fmt: skip
    flagged = report.probe_errors
    if flagged:
        print(
            f"{len(flagged)} cell(s) failed inside probe's own code (details.probe_error; most likely "
            f"probe bugs, please report them): {', '.join(flagged[:10])}"
            + (" ..." if len(flagged) > 10 else "")
        )
    if report.matrix is not None:
        print(f"matrix written to {output}")


def priorities(models: Sequence[str], gpu_cc: str | None) -> Priorities:
    """The value order's inputs: the requested models, and ``probe recommend``'s pair and runner-up for
    each on this GPU when the published matrices (or predictions) answer for it."""
    from probe.errors import ProbeError
    from probe.matrix.schema import cc_to_sm
    from probe.recommend.recommender import recommend
    from probe.run.order import Preferred, Priorities, focus_of

    focus = focus_of(models)
    sm = cc_to_sm(gpu_cc)
    if sm is None:
        return Priorities(focus, (), ("no GPU seen (nvidia-smi): the recommended-pair tier is left out",))
    preferred: list[Preferred] = []
    notes: list[str] = []
    for m in focus:
        try:
            rec = recommend(m.slug, gpu=f"sm_{sm}")
        except ProbeError as exc:
            notes.append(f"no recommendation for {m.slug} on sm_{sm} ({exc}): its tier is left out")
            continue
        if not rec.found:
            notes.append(f"no recommendation for {m.slug} on sm_{sm} in the published matrices")
            continue
        preferred.append(Preferred(m.slug, rec.moe_backend, rec.attention_backend, rec.fa_version, 0))
        ru = rec.runner_up
        if ru:
            preferred.append(
                Preferred(m.slug, ru["moe_backend"], ru["attention_backend"], ru["fa_version"], 1)
            )
    return Priorities(focus, tuple(preferred), tuple(notes))
