"""Run probe cells in sandboxed children: warm workers, per-cell timeouts, crash containment.

Model (after pytest-xdist): a *warm* worker (``python -m probe.sandbox.worker_child``) imports probe
targets once and runs cells in sequence, receiving specs and sending results as JSON lines over
private pipes. The parent enforces each cell's timeout, samples the child tree's RSS, and captures
stdout+stderr into bounded head+tail buffers. If the worker dies or hangs mid-cell, *that* cell is
recorded from what the parent knows (last phase, output since the cell started, exit status →
classifier) and the remaining cells go to a fresh worker. Cells with ``isolate=True`` always get a
fresh child; cells are grouped by ``env`` so a warm worker is reused for every cell of the same
environment.

The pieces: :mod:`probe.sandbox.worker_parent` (the parent's side of one worker process, the timeout
decision :func:`~probe.sandbox.cellrun.cell_timed_out`), :mod:`probe.sandbox.results` (observation
→ ``CellResult``), :mod:`probe.sandbox.scheduler` (memory budget, slots). This module is the entry
point: :func:`run_cells`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable

from probe.cells import CellResult, CellSpec
from probe.errors import UsageError
from probe.sandbox.config import RunnerConfig
from probe.sandbox.journal import Journal
from probe.sandbox.scheduler import RunReport, Scheduler

__all__ = ["RunReport", "RunnerConfig", "check_specs", "raise_nofile_limit", "run_cells"]


def check_specs(specs: Iterable[CellSpec]) -> list[CellSpec]:
    out = list(specs)
    seen: set[str] = set()
    for s in out:
        if s.id in seen:
            raise UsageError(f"duplicate cell id in the plan: {s.id!r}")
        seen.add(s.id)
    return out


def run_cells(
    specs: Iterable[CellSpec],
    config: RunnerConfig | None = None,
    *,
    journal: Journal | None = None,
    on_result: Callable[[CellResult], None] | None = None,
    stop: threading.Event | None = None,
    annotate: Callable[[CellResult], None] | None = None,
) -> RunReport:
    """Run ``specs`` (skipping ids already in ``journal``) and return every result.

    ``journal`` is a :class:`probe.sandbox.journal.Journal` (or None); each result is appended and
    fsync'ed before the next cell is recorded. ``on_result`` is called after each cell (progress).
    Ctrl-C stops the run: running children are killed, their cells stay un-journaled (a resume re-runs
    them) and ``report.interrupted`` is set (the KeyboardInterrupt is re-raised after cleanup). Setting
    ``stop`` (from another thread) does the same without the exception: the cells not run are in
    ``report.not_run`` as "interrupted". ``annotate`` may add to each result before it is journaled.
    """
    cfg = config or RunnerConfig()
    if cfg.jobs < 1:
        raise UsageError(f"-j must be >= 1, got {cfg.jobs}")
    all_specs = check_specs(specs)
    report = RunReport()
    done_ids = set(journal.done_ids) if journal is not None else set()
    todo: list[CellSpec] = []
    for s in all_specs:
        if s.id in done_ids:
            report.already_done.append(s.id)
        else:
            todo.append(s)

    def sink(result: CellResult) -> None:
        sink_many([result])

    def sink_many(results: list[CellResult]) -> None:
        if annotate is not None:
            for r in results:
                annotate(r)
        if journal is not None:
            journal.extend(results)
        if on_result is not None:
            for r in results:
                on_result(r)

    lock_tmp: str | None = None
    if cfg.jobs > 1 and not cfg.gpu_lock_dir:
        lock_tmp = tempfile.mkdtemp(prefix=f"probe-gpulock-{cfg.run_id}-")
        cfg = dataclasses.replace(cfg, gpu_lock_dir=lock_tmp)
    try:
        return _run_scheduled(todo, cfg, (sink, sink_many), report, stop)
    finally:
        if lock_tmp:
            shutil.rmtree(lock_tmp, ignore_errors=True)


def _run_scheduled(
    todo: list[CellSpec],
    cfg: RunnerConfig,
    sinks: tuple[Callable[[CellResult], None], Callable[[list[CellResult]], None]],
    report: RunReport,
    stop: threading.Event | None,
) -> RunReport:
    sched = Scheduler(todo, cfg, sinks[0], report, stop, sinks[1])
    threads = [
        threading.Thread(target=sched.slot, name=f"probe-slot-{i}", daemon=True)
        for i in range(min(cfg.jobs, max(1, len(todo))))
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.2)
    except KeyboardInterrupt:
        report.interrupted = True
        sched.stop.set()
        sched.kill_all()
        for t in threads:
            t.join(timeout=30)
        for s in sched.pending:
            report.not_run.setdefault(s.id, "interrupted")
        raise
    if sched.errors:
        for s in sched.pending:
            report.not_run.setdefault(s.id, f"runner failed: {sched.errors[0]}")
        raise sched.errors[0]
    if sched.stop.is_set():
        report.interrupted = True
        for s in sched.pending:
            report.not_run.setdefault(s.id, "interrupted")
    return report


def raise_nofile_limit() -> None:
    """Pipes and /proc scans need descriptors; lift the soft limit to the hard one."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
