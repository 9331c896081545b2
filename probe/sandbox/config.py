"""The runner's knobs (``RunnerConfig``), shared by the scheduler and the worker process."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from probe.sandbox.capture import DEFAULT_HEAD, DEFAULT_TAIL
from probe.sandbox.memory import MemoryPolicy

if TYPE_CHECKING:
    from probe.sandbox.jit import JitProgress
    from probe.sandbox.prereq import Prerequisites


@dataclass(frozen=True)
class Budget:
    """The time budget of a run: every cell has ended by ``deadline`` (``time.monotonic()``). A cell
    whose estimate (seconds, by id) exceeds what is left is not started; a cell still running at the
    deadline is stopped. Both are recorded ``not_run`` with the reason, never as failures."""

    deadline: float
    estimates: Mapping[str, float] = field(default_factory=dict)

    def left(self, now: float | None = None) -> float:
        return self.deadline - (time.monotonic() if now is None else now)


@dataclass(frozen=True)
class Heartbeat:
    """A cell still running (for progress lines every ``RunnerConfig.heartbeat_s``)."""

    cell_id: str
    elapsed_s: float
    phase: str | None
    limit_s: float
    jit: JitProgress | None = None  # set while it compiles


@dataclass
class RunnerConfig:
    """Knobs of the runner. Defaults suit ``probe run``."""

    jobs: int = 1
    grace_s: float = 5.0
    timeout_override_s: float | None = None
    isolate_all: bool = False
    max_restarts: int = 16
    confirm_crashes: bool = False
    head_bytes: int = DEFAULT_HEAD
    tail_bytes: int = DEFAULT_TAIL
    sample_interval_s: float = 0.1
    python: str = sys.executable
    base_env: dict[str, str] | None = None
    memory: MemoryPolicy = field(default_factory=MemoryPolicy)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    excerpt_chars: int = 6000
    #: kill a cell (→ ``oom``) whose child tree RSS exceeds this many bytes (None: no cap)
    rss_cap_bytes: int | None = None
    #: directory of the cross-process GPU timing lock (``probe.sandbox.gpulock``); ``run_cells``
    #: makes a private one when ``jobs`` > 1 and none is given
    gpu_lock_dir: str | None = None
    #: extra seconds a cell may spend JIT-compiling beyond its own limit (``probe.sandbox.jit``); 0: none
    jit_timeout_s: float = 1200.0
    #: the run's time budget (None: none)
    budget: Budget | None = None
    #: cell id -> value tier (smaller first): a warm worker prefers cells of its environment only within
    #: the tier of the first cell that may start
    tiers: Mapping[str, int] | None = None
    #: cells that wait for another result first (the JIT pre-pass's modules), see ``probe.sandbox.prereq``
    prerequisites: Prerequisites | None = None
    #: every this many seconds a running cell is reported to ``on_heartbeat`` (0: never)
    heartbeat_s: float = 30.0
    on_heartbeat: Callable[[Heartbeat], None] | None = None
