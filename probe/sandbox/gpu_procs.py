"""Which processes hold a GPU (``nvidia-smi --query-compute-apps``), and the after-cell check that none
of a finished cell's processes still does.

The runner tears a cell's whole process tree down (group kill + the ``PROBE_CELL_TOKEN`` sweep of
:mod:`probe.sandbox.procs`; a tensor-parallel engine's rank processes inherit the token). A process
killed in the middle of a driver call can still be listed for a moment, and one that escaped both the
group and the token (a cleared environment after ``setsid``) would keep its GPU memory for good. So,
after every torn-down tree, :func:`check_after_cell` lists the compute apps and treats as the cell's
leftovers the listed pids that were seen in the cell's tree or that carry its worker's token, kills
them and waits until the driver no longer lists them. Without ``nvidia-smi`` (CPU hosts, tests) the
check is skipped with its reason. Linux only, like :mod:`probe.sandbox.procs`.

Caveat: in a container without the host's pid namespace ``nvidia-smi`` may list host pids; they do not
match the cell's pids and are then counted as ``foreign`` (nothing is killed).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probe.sandbox import procs

log = logging.getLogger(__name__)

QUERY = ["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"]
SMI_TIMEOUT_S = 10.0
#: how long a killed leftover may stay listed before the check gives up on it
RELEASE_WAIT_S = 10.0


@dataclass(frozen=True)
class GpuApp:
    """One row of ``nvidia-smi --query-compute-apps``."""

    pid: int
    process_name: str
    used_memory: str

    def as_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "process_name": self.process_name, "used_memory": self.used_memory}


@dataclass
class GpuCheck:
    """The after-cell check: ``skipped`` (why) or what was listed, which of it was the cell's, killed."""

    skipped: str | None = None
    leftovers: list[GpuApp] = field(default_factory=list)
    still_listed: list[int] = field(default_factory=list)
    foreign: int = 0

    @property
    def clean(self) -> bool:
        return self.skipped is None and not self.leftovers

    def details(self) -> dict[str, Any]:
        """What a cell's result records (``details.gpu_check``)."""
        if self.skipped:
            return {"skipped": self.skipped}
        out: dict[str, Any] = {"clean": self.clean, "leftovers": len(self.leftovers)}
        if self.still_listed:
            out["still_listed"] = self.still_listed
        if self.foreign:
            out["foreign_pids"] = self.foreign
        return out


class SmiUnavailable(Exception):
    """``nvidia-smi`` is absent, timed out or failed (the message says which)."""


def parse_compute_apps(text: str) -> list[GpuApp]:
    """Rows ``pid, process_name, used_memory`` (csv, no header); malformed rows are dropped."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        out.append(GpuApp(int(parts[0]), ",".join(parts[1:-1]), parts[-1]))
    return out


def query_compute_apps(timeout_s: float = SMI_TIMEOUT_S) -> list[GpuApp]:
    """The processes ``nvidia-smi`` lists as holding a GPU; raises :class:`SmiUnavailable`."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        raise SmiUnavailable("nvidia-smi not found on PATH")
    try:
        proc = subprocess.run([exe, *QUERY], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise SmiUnavailable(f"nvidia-smi did not answer within {timeout_s:.0f} s") from None
    except OSError as exc:
        raise SmiUnavailable(f"nvidia-smi could not run: {exc}") from None
    if proc.returncode != 0:
        raise SmiUnavailable(f"nvidia-smi exit {proc.returncode}: {proc.stderr.strip()[:200]}")
    return parse_compute_apps(proc.stdout)


def visible_gpu_count(timeout_s: float = SMI_TIMEOUT_S) -> int | None:
    """GPUs this process may use: ``nvidia-smi -L`` rows, narrowed by ``CUDA_VISIBLE_DEVICES`` when it
    is set; None when nvidia-smi cannot tell (no torch import: the planner runs in the parent)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        proc = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    listed = sum(1 for line in proc.stdout.splitlines() if line.startswith("GPU "))
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return listed
    wanted: list[str] = []
    for item in env.split(","):
        item = item.strip()
        if not item or item.startswith("-"):
            break  # CUDA stops at the first invalid entry
        wanted.append(item)
    return min(listed, len(wanted))


def _env_token(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return None
    needle = f"{procs.TOKEN_VAR}=".encode()
    for item in env.split(b"\0"):
        if item.startswith(needle):
            return item[len(needle) :].decode(errors="replace")
    return None


def _is_ours(pid: int, cell_pids: set[int], token: str) -> bool:
    if pid in cell_pids:
        return True
    found = _env_token(pid)
    return bool(token) and found is not None and found.startswith(token)


def check_after_cell(
    cell_pids: Iterable[int],
    token: str,
    *,
    wait_s: float = RELEASE_WAIT_S,
    timeout_s: float = SMI_TIMEOUT_S,
) -> GpuCheck:
    """After a cell's tree was torn down: no listed GPU process may be one of ``cell_pids`` (every pid
    seen in the tree) or carry ``token`` (the worker's, a prefix of its cells' tokens). Leftovers are
    SIGKILLed and the listing polled until they are gone or ``wait_s`` passed."""
    seen = set(cell_pids)
    try:
        apps = query_compute_apps(timeout_s)
    except SmiUnavailable as exc:
        return GpuCheck(skipped=str(exc))
    check = GpuCheck()
    for app in apps:
        if _is_ours(app.pid, seen, token):
            check.leftovers.append(app)
        elif not Path(f"/proc/{app.pid}").exists():
            check.foreign += 1
    if not check.leftovers:
        return check
    pids = {a.pid for a in check.leftovers}
    log.warning("GPU still held by %d process(es) of a finished cell: %s; killing", len(pids), sorted(pids))
    deadline = time.monotonic() + wait_s
    while True:
        procs.signal_pids([p for p in pids if procs.pid_alive(p)], signal.SIGKILL)
        try:
            listed = {a.pid for a in query_compute_apps(timeout_s)} & pids
        except SmiUnavailable:
            listed = {p for p in pids if procs.pid_alive(p)}
        if not listed or time.monotonic() >= deadline:
            check.still_listed = sorted(listed)
            return check
        time.sleep(0.2)
