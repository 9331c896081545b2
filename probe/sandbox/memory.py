"""Memory policy for parallel cells: a device-memory budget (discrete GPUs) and a host-memory
guard on unified-memory devices (Jetson Thor sm_110, DGX Spark GB10 sm_121), where the GPU has
no memory of its own and a probe that takes too much starves — or hard-crashes — the host.

The parent never imports torch: device memory comes from ``nvidia-smi`` (with a timeout).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import dataclass, field, fields

log = logging.getLogger(__name__)

GIB = 1024**3


@dataclass(frozen=True)
class DeviceMemory:
    """What the parent learned about the GPU(s) without importing torch."""

    unified: bool
    free_gib: float | None = None
    total_gib: float | None = None
    compute_cap: str | None = None
    name: str | None = None
    source: str = "none"


def read_meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes (keys MemTotal, MemAvailable, ...)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    except OSError:
        pass
    return out


def _catalog_unified(compute_cap: str | None) -> bool:
    if not compute_cap:
        return False
    try:
        major, _, minor = compute_cap.strip().partition(".")
        sm = int(major) * 10 + int(minor or 0)
        from probe.catalog.gpus import catalog

        gpu = catalog().by_sm(sm)
        return bool(gpu and gpu.unified_memory)
    except Exception:  # a catalog problem must not stop a run; fall back to nvidia-smi's answer
        log.debug("could not look up compute capability %r in the GPU catalog", compute_cap, exc_info=True)
        return False


def _num(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def detect_device_memory(timeout_s: float = 10.0) -> DeviceMemory:
    """Query GPU 0 with ``nvidia-smi`` (MiB figures). ``[N/A]`` memory or a unified-memory GPU in
    the catalog → ``unified=True``. No nvidia-smi, or it fails → ``DeviceMemory(unified=False)``."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return DeviceMemory(unified=False, source="no nvidia-smi")
    try:
        proc = subprocess.run(
            [exe, "--query-gpu=name,compute_cap,memory.total,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("nvidia-smi failed (%s); no device-memory budget", exc)
        return DeviceMemory(unified=False, source=f"nvidia-smi failed: {exc}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        return DeviceMemory(unified=False, source=f"nvidia-smi exit {proc.returncode}")
    parts = [p.strip() for p in lines[0].split(",")]
    while len(parts) < 4:
        parts.append("")
    name, cc, total, free = parts[:4]
    total_mib, free_mib = _num(total), _num(free)
    unified = _catalog_unified(cc) or total_mib is None or total_mib == 0
    return DeviceMemory(
        unified=unified,
        free_gib=None if free_mib is None else free_mib / 1024,
        total_gib=None if total_mib is None else total_mib / 1024,
        compute_cap=cc or None,
        name=name or None,
        source="nvidia-smi",
    )


@dataclass(frozen=True)
class UnifiedShare:
    """A cell's share of a unified-memory device (all None: MemTotal unknown, no limits)."""

    mem_share_gib: float | None = None
    gpu_memory_utilization: float | None = None
    host_available_gib: float | None = None
    host_reserve_gib: float | None = None
    rss_cap_bytes: float | None = None
    host_critical_bytes: float | None = None

    def as_dict(self) -> dict[str, float]:
        """The share as journaled (``details.notes._memory_limits``), in field order."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}


@dataclass
class MemoryPolicy:
    """Decides, per cell, whether it may start now and what memory it may use.

    Discrete GPU: the sum of running cells' ``params["mem_gib"]``, plus ``worker_overhead_gib`` for
    each of them (a CUDA context, the caching allocator's slack, buffers a warm worker keeps between
    cells), stays within ``budget_gib``.
    Unified memory: before each cell, read MemAvailable; the cell's share is
    ``(MemAvailable - reserve) / free_slots``; the reserve is ``max(reserve_gib, reserve_frac *
    MemTotal)``. The share is handed to the probe (``gpu_memory_utilization`` = share / MemTotal,
    never above (MemTotal - reserve) / MemTotal) and enforced: the runner kills a cell whose tree RSS
    exceeds its share, or any cell while host MemAvailable is below half the reserve (→ ``oom``).
    """

    unified: bool = False
    budget_gib: float | None = None
    reserve_gib: float = 8.0
    reserve_frac: float = 0.15
    meminfo: dict[str, int] = field(default_factory=dict)
    #: per running cell, on top of its estimate. H200 + vLLM 0.26, -j 4: two E=512 MoE cells (estimate
    #: 56 GiB, measured peak allocation 41-48 GiB) beside two small ones left 9 GiB of 140 free, so
    #: counting estimates alone admitted a cell that then went OOM
    worker_overhead_gib: float = 6.0

    @property
    def host_total_gib(self) -> float:
        info = self.meminfo or read_meminfo()
        return info.get("MemTotal", 0) / GIB

    def reserve(self) -> float:
        return max(self.reserve_gib, self.reserve_frac * self.host_total_gib)

    def fits(self, mem_gib: float, running_gib: float, running: int) -> bool:
        """Discrete budget check (a cell alone always fits: it would otherwise never run)."""
        if running == 0 or self.budget_gib is None:
            return True
        return running_gib + mem_gib + (running + 1) * self.worker_overhead_gib <= self.budget_gib

    def unified_limits(self, mem_gib: float | None, free_slots: int, running: int) -> UnifiedShare | None:
        """Limits for a cell on a unified-memory device, or None if it should wait for running cells."""
        info = self.meminfo or read_meminfo()
        total = info.get("MemTotal", 0) / GIB
        avail = info.get("MemAvailable", 0) / GIB
        reserve = max(self.reserve_gib, self.reserve_frac * total)
        share = max(0.0, (avail - reserve) / max(1, free_slots))
        if mem_gib is not None and mem_gib > share and running > 0:
            return None
        if total <= 0:
            return UnifiedShare()
        cap = max(0.0, (total - reserve) / total)
        util = min(cap, share / total)
        return UnifiedShare(
            mem_share_gib=round(share, 3),
            gpu_memory_utilization=float(f"{max(0.0, util):.2f}".rstrip("0").rstrip(".") or 0),
            host_available_gib=round(avail, 3),
            host_reserve_gib=round(reserve, 3),
            rss_cap_bytes=float(int(share * GIB)),
            host_critical_bytes=float(int(reserve / 2 * GIB)),
        )
