"""What the parent observes while one cell runs (:class:`CellRun`), and the decisions taken on it: the
cell has hung (:func:`cell_timed_out`), must die to protect the host (:func:`mem_kill_reason`), or is
still running and worth a progress line (:func:`heartbeat`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from probe.cell_params import CellBudget
from probe.sandbox import gpu_procs
from probe.sandbox.capture import HeadTail
from probe.sandbox.config import Heartbeat
from probe.sandbox.grant import CellGrant
from probe.sandbox.jit import CompileWatch
from probe.sandbox.memory import GIB, read_meminfo


@dataclass
class CellRun:
    """What the parent observed while one cell ran."""

    capture: HeadTail
    phase: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    done: dict[str, Any] | None = None
    timed_out: bool = False
    died: bool = False
    exit_code: int | None = None
    signal: str | None = None
    peak_rss: int = 0
    wall_s: float = 0.0
    mem_kill: str | None = None
    strays_killed: list[int] = field(default_factory=list)
    started_at: str = ""
    stopped: bool = False  # the prober was interrupted: the cell is not recorded
    #: the run's time budget ended while the cell ran: recorded ``not_run``
    budget_stopped: bool = False
    #: the child tree's pids at the last sample (what a "still compiling?" check would look at)
    tree_pids: list[int] = field(default_factory=list)
    #: compile activity of the cell; stretches its deadline while it compiles (up to ``--jit-timeout``)
    jit: CompileWatch | None = None
    #: every pid seen in the tree while the cell ran, and the after-teardown GPU check (gpu_procs)
    seen_pids: set[int] = field(default_factory=set)
    gpu_check: gpu_procs.GpuCheck | None = None


def cell_timed_out(run: CellRun, budget: CellBudget, now: float, deadline: float) -> bool:
    """The single place the runner decides that a cell has hung: ``now`` (monotonic) is past its
    ``deadline`` (start + the cell's or ``--timeout``'s limit). ``run`` carries the last phase, notes
    and the child tree's pids, ``budget`` the cell's own limits: a check whether the child is still
    compiling (a JIT budget) belongs here, and nowhere else: while the child compiles (compiler
    processes in its tree, JIT lines in its output) its deadline moves by the compile time, up to
    ``--jit-timeout``."""
    if run.jit is None:
        return now >= deadline
    declared = None
    if run.phase == "jit":  # the child compiles in-process (e.g. the driver's PTX JIT) and says what
        declared = str(run.notes.get("jit") or "in-process JIT (declared by the probe)")
    build_file = run.notes.get("jit_build_file")  # the child names the ninja file it builds
    if build_file:
        run.jit.add_build_file(str(build_file))
    run.jit.update(run.tree_pids, run.capture, now, declared=declared)
    return now >= run.jit.deadline(deadline)


def mem_kill_reason(rss: int, grant: CellGrant) -> str | None:
    """Why the cell must die now to protect the host (its RSS cap, host MemAvailable), or None."""
    cap = grant.rss_cap_bytes
    if cap and rss > cap:
        return (
            f"probe: child tree RSS {rss / GIB:.1f} GiB exceeded its unified-memory "
            f"share of {cap / GIB:.1f} GiB; killed"
        )
    critical = grant.host_critical_bytes
    if critical:
        avail = read_meminfo().get("MemAvailable")
        if avail is not None and avail < critical:
            return (
                f"probe: host MemAvailable fell to {avail / GIB:.1f} GiB "
                f"(< {critical / GIB:.1f} GiB); killed to protect the host"
            )
    return None


def heartbeat(run: CellRun, cell_id: str, elapsed_s: float, limit_s: float) -> Heartbeat:
    """A progress snapshot of a running cell (its compile's progress while it compiles)."""
    compiling = run.jit is not None and run.jit.compiling_now()
    return Heartbeat(cell_id, round(elapsed_s, 1), run.phase, limit_s,
                     run.jit.progress() if compiling and run.jit is not None else None)  # fmt: skip
