"""Process bookkeeping from /proc: group / session members, token-marked strays, tree RSS, kills.

Linux only (probe runs where the GPUs are). Every sandboxed child gets a unique
``PROBE_CELL_TOKEN`` in its environment; descendants inherit it, so a grandchild that called
``setsid()`` (and left the child's process group) is still found by scanning ``/proc/*/environ``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

TOKEN_VAR = "PROBE_CELL_TOKEN"
RUN_VAR = "PROBE_RUN_ID"
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    state: str
    ppid: int
    pgid: int
    sid: int


def read_stat(pid: int) -> ProcInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    rparen = raw.rfind(b")")
    fields = raw[rparen + 2 :].split()
    try:
        return ProcInfo(pid, fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]))
    except (IndexError, ValueError):
        return None


def all_pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]  # noqa: PTH208 (hot path, names only)
    except OSError:
        return []


def members(*, pgid: int | None = None, sid: int | None = None, live_only: bool = True) -> list[int]:
    """Pids whose process group is ``pgid`` or whose session is ``sid`` (zombies excluded)."""
    out = []
    for pid in all_pids():
        info = read_stat(pid)
        if info is None or (live_only and info.state in ("Z", "X")):
            continue
        if (pgid is not None and info.pgid == pgid) or (sid is not None and info.sid == sid):
            out.append(pid)
    return out


def _read_environ(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return None


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _age_s(pid: int) -> float | None:
    """Seconds since ``pid`` started (``/proc/<pid>/stat`` field 22 against ``/proc/uptime``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        return uptime - int(raw[raw.rfind(b")") + 2 :].split()[19]) / _TICKS
    except (OSError, IndexError, ValueError):
        return None


def _mid_exec(pid: int, young_s: float) -> bool:
    """An empty environment on a young live user process: it is inside ``execve`` (the kernel sets
    the new image's environment pointers after the parent's ``Popen`` has already returned). Kernel
    threads (parent 0 or kthreadd, 2), zombies and older processes started without an environment
    also read empty: not these."""
    info = read_stat(pid)
    if info is None or info.state in ("Z", "X") or info.ppid in (0, 2) or pid == 2:
        return False
    age = _age_s(pid)
    return age is not None and age <= young_s


def _carries(env: bytes, needle: bytes, prefix: bool) -> bool:
    return any(item == needle or (prefix and item.startswith(needle)) for item in env.split(b"\0"))


def token_pids(
    token: str,
    *,
    prefix: bool = False,
    exclude: Iterable[int] = (),
    exec_wait_s: float = 0.5,
    young_s: float = 2.0,
) -> list[int]:
    """Live pids whose initial environment carries ``PROBE_CELL_TOKEN=<token>`` (or a token
    starting with ``token`` when ``prefix``). A process caught inside ``execve`` shows an empty
    environment for a moment (measured: 6 % of reads right after ``Popen`` returned); it is read
    again until its environment appears, for up to ``exec_wait_s`` (only processes younger than
    ``young_s``: an old process started without an environment does not slow the scan)."""
    needle = f"{TOKEN_VAR}={token}".encode()
    skip = {os.getpid(), *exclude}
    out = []
    pending: list[int] = []
    for pid in all_pids():
        if pid in skip:
            continue
        env = _read_environ(pid)
        if env is None:
            continue
        if not env:
            if _mid_exec(pid, young_s):
                pending.append(pid)
            continue
        if _carries(env, needle, prefix):
            info = read_stat(pid)
            if info is not None and info.state not in ("Z", "X"):
                out.append(pid)
    deadline = time.monotonic() + exec_wait_s
    while pending and time.monotonic() < deadline:
        time.sleep(0.005)
        still = []
        for pid in pending:
            env = _read_environ(pid)
            if env is None:
                continue
            if not env:
                if _mid_exec(pid, young_s):
                    still.append(pid)
            elif _carries(env, needle, prefix) and pid_alive(pid):
                out.append(pid)
        pending = still
    return sorted(out)


def rss_bytes(pids: Iterable[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


def group_alive(pgid: int) -> bool:
    """True while a non-zombie process is in group ``pgid`` (zombies count as gone: in a container
    whose init does not reap, killed orphans stay zombies forever)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(members(pgid=pgid))


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def terminate_tree(
    pgid: int,
    token: str | None,
    *,
    grace_s: float,
    reap: Callable[[], object],
    exclude: Iterable[int] = (),
    prefix: bool = False,
    term_first: bool = True,
) -> list[int]:
    """SIGTERM the group (and token-marked strays), wait ``grace_s``, SIGKILL what is left, and poll
    until the group and every token-marked process is gone. ``reap`` is called while waiting so the
    group leader (our child) does not linger as a zombie. Returns the stray pids that had to be killed
    outside the group."""
    excl = set(exclude)

    def strays() -> list[int]:
        return token_pids(token, prefix=prefix, exclude=excl) if token else []

    killed_strays: set[int] = set()
    if term_first:
        signal_group(pgid, signal.SIGTERM)
        s = strays()
        killed_strays.update(s)
        signal_pids(s, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            reap()
            if not group_alive(pgid) and not strays():
                return sorted(killed_strays)
            time.sleep(0.05)
    for attempt in range(200):  # about 10 s
        signal_group(pgid, signal.SIGKILL)
        s = strays()
        killed_strays.update(s)
        signal_pids(s, signal.SIGKILL)
        reap()
        if not group_alive(pgid) and not s:
            break
        time.sleep(0.05)
        if attempt == 199:
            log.error("process group %d / token %s still alive after SIGKILL", pgid, token)
    return sorted(killed_strays)


def kill_strays(token: str, *, exclude: Iterable[int] = (), prefix: bool = False) -> list[int]:
    """SIGKILL every live process carrying ``token`` (outside whatever group it started in)."""
    excl = set(exclude)
    found: set[int] = set()
    for _ in range(100):
        pids = token_pids(token, prefix=prefix, exclude=excl)
        if not pids:
            break
        found.update(pids)
        signal_pids(pids, signal.SIGKILL)
        time.sleep(0.02)
    return sorted(found)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    info = read_stat(pid)
    return info is not None and info.state not in ("Z", "X")
