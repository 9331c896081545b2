"""Run a plan of cells, journal every result and publish the matrix: the library entry point of ``probe run``.

    from probe.probes.planner import PlanOptions, build_plan
    from probe.run import RunOptions, run_plan

    report = run_plan(RunOptions(cells=tuple(build_plan(PlanOptions(models=("122b",)))),
                                 journal="run.jsonl", output="matrix.json", jobs=2))
    report.results      # every plan cell the journal holds (this call's and, with resume, earlier ones)
    report.not_run      # cell id -> why it was not run (empty when every cell ran)

Each cell runs sandboxed (:mod:`probe.sandbox.runner`: warm workers, per-cell limits, crashes contained);
every result is appended to the journal and fsync'ed, so ``resume=True`` after a crash or a kill re-runs
only cells without a row. The GPU-memory budget comes from ``gpu_mem_budget_gib`` or the free memory
``nvidia-smi`` reports (unified-memory devices: the host-memory policy). ``warm_jit`` first compiles the
plan's JIT modules (:mod:`probe.probes.jit_warm`), all at once, into ``JOURNAL.warm.jsonl``. An interrupt
(Ctrl-C, or SIGTERM with ``stop_on_sigterm``) stops the run without recording the cells in flight,
writes the matrix of what was measured (``partial``) and raises :class:`probe.errors.RunInterrupted`,
which carries the report. Errors are typed (:mod:`probe.errors`): an empty plan or a journal that exists
without ``resume`` is a ``UsageError``, an unwritable journal or a failed runner an ``InfraError``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probe.errors import InfraError, RunInterrupted, UsageError

if TYPE_CHECKING:
    from probe.cells import CellResult, CellSpec
    from probe.sandbox.config import RunnerConfig
    from probe.sandbox.journal import Journal
    from probe.sandbox.memory import MemoryPolicy

log = logging.getLogger(__name__)

#: called after each cell: (result, how many cells of this phase are done, how many the phase runs)
Progress = Callable[["CellResult", int, int], None]


@dataclass(frozen=True)
class RunOptions:
    """What to run and how (the ``probe run`` flags, typed)."""

    cells: tuple[CellSpec, ...]
    journal: Path | str = "probe-journal.jsonl"
    resume: bool = False  # continue an existing journal: skip the cells it already has
    jobs: int = 1  # cells at once
    gpu_mem_budget_gib: float | None = None  # None: free GPU memory from nvidia-smi
    host_reserve_gib: float = 8.0  # unified memory: always left to the host
    timeout_s: float | None = None  # per-cell limit for every cell (None: each cell's own)
    jit_timeout_s: float = 1200.0  # extra seconds a cell may spend JIT-compiling
    warm_jit: bool = False  # compile the plan's JIT modules first, in parallel
    grace_s: float = 5.0  # between SIGTERM and SIGKILL of a cell that timed out
    isolate_all: bool = False  # a fresh child per cell
    confirm_crashes: bool = False  # re-run a cell that crashed a warm worker once, isolated
    output: Path | str | None = None  # write the matrix here at the end
    image: str | None = None  # name of the image under test (provenance)
    stop_on_sigterm: bool = True  # SIGTERM stops the run as Ctrl-C does (main thread only)
    progress: Progress | None = field(default=None, compare=False)


@dataclass(frozen=True)
class RunReport:
    """What a :func:`run_plan` call did."""

    run_id: str
    planned: int
    journal: Path
    results: tuple[CellResult, ...]  # the plan's cells in the journal, in journal order
    ran: tuple[CellResult, ...]  # the cells this call ran
    not_run: Mapping[str, str]  # cell id -> why it was not run
    matrix: Path | None = None  # the matrix written, if any
    note: str = ""  # the matrix's provenance note
    interrupted: bool = False
    warm: tuple[CellResult, ...] = ()  # the JIT pre-pass (not matrix cells)

    @property
    def tally(self) -> dict[str, int]:
        """Cells per outcome, sorted by outcome name."""
        return dict(sorted(Counter(r.outcome.value for r in self.results).items()))

    @property
    def probe_errors(self) -> tuple[str, ...]:
        """Cells that failed inside probe's own code (``details.probe_error``: most likely probe bugs)."""
        return tuple(r.id for r in self.results if r.details.get("probe_error"))


