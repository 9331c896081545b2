"""The JIT pre-pass beside the cells (``probe run --warm-jit``): never silent, never blocking, no verdict.

The pre-pass cells (:func:`probe.probes.jit_warm.warm_specs`: FlashInfer's CUTLASS MoE module, one
untimed forward per JIT-compiling attention layout) run in a thread of their own, isolated, all at once,
into ``JOURNAL.warm.jsonl``. Only the cells that need one of their modules wait for it
(:class:`probe.sandbox.prereq.Prerequisites`); every other cell runs beside the pre-pass from the start.
Each pre-pass cell may compile for ``--jit-timeout`` seconds beyond a start-up allowance (imports, the
attention layer's forward; :data:`START_S`), within the run's budget; one stopped while compiling is
``not_run`` with ``compile budget exceeded after N s, M of K units built``, and the cells waiting for it
are ``not_run`` with that reason (they would only compile the same module again; the objects built so far
stay in the JIT cache for the next run). FlashInfer's ninja runs with ``MAX_JOBS`` = cores - 2, so the
cells beside it keep two cores.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from probe.cells import CellResult, CellSpec
from probe.outcomes import Outcome
from probe.sandbox.config import RunnerConfig
from probe.sandbox.prereq import Prerequisites

log = logging.getLogger(__name__)

#: what a pre-pass cell may spend not compiling (imports, an attention layer's forward); its compile time
#: comes on top, up to ``--jit-timeout``
START_S = 180.0


def warm_journal_path(journal: Path | str) -> Path:
    return Path(f"{journal}.warm.jsonl")


def blocks_dependents(r: CellResult) -> str | None:
    """Why the cells waiting for pre-pass cell ``r`` are not run (None: they run)."""
    if r.outcome is Outcome.NOT_RUN:
        return f"its JIT module {r.id} did not finish building: {r.root_cause or 'not run'}"
    return None


@dataclass
class PrePass:
    """The pre-pass of one run: its cells, who waits for what, and its thread."""

    specs: list[CellSpec]
    prerequisites: Prerequisites
    results: list[CellResult] = field(default_factory=list)
    error: BaseException | None = None
    _thread: threading.Thread | None = None

    def start(
        self,
        cfg: RunnerConfig,
        journal: Path,
        stop: threading.Event,
        on_result: Callable[[CellResult], None] | None = None,
    ) -> None:
        """Run the pre-pass cells in a thread (the journal is resumed: a module built by an earlier
        call is not built again; one stopped unfinished is)."""
        from probe.sandbox.journal import Journal

        warm_journal = Journal.open(journal, resume=True, run_meta={"run_id": cfg.run_id})
        for r in warm_journal.results:  # done by an earlier call of this run (--resume)
            if r.id in {s.id for s in self.specs} and r.outcome is not Outcome.NOT_RUN:
                self.prerequisites.settle(r.id, blocks_dependents(r))

        def settle(r: CellResult) -> None:
            self.results.append(r)
            self.prerequisites.settle(r.id, blocks_dependents(r))
            if on_result is not None:
                on_result(r)

        def body() -> None:
            from probe.sandbox.runner import run_cells

            try:
                rep = run_cells(self.specs, cfg, journal=warm_journal, on_result=settle, stop=stop)
                for cid, why in rep.not_run.items():
                    self.prerequisites.settle(cid, f"its JIT module {cid} was not built: {why}")
            except BaseException as exc:  # the main run goes on: its cells settle as not built
                log.exception("the JIT pre-pass failed")
                self.error = exc
            finally:
                for pid in self.prerequisites.pending():
                    self.prerequisites.settle(pid, f"its JIT module {pid} was not built (the pre-pass ended)")
                warm_journal.close()

        self._thread = threading.Thread(target=body, name="probe-jit-prepass", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)


def plan_prepass(
    specs: list[CellSpec],
    sm: int | None = None,
    skip: dict[str, str] | None = None,
    expected_s: dict[str, float] | None = None,
) -> PrePass | None:
    """The pre-pass for the cells that will run on GPU ``sm`` (None: none of them needs a JIT module).
    ``skip``: pre-pass cells not to start, with why (a compile longer than the run's budget): the cells
    waiting for one are ``not_run`` with that reason from the start. ``expected_s``: each pre-pass cell's
    estimate (the scheduler holds a later cell for an earlier one whose module is due soon)."""
    from probe.probes.jit_warm import warm_needs, warm_specs

    skip = skip or {}
    needs = warm_needs(specs, sm)
    warm = [w for w in warm_specs(specs, limit_s=START_S, sm=sm) if w.id not in skip]
    if not warm and not any(pid in skip for pid in needs.values()):
        return None
    jobs = str(max(1, (os.cpu_count() or 1) - 2))
    warm = [
        w.model_copy(update={"env": {"MAX_JOBS": jobs, **w.env}}) if "flashinfer_moe" in w.params else w
        for w in warm
    ]
    prerequisites = Prerequisites(needs, expected_s)
    for pid, why in skip.items():
        prerequisites.settle(pid, f"its JIT module {pid} {why}")
    return PrePass(warm, prerequisites)


def prepass_config(cfg: RunnerConfig, n: int) -> RunnerConfig:
    """The pre-pass's runner: every cell at once (each compiles on its own cores), each with its own
    limit plus up to ``--jit-timeout`` of compiling, its own run id."""
    return replace(cfg, jobs=max(1, min(n, os.cpu_count() or 1)), run_id=f"{cfg.run_id}w", tiers=None,
                   prerequisites=None, timeout_override_s=None)  # fmt: skip
