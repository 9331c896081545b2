"""The runner's knobs (``RunnerConfig``), shared by the scheduler and the worker process."""

from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass, field

from probe.sandbox.capture import DEFAULT_HEAD, DEFAULT_TAIL
from probe.sandbox.memory import MemoryPolicy


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