@dataclass
class _Run:
    """The state of one call, for the finishing steps."""

    opts: RunOptions
    specs: list[CellSpec]
    journal: Journal
    run_id: str
    note: str
    ran: list[CellResult] = field(default_factory=list)
    warm: list[CellResult] = field(default_factory=list)


def load_plan_file(path: str | Path) -> list[CellSpec]:
    """Cells of a plan file: a JSON list of ``CellSpec`` objects (or ``{"cells": [...]}``)."""
    import json

    from pydantic import ValidationError

    from probe.cells import CellSpec
    from probe.errors import BadInputError

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise BadInputError(f"no such plan file: {path}")
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInputError(f"cannot read plan file {path}: {exc}")
    cells = data.get("cells") if isinstance(data, dict) else data
    if not isinstance(cells, list):
        raise BadInputError(f'plan file {path} must hold a JSON list of cells (or {{"cells": [...]}})')
    try:
        return [CellSpec.model_validate(c) for c in cells]
    except ValidationError as exc:
        raise BadInputError(f"plan file {path} has an invalid cell: {exc}")


def memory_policy(opts: RunOptions) -> tuple[MemoryPolicy, dict[str, Any]]:
    """The scheduler's memory policy and the device facts it came from (for the journal header)."""
    from probe.sandbox.memory import MemoryPolicy, detect_device_memory

    dev = detect_device_memory()
    if dev.unified:
        policy = MemoryPolicy(unified=True, reserve_gib=opts.host_reserve_gib)
    else:
        budget = opts.gpu_mem_budget_gib if opts.gpu_mem_budget_gib else dev.free_gib
        policy = MemoryPolicy(budget_gib=budget, reserve_gib=opts.host_reserve_gib)
    return policy, {k: v for k, v in asdict(dev).items() if v is not None}


def open_journal(opts: RunOptions, specs: list[CellSpec], device: dict[str, Any]) -> tuple[Journal, str]:
    """The journal (new, or resumed) and the run id its cells' processes carry; on resume, processes
    left over from the interrupted run are killed."""
    import platform

    from probe.sandbox import procs
    from probe.sandbox.journal import Journal, plan_hash

    run_meta = {
        "run_id": uuid.uuid4().hex[:12],
        "plan_hash": plan_hash(specs),
        "image": opts.image,
        "host": platform.node(),
        "device": device,
        "cells": len(specs),
    }
    try:
        journal = Journal.open(opts.journal, resume=opts.resume, run_meta=run_meta)
    except OSError as exc:
        raise InfraError(f"cannot write the journal {opts.journal}: {exc}") from exc
    run_id = journal.run_id or str(run_meta["run_id"])
    if opts.resume:
        left = procs.kill_strays(f"{run_id}-", prefix=True)
        if left:
            log.warning("killed %d process(es) left over from the interrupted run %s", len(left), run_id)
    return journal, run_id


def _counting(progress: Progress | None, total: int, sink: list[CellResult]) -> Callable[[CellResult], None]:
    def on_result(r: CellResult) -> None:
        sink.append(r)
        if progress is not None:
            progress(r, len(sink), total)

    return on_result


