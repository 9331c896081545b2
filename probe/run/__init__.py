"""Run a plan of cells, journal every result and publish the matrix: the library entry point of ``probe run``.

    from probe.probes.planner import PlanOptions, build_plan
    from probe.run import RunOptions, run_plan

    report = run_plan(RunOptions(cells=tuple(build_plan(PlanOptions(models=("122b",)))),
                                 journal="run.jsonl", output="matrix.json", jobs=2, budget_s=600))
    report.results      # every plan cell the journal holds (this call's and, with resume, earlier ones)
    report.not_run      # cell id -> why it has no row at all (interrupted, could not start a child)

Each cell runs sandboxed (:mod:`probe.sandbox.runner`: warm workers, per-cell limits, crashes contained);
every result is appended to the journal and fsync'ed, so ``resume=True`` after a crash or a kill re-runs
only cells without a row (or with a ``not_run`` row). The GPU-memory budget comes from
``gpu_mem_budget_gib`` or the free memory ``nvidia-smi`` reports (unified-memory devices: the host-memory
policy). With ``priorities`` the cells run in order of value (:mod:`probe.run.order`); with ``budget_s``
the run ends in time: what does not fit is recorded ``not_run`` with the reason (:mod:`probe.run.planning`
says beforehand what will fit, from :mod:`probe.run.estimates`). ``reuse`` copies cells whose inputs did not
change from an earlier journal or matrix (:mod:`probe.run.reuse`); every result records its inputs
(``details.reuse``) for the next run. ``warm_jit`` compiles the plan's JIT modules in a pre-pass beside the
cells (:mod:`probe.run.prepass`), into ``JOURNAL.warm.jsonl``. An interrupt (Ctrl-C, or SIGTERM with
``stop_on_sigterm``) stops the run without recording the cells in flight, writes the matrix of what was
measured (``partial``) and raises :class:`RunInterrupted`, which carries the report. Errors are
typed (:mod:`probe.errors`): an empty plan or a journal that exists without ``resume`` is a ``UsageError``,
an unwritable journal or a failed runner an ``InfraError``.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probe.errors import EXIT_INTERRUPTED, InfraError, ProbeError, UsageError

if TYPE_CHECKING:
    from probe.cells import CellResult, CellSpec
    from probe.run.order import Priorities
    from probe.run.planning import RunPlan
    from probe.run.prepass import PrePass
    from probe.run.reuse import Environment
    from probe.sandbox.config import Heartbeat, RunnerConfig
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
    budget_s: float | None = None  # the whole run ends within this (None: no budget)
    budget_from: float | None = None  # time.monotonic() the budget counts from (None: this call)
    priorities: Priorities | None = None  # order the cells by value (None: the plan's order)
    estimates: tuple[str, ...] = ()  # journals / matrices of earlier runs: per-cell estimates
    reuse: str | None = None  # a journal or matrix: copy the cells whose inputs did not change
    python: str | None = None  # the interpreter the cells run in (and whose packages are digested)
    site_dirs: tuple[str, ...] | None = None  # its site-packages (None: asked from ``python``)
    heartbeat_s: float = 30.0  # a progress line for a cell running this long, and every as long again
    heartbeat: Callable[[Heartbeat], None] | None = field(default=None, compare=False)
    on_plan: Callable[[RunPlan], None] | None = field(default=None, compare=False)  # before any cell


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
    reused: tuple[CellResult, ...] = ()  # copied from the baseline (``reuse``)
    plan: RunPlan | None = None

    @property
    def tally(self) -> dict[str, int]:
        """Cells per outcome, sorted by outcome name."""
        return dict(sorted(Counter(r.outcome.value for r in self.results).items()))

    @property
    def probe_errors(self) -> tuple[str, ...]:
        """Cells that failed inside probe's own code (``details.probe_error``: most likely probe bugs)."""
        return tuple(r.id for r in self.results if r.details.get("probe_error"))


