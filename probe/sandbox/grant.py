"""What the scheduler grants one running cell (memory, exclusivity), typed; runtime only, never planned."""

from __future__ import annotations

from dataclasses import dataclass

from probe.sandbox.memory import UnifiedShare


@dataclass(frozen=True)
class CellGrant:
    """``reserved_gib`` counts against the discrete budget while the cell runs; ``exclusive``: nothing
    else starts beside it; ``share``: its part of a unified-memory device; ``rss_cap_bytes``: the
    child tree RSS above which the parent kills it (→ ``oom``)."""

    reserved_gib: float = 0.0
    exclusive: bool = False
    share: UnifiedShare | None = None
    rss_cap_bytes: float | None = None

    @property
    def gpu_memory_utilization(self) -> float | None:
        return self.share.gpu_memory_utilization if self.share else None

    @property
    def host_critical_bytes(self) -> float | None:
        return self.share.host_critical_bytes if self.share else None

    def child_limits(self) -> dict[str, float]:
        """What the child's ``ProbeContext`` is told (``gpu_memory_utilization``, ``mem_share_gib``)."""
        if self.share is None:
            return {}
        return {
            k: v for k, v in self.share.as_dict().items() if k in ("gpu_memory_utilization", "mem_share_gib")
        }

    def note(self) -> dict[str, float]:
        """Journaled as ``details.notes._memory_limits`` (empty: nothing to note)."""
        out = self.share.as_dict() if self.share else {}
        if self.rss_cap_bytes is not None:
            out["rss_cap_bytes"] = self.rss_cap_bytes
        return out