@contextlib.contextmanager
def sigterm_as_interrupt(enabled: bool = True) -> Iterator[None]:
    """SIGTERM (``timeout``, a CI job's cancel, a batch system) stops the run as Ctrl-C does: the cells in
    flight are killed and left un-journaled (a resume re-runs them), never recorded as crashes."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def warm_jit(run: _Run, cfg: RunnerConfig) -> None:
    """The JIT pre-pass (:mod:`probe.probes.jit_warm`): its cells run isolated, all at once, in a journal
    of their own (they are not matrix cells); a failed build is recorded there and the run goes on."""
    from probe.probes.jit_warm import warm_specs
    from probe.sandbox.journal import Journal
    from probe.sandbox.runner import run_cells

    warm = warm_specs(run.specs)
    if not warm:
        return
    journal = Journal.open(
        f"{run.opts.journal}.warm.jsonl", resume=True, run_meta={"run_id": f"{cfg.run_id}w"}
    )
    try:
        jobs = min(len(warm), os.cpu_count() or 1)  # each compiles on its own core(s)
        on_result = _counting(run.opts.progress, len(warm), run.warm)
        run_cells(
            warm, replace(cfg, jobs=jobs, run_id=f"{cfg.run_id}w"), journal=journal, on_result=on_result
        )
    finally:
        journal.close()


def _runner_config(opts: RunOptions, policy: MemoryPolicy, run_id: str) -> RunnerConfig:
    from probe.sandbox.runner import RunnerConfig

    return RunnerConfig(
        jobs=opts.jobs,
        grace_s=opts.grace_s,
        timeout_override_s=opts.timeout_s,
        isolate_all=opts.isolate_all,
        confirm_crashes=opts.confirm_crashes,
        memory=policy,
        run_id=run_id,
        jit_timeout_s=opts.jit_timeout_s,
    )


def _finish(run: _Run, not_run: Mapping[str, str], *, interrupted: bool = False) -> RunReport:
    """Close the journal and write the matrix of what was measured (also after an interrupt: the matrix
    then says ``partial``)."""
    from probe.matrix.build import build_matrix, collect_provenance, write_matrix

    run.journal.close()
    plan_ids = {s.id for s in run.specs}
    results = tuple(r for r in run.journal.results if r.id in plan_ids)
    note = run.note + ("; interrupted" if interrupted else "")
    matrix: Path | None = None
    if run.opts.output:
        provenance = collect_provenance(run.opts.image)
        provenance["note"] = note
        built = build_matrix(list(results), provenance=provenance, static=None, cells_planned=len(run.specs))
        matrix = write_matrix(built, run.opts.output)
    return RunReport(
        run_id=run.run_id,
        planned=len(run.specs),
        journal=Path(run.opts.journal),
        results=results,
        ran=tuple(run.ran),
        not_run=dict(not_run),
        matrix=matrix,
        note=note,
        interrupted=interrupted,
        warm=tuple(run.warm),
    )


def run_plan(opts: RunOptions) -> RunReport:
    """Run ``opts.cells`` (see the module docstring); raises ``RunInterrupted`` after writing what was
    measured when stopped, ``UsageError`` / ``BadInputError`` / ``InfraError`` before or instead of it."""
    from probe.sandbox.journal import plan_hash
    from probe.sandbox.runner import raise_nofile_limit, run_cells

    specs = list(opts.cells)
    if not specs:
        raise UsageError("the plan is empty: nothing to run")
    policy, device = memory_policy(opts)
    journal, run_id = open_journal(opts, specs, device)
    raise_nofile_limit()
    cfg = _runner_config(opts, policy, run_id)
    started = journal.header.get("started_at") or datetime.now(timezone.utc).isoformat(timespec="seconds")
    note = f"probe run {run_id}; plan {plan_hash(specs)}; journal {opts.journal}; started {started}"
    run = _Run(opts, specs, journal, run_id, note)
    todo = sum(1 for s in specs if s.id not in journal.done_ids)
    try:
        with sigterm_as_interrupt(opts.stop_on_sigterm):
            if opts.warm_jit:
                warm_jit(run, cfg)
            report = run_cells(specs, cfg, journal=journal, on_result=_counting(opts.progress, todo, run.ran))
    except OSError as exc:
        journal.close()
        raise InfraError(f"the runner failed: {exc}") from exc
    except KeyboardInterrupt:
        done = journal.done_ids
        left = {s.id: "interrupted" for s in specs if s.id not in done}
        raise RunInterrupted(_finish(run, left, interrupted=True)) from None
    return _finish(run, report.not_run)
