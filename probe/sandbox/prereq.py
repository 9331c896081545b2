"""Cells that wait for another result before they start: the modules the JIT pre-pass builds.

A cell that needs a JIT module (FlashInfer's CUTLASS MoE module, a FlashInfer attention layout) waits
until the pre-pass has built it, while every cell that needs no compile runs beside the pre-pass. When
the module's build was stopped unfinished (its compile budget, the run's time budget), the cells that
need it are not run (they would only compile the same module again): ``not_run`` with the build's
reason. A build that failed lets them run: each then records its own failure.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Literal

State = Literal["ready", "wait", "drop"]


class Prerequisites:
    """``needs``: cell id -> the id of the result it waits for. Thread-safe (slot threads ask, the
    pre-pass thread settles)."""

    def __init__(self, needs: Mapping[str, str], expected_s: Mapping[str, float] | None = None) -> None:
        self._needs = dict(needs)
        self._settled: dict[str, str | None] = {}
        self._lock = threading.Lock()
        start = time.monotonic()
        #: when each prerequisite is expected to settle (``time.monotonic()``), from its estimate
        self._expected = {pid: start + s for pid, s in (expected_s or {}).items()}

    def settle(self, pid: str, not_run: str | None = None) -> None:
        """``pid`` has a result: the cells waiting for it may start (``not_run``: they are not run, with
        this reason)."""
        with self._lock:
            self._settled.setdefault(pid, not_run)

    def state(self, cell_id: str) -> tuple[State, str | None]:
        """("ready", None) | ("wait", the id it waits for) | ("drop", why it is not run)."""
        pid = self._needs.get(cell_id)
        if pid is None:
            return "ready", None
        with self._lock:
            if pid not in self._settled:
                return "wait", pid
            why = self._settled[pid]
        return ("ready", None) if why is None else ("drop", why)

    def needs(self, cell_id: str) -> str | None:
        return self._needs.get(cell_id)

    def due_within(self, cell_id: str, seconds: float) -> bool:
        """Whether what ``cell_id`` waits for is expected within ``seconds`` (unknown: no)."""
        pid = self._needs.get(cell_id)
        due = self._expected.get(pid) if pid is not None else None
        return due is not None and due - time.monotonic() <= seconds

    def pending(self) -> list[str]:
        """Prerequisites not settled yet."""
        with self._lock:
            return sorted({p for p in self._needs.values() if p not in self._settled})
