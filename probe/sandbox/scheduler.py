"""The memory-budget scheduler: ``jobs`` slot threads take cells while they fit, run each in a warm
or isolated worker (:mod:`probe.sandbox.worker_parent`) and record the result.

A cell starts when the budget admits it (discrete GPU: running estimates + a per-worker overhead
within ``MemoryPolicy.budget_gib``; unified memory: a share of MemAvailable), never beside an
``exclusive`` cell, once what it waits for is there (``RunnerConfig.prerequisites``: the JIT pre-pass's
modules), in the order given, preferring cells of the warm worker's environment within a value tier
(``RunnerConfig.tiers``). With a time budget (``RunnerConfig.budget``) a cell whose estimate exceeds
what is left is not started, and nothing starts after the deadline: such cells get a ``not_run`` row
with the reason. A warm worker that dies is replaced; after ``max_restarts`` crashes the remaining
cells run isolated.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from probe.cells import CellResult, CellSpec
from probe.sandbox.cellrun import CellRun
from probe.sandbox.config import RunnerConfig
from probe.sandbox.grant import CellGrant
from probe.sandbox.results import build_result, not_run_result
from probe.sandbox.worker_parent import WorkerKind, WorkerProc

log = logging.getLogger(__name__)

#: a cell of a later tier waits for an earlier-tier cell whose JIT module is due within this many seconds
HOLD_S = 90.0
#: ...unless it is this quick (a MoE backend vLLM refuses at once, a cached layout)
QUICK_S = 5.0

EnvKey = tuple[tuple[str, str], ...]


@dataclass
class RunReport:
    results: list[CellResult] = field(default_factory=list)
    already_done: list[str] = field(default_factory=list)
    not_run: dict[str, str] = field(default_factory=dict)
    worker_restarts: int = 0
    interrupted: bool = False


def env_key(spec: CellSpec) -> EnvKey:
    return tuple(sorted(spec.env.items()))


def params_for_child(spec: CellSpec, grant: CellGrant) -> dict[str, Any]:
    """The wire params the child gets: the spec's, with ``gpu_memory_utilization`` capped by the grant
    (the journaled spec keeps its own)."""
    params = dict(spec.params)
    util = grant.gpu_memory_utilization
    if util is not None:
        try:
            cur: float | None = float(params["gpu_memory_utilization"])
        except (KeyError, TypeError, ValueError):
            cur = None
        params["gpu_memory_utilization"] = util if cur is None else min(cur, util)
    return params


class Scheduler:
    def __init__(
        self,
        specs: list[CellSpec],
        cfg: RunnerConfig,
        sink: Callable[[CellResult], None],
        report: RunReport,
        stop: threading.Event | None = None,
        sink_many: Callable[[list[CellResult]], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.pending = list(specs)
        self.sink = sink
        self.sink_many = sink_many
        self.report = report
        self.cond = threading.Condition()
        self.running_mem = 0.0
        self.running = 0
        self.exclusive_running = False
        self.restarts = 0
        self.stop = stop if stop is not None else threading.Event()
        self.sink_lock = threading.Lock()
        self.errors: list[BaseException] = []
        self.workers: set[WorkerProc] = set()

    # -- admission (called with the lock held) ---------------------------------------------------
    def _admit(self, spec: CellSpec, free_slots: int) -> CellGrant | None:
        """The grant for ``spec`` if it may start now, else None."""
        budget = spec.budget
        if budget.exclusive and self.running:
            return None  # an engine-sized cell waits until the GPU is its own
        mem = self.cfg.memory
        share = None
        if mem.unified:
            share = mem.unified_limits(budget.mem_gib, free_slots, self.running)
            if share is None:
                return None
        elif not mem.fits(budget.mem_gib or 0.0, self.running_mem, self.running):
            return None
        cap = share.rss_cap_bytes if share else None
        if self.cfg.rss_cap_bytes:
            cap = float(min(self.cfg.rss_cap_bytes, cap if cap is not None else self.cfg.rss_cap_bytes))
        return CellGrant(
            reserved_gib=budget.mem_gib or 0.0, exclusive=budget.exclusive, share=share, rss_cap_bytes=cap
        )

    def _waiting(self, spec: CellSpec) -> bool:
        pre = self.cfg.prerequisites
        return pre is not None and pre.state(spec.id)[0] == "wait"

    def _held(self, tiers: Mapping[str, int]) -> Callable[[CellSpec], bool]:
        """In a run in order of value, a cell of a later tier does not take the slot from an earlier-tier
        cell whose JIT module is due soon (within :data:`HOLD_S`): a long engine would otherwise start
        while the model's attention layouts finish warming. Quick cells (:data:`QUICK_S`) still fill the
        gap."""
        pre = self.cfg.prerequisites
        if pre is None or not tiers:
            return lambda s: False
        soon = [tiers.get(s.id, 0) for s in self.pending if self._waiting(s) and pre.due_within(s.id, HOLD_S)]
        if not soon:
            return lambda s: False
        floor = min(soon)
        est = self.cfg.budget.estimates if self.cfg.budget is not None else {}
        return lambda s: tiers.get(s.id, 0) > floor and est.get(s.id, QUICK_S + 1) > QUICK_S

    def _pick(self, prefer: EnvKey | None) -> tuple[CellSpec, CellGrant] | None:
        if self.exclusive_running:
            return None
        free_slots = max(1, self.cfg.jobs - self.running)
        tiers = self.cfg.tiers or {}
        held = self._held(tiers)
        ready = [i for i, s in enumerate(self.pending) if not self._waiting(s) and not held(s)]
        if not ready:
            return None
        top = min(tiers.get(self.pending[i].id, 0) for i in ready)

        def order(i: int) -> tuple[int, bool, int]:
            tier = tiers.get(self.pending[i].id, 0)
            return (tier, tier != top or env_key(self.pending[i]) != prefer, i)

        for i in sorted(ready, key=order):
            grant = self._admit(self.pending[i], free_slots)
            if grant is not None:
                return self.pending.pop(i), grant
        return None

    def _unrunnable(self) -> list[tuple[CellSpec, str]]:
        """Pending cells that will not start (called with the lock held; they leave ``pending``): what
        they wait for was stopped unfinished, the run's time budget is spent, or their estimate exceeds
        what is left of it."""
        pre, budget = self.cfg.prerequisites, self.cfg.budget
        if pre is None and budget is None:
            return []
        left = budget.left() if budget is not None else None
        out: list[tuple[CellSpec, str]] = []
        keep: list[CellSpec] = []
        for s in self.pending:
            state, what = pre.state(s.id) if pre is not None else ("ready", None)
            why = what if state == "drop" else None
            if why is None and left is not None and budget is not None:
                est = budget.estimates.get(s.id)
                waited = f" while it waited for {what}" if state == "wait" else ""
                if left <= 0:
                    why = f"run budget spent{waited}: not started"
                elif est is not None and est > left:
                    why = f"run budget: needs ~{est:.0f} s, {left:.0f} s left{waited}: not started"
            if why:
                out.append((s, why))
            else:
                keep.append(s)
        self.pending = keep
        return out

    def take(self, prefer: EnvKey | None) -> tuple[CellSpec, CellGrant] | None:
        while True:
            with self.cond:
                if self.stop.is_set() or not self.pending:
                    return None
                dropped = self._unrunnable()
                if not dropped:
                    got = self._pick(prefer)
                    if got is not None:
                        self.running += 1
                        self.running_mem += got[1].reserved_gib
                        self.exclusive_running = got[1].exclusive
                        return got
                    self.cond.wait(timeout=0.5)
                    continue
            self.record_many([not_run_result(spec, why) for spec, why in dropped])  # outside the lock

    def release(self, grant: CellGrant) -> None:
        with self.cond:
            self.running -= 1
            self.running_mem -= grant.reserved_gib
            if grant.exclusive:
                self.exclusive_running = False
            self.cond.notify_all()

    # -- running ---------------------------------------------------------------------------------
    def record(self, result: CellResult) -> None:
        with self.sink_lock:
            self.sink(result)
            self.report.results.append(result)

    def record_many(self, results: list[CellResult]) -> None:
        """Rows recorded at once (cells the budget leaves out: one journal write, not one per cell)."""
        with self.sink_lock:
            if self.sink_many is not None:
                self.sink_many(results)
            else:
                for r in results:
                    self.sink(r)
            self.report.results.extend(results)

    def not_run(self, cell_id: str, why: str) -> None:
        with self.sink_lock:
            self.report.not_run[cell_id] = why

    def slot(self) -> None:
        """One slot thread: take, run, release, until nothing is left (or ``stop``)."""
        warm: WorkerProc | None = None
        warm_key: EnvKey | None = None
        try:
            while (got := self.take(warm_key)) is not None:
                spec, grant = got
                try:
                    warm, warm_key = self._run_one(spec, grant, warm, warm_key)
                finally:
                    self.release(grant)
        except BaseException as exc:
            log.exception("runner slot failed")
            self.errors.append(exc)
            self.stop.set()
        finally:
            if warm is not None:
                with contextlib.suppress(Exception):
                    warm.close()
                self.workers.discard(warm)

    def _spawn(self, env: dict[str, str], kind: WorkerKind) -> WorkerProc:
        w = WorkerProc(self.cfg, env, kind)
        self.workers.add(w)
        return w

    def _timeout(self, spec: CellSpec) -> float:
        return self.cfg.timeout_override_s or spec.budget.timeout_s

    def _run_isolated(self, spec: CellSpec, grant: CellGrant) -> CellRun:
        w = self._spawn(spec.env, "isolated")
        run = w.run_cell(spec, params_for_child(spec, grant), grant, self._timeout(spec), self.stop)
        self.workers.discard(w)
        return run

    def _run_warm(
        self, spec: CellSpec, grant: CellGrant, warm: WorkerProc | None, warm_key: EnvKey | None
    ) -> tuple[CellRun, WorkerProc | None, EnvKey | None]:
        key = env_key(spec)
        if warm is not None and (warm.dead or warm_key != key):
            warm.close()
            self.workers.discard(warm)
            warm = None
        if warm is None:
            warm, warm_key = self._spawn(spec.env, "warm"), key
        run = warm.run_cell(spec, params_for_child(spec, grant), grant, self._timeout(spec), self.stop)
        if warm.dead:
            self.workers.discard(warm)
            warm = None
            if not (run.stopped or run.budget_stopped):
                self._count_restart()
        return run, warm, warm_key

    def _count_restart(self) -> None:
        with self.cond:
            self.restarts += 1
            self.report.worker_restarts = self.restarts
        if self.restarts == self.cfg.max_restarts:
            log.warning("warm workers crashed %d times; running the remaining cells isolated", self.restarts)

    def _run_one(
        self, spec: CellSpec, grant: CellGrant, warm: WorkerProc | None, warm_key: EnvKey | None
    ) -> tuple[WorkerProc | None, EnvKey | None]:
        cfg = self.cfg
        isolated = spec.isolate or cfg.isolate_all or self.restarts >= cfg.max_restarts
        kind: WorkerKind = "isolated" if isolated else "warm"
        try:
            if isolated:
                run = self._run_isolated(spec, grant)
            else:
                run, warm, warm_key = self._run_warm(spec, grant, warm, warm_key)
        except OSError as exc:
            log.error("could not start a sandboxed child for %s: %s", spec.id, exc)
            self.not_run(spec.id, f"could not start a child: {exc}")
            return warm, warm_key
        if run.stopped:
            self.not_run(spec.id, "interrupted")
            return warm, warm_key
        note = grant.note()
        if note:
            run.notes.setdefault("_memory_limits", note)
        result = build_result(spec, run, kind, cfg.excerpt_chars)
        confirm = cfg.confirm_crashes and not (self.stop.is_set() or run.budget_stopped)
        if kind == "warm" and run.done is None and confirm:
            result = self._confirm_crash(spec, grant, result)
        self.record(result)
        return warm, warm_key

    def _confirm_crash(self, spec: CellSpec, grant: CellGrant, warm_result: CellResult) -> CellResult:
        """Re-run a cell that took a warm worker down in a fresh child; keep the warm result as a detail."""
        run = self._run_isolated(spec, grant)
        if run.stopped:
            return warm_result
        again = build_result(spec, run, "isolated", self.cfg.excerpt_chars)
        again.details["warm_result"] = {
            "outcome": warm_result.outcome.value,
            "root_cause": warm_result.root_cause,
            "signal": warm_result.signal,
            "exit_code": warm_result.exit_code,
        }
        return again

    def kill_all(self) -> None:
        for w in list(self.workers):
            with contextlib.suppress(Exception):
                w.kill_now()