class RunInterrupted(ProbeError):
    """A run stopped by Ctrl-C or SIGTERM after writing what it had measured; ``report`` is the
    :class:`RunReport` of that partial run."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, report: RunReport) -> None:
        super().__init__("interrupted")
        self.report = report


@dataclass
class _Run:
    """The state of one call, for the finishing steps."""

    opts: RunOptions
    specs: list[CellSpec]
    journal: Journal
    run_id: str
    note: str
    plan: RunPlan
    ran: list[CellResult] = field(default_factory=list)
    warm: list[CellResult] = field(default_factory=list)
    reused: tuple[CellResult, ...] = ()


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


def open_journal(
    opts: RunOptions,
    specs: list[CellSpec],
    device: dict[str, Any],
    env: Environment | None = None,
    phash: str | None = None,
) -> tuple[Journal, str]:
    """The journal (new, or resumed) and the run id its cells' processes carry; on resume, processes
    left over from the interrupted run are killed. The header records the environment (reuse key)."""
    import platform

    from probe.sandbox import procs
    from probe.sandbox.journal import Journal, plan_hash

    run_meta = {
        "run_id": uuid.uuid4().hex[:12],
        "plan_hash": phash or plan_hash(specs),
        "image": opts.image,
        "host": platform.node(),
        "device": device,
        "cells": len(specs),
    }
    if env is not None:
        run_meta["environment"] = asdict(env)
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


def budget_reserve_s(budget_s: float, grace_s: float) -> float:
    """Seconds kept from the budget for stopping the cells in flight and writing the matrix."""
    return min(30.0, max(5.0, 0.05 * budget_s)) + grace_s


def _runner_config(opts: RunOptions, policy: MemoryPolicy, run_id: str, plan: RunPlan) -> RunnerConfig:
    from probe.sandbox.config import Budget
    from probe.sandbox.runner import RunnerConfig

    budget = None
    if opts.budget_s is not None:
        start = opts.budget_from if opts.budget_from is not None else time.monotonic()
        deadline = start + opts.budget_s - budget_reserve_s(opts.budget_s, opts.grace_s)
        budget = Budget(deadline, {c.spec.id: c.estimate_s for c in plan.cells})
    return RunnerConfig(
        jobs=opts.jobs,
        grace_s=opts.grace_s,
        timeout_override_s=opts.timeout_s,
        isolate_all=opts.isolate_all,
        confirm_crashes=opts.confirm_crashes,
        memory=policy,
        run_id=run_id,
        jit_timeout_s=opts.jit_timeout_s,
        python=opts.python or RunnerConfig.python,
        budget=budget,
        tiers=plan.tiers if opts.priorities is not None else None,
        heartbeat_s=opts.heartbeat_s,
        on_heartbeat=opts.heartbeat,
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
        env = run.plan.environment
        dists = dict(env.versions) if env is not None else None
        cuda = env.cuda if env else None
        provenance = collect_provenance(run.opts.image, dists=dists, torch_cuda=cuda, smi=run.plan.gpu)
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
        reused=run.reused,
        plan=run.plan,
    )


def environment_of(opts: RunOptions) -> tuple[Environment, dict[str, Any], list[str]]:
    """This host's environment (reuse key), the GPU facts it came from, and the site-packages of the
    interpreter the cells run in."""
    from probe.matrix.build import nvidia_smi
    from probe.run.digests import default_cache, import_path
    from probe.run.reuse import environment

    site = list(opts.site_dirs) if opts.site_dirs is not None else import_path(opts.python)
    smi = nvidia_smi()
    return environment(site, smi, default_cache()), smi, site


def prepare(opts: RunOptions) -> RunPlan:
    """The plan of ``opts`` without running it (``probe run --dry-run``)."""
    from probe.run.planning import make_plan

    env, smi, site = environment_of(opts)
    return make_plan(opts, env, smi, site)


def _start_prepass(run: _Run, cfg: RunnerConfig, stop: threading.Event) -> PrePass | None:
    from probe.run.prepass import plan_prepass, prepass_config, warm_journal_path

    if not run.opts.warm_jit:
        return None
    from probe.matrix.schema import cc_to_sm

    skip = {w.spec.id: w.skip for w in run.plan.warm if w.skip}
    expected = {w.spec.id: w.estimate_s for w in run.plan.warm}
    pre = plan_prepass([c.spec for c in run.plan.cells], cc_to_sm(run.plan.gpu.get("cc")), skip, expected)
    if pre is None:
        return None
    on_result = _counting(run.opts.progress, len(pre.specs), run.warm)
    pre.start(prepass_config(cfg, len(pre.specs)), warm_journal_path(run.opts.journal), stop, on_result)
    return pre


def run_plan(opts: RunOptions) -> RunReport:
    """Run ``opts.cells`` (see the module docstring); raises ``RunInterrupted`` after writing what was
    measured when stopped, ``UsageError`` / ``BadInputError`` / ``InfraError`` before or instead of it."""
    from probe.run.reuse import stamp
    from probe.sandbox.journal import plan_hash
    from probe.sandbox.runner import raise_nofile_limit, run_cells

    specs = list(opts.cells)
    if not specs:
        raise UsageError("the plan is empty: nothing to run")
    plan = prepare(opts)
    policy, device = memory_policy(opts)
    phash = plan_hash(specs)
    journal, run_id = open_journal(opts, specs, device, plan.environment, phash)
    journal.extend(r for r in plan.reused if r.id not in journal.done_ids)
    if opts.on_plan is not None:
        opts.on_plan(plan)
    raise_nofile_limit()
    cfg = _runner_config(opts, policy, run_id, plan)
    started = journal.header.get("started_at") or datetime.now(timezone.utc).isoformat(timespec="seconds")
    note = f"probe run {run_id}; plan {phash}; journal {opts.journal}; started {started}"
    run = _Run(opts, specs, journal, run_id, note, plan, reused=plan.reused)
    todo = [c.spec for c in plan.cells]
    left = sum(1 for s in todo if s.id not in journal.done_ids)
    env = plan.environment
    annotate = (lambda r: stamp(r, env, run_id)) if env is not None else None
    stop = threading.Event()
    pre: PrePass | None = None
    with shared_gpu_lock(cfg, opts.warm_jit) as cfg:
        try:
            with sigterm_as_interrupt(opts.stop_on_sigterm):
                pre = _start_prepass(run, cfg, stop)
                if pre is not None:
                    cfg = replace(cfg, prerequisites=pre.prerequisites)
                on_result = _counting(opts.progress, left, run.ran)
                report = run_cells(todo, cfg, journal=journal, on_result=on_result, annotate=annotate)
                stop.set()  # the pre-pass has nobody left to build for
                if pre is not None:
                    pre.join()
        except OSError as exc:
            stop.set()
            journal.close()
            raise InfraError(f"the runner failed: {exc}") from exc
        except KeyboardInterrupt:
            stop.set()
            if pre is not None:
                pre.join(30)
            done = journal.done_ids
            left_ids = {s.id: "interrupted" for s in specs if s.id not in done}
            raise RunInterrupted(_finish(run, left_ids, interrupted=True)) from None
    return _finish(run, report.not_run)


@contextlib.contextmanager
def shared_gpu_lock(cfg: RunnerConfig, beside: bool) -> Iterator[RunnerConfig]:
    """With a pre-pass beside the cells, one GPU timing lock for both (``probe.sandbox.gpulock``): a
    warm-up forward never overlaps a timed loop."""
    if not beside or cfg.gpu_lock_dir:
        yield cfg
        return
    import shutil
    import tempfile

    lock_dir = tempfile.mkdtemp(prefix=f"probe-gpulock-{cfg.run_id}-")
    try:
        yield replace(cfg, gpu_lock_dir=lock_dir)
    finally:
        shutil.rmtree(lock_dir, ignore_errors=True)
