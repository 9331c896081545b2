"""Run ``probe`` on a hostile input as a whole process: exit code, output, wall time and its peak
RSS, under a time limit (the process group is killed past it: a hang fails the test, it never
blocks the run).

The peak RSS is ``os.wait4``'s ``ru_maxrss`` of a process started with ``posix_spawn`` by a small
launcher: a child made by ``fork`` from the test process would count the test process's own pages
(resident in the child until it execs) as its peak. The launcher caps the address space of what it
starts (``RLIMIT_AS``, :data:`ADDRESS_CAP`: 4 GiB, as the issue's runs did; ``$PROBE_HOSTILE_AS``
bytes, 0 for none): an allocation past it is a ``MemoryError`` in probe (a traceback or an internal
error, which :meth:`Run.check` fails on), never a machine out of memory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_LAUNCHER = """
import json, os, resource, sys
cap = int(os.environ.get("PROBE_HOSTILE_AS") or 0)
if cap > 0:
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
pid = os.posix_spawn(sys.executable, [sys.executable, "-m", "probe", *sys.argv[2:]], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    json.dump([os.waitstatus_to_exitcode(status), usage.ru_maxrss], f)
"""
#: the memory ceiling every input is held to (the issue's bound: 512 MB)
MAX_RSS_MB = 512
#: the address space probe runs in (the issue's runs: 4 GiB)
ADDRESS_CAP = 4 << 30


@dataclass(frozen=True)
class Run:
    rc: int
    out: str
    err: str
    wall_s: float
    peak_rss_mb: float
    timed_out: bool

    def check(
        self, rc: int | tuple[int, ...], *, rss_mb: float = MAX_RSS_MB, seconds: float | None = None
    ) -> None:
        """The documented exit code, no traceback, within the memory ceiling (and time, if given)."""
        want = (rc,) if isinstance(rc, int) else rc
        assert not self.timed_out, f"no answer within the time limit (hang?): {self.err[-1000:]}"
        assert self.rc in want, f"exit {self.rc}, expected {want}: {self.err[-2000:]}"
        assert "Traceback" not in self.err and "internal error" not in self.err, self.err[-2000:]
        assert self.peak_rss_mb <= rss_mb, f"peak RSS {self.peak_rss_mb:.0f} MB > {rss_mb} MB"
        if seconds is not None:
            assert self.wall_s <= seconds, f"{self.wall_s:.1f} s > {seconds} s"


def run_probe(
    *args: str,
    timeout: float = 120.0,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    root: Path | None = None,
) -> Run:
    """``python -m probe ARGS`` in a child of its own session; killed (with its group) at ``timeout``.
    ``root``: the checkout whose probe runs (default: this one; benchmarks compare another)."""
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = str(root or ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.setdefault("PROBE_CACHE_DIR", tempfile.mkdtemp(prefix="probe-hostile-cache-"))
    e.setdefault("PROBE_HOSTILE_AS", str(ADDRESS_CAP))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory() as d:
        report = Path(d) / "rusage.json"
        t0 = time.monotonic()
        p = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(report), *args],
            cwd=cwd or root or ROOT,
            env=e,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            p.wait()
        finally:
            timer.cancel()
        wall = time.monotonic() - t0
        rc, maxrss = json.loads(report.read_text()) if report.exists() else (p.returncode, 0)
        out.seek(0)
        err.seek(0)
        return Run(
            rc,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            wall,
            maxrss / 1024,
            killed.is_set(),
        )


def scan_json(*args: str, timeout: float = 120.0) -> tuple[Run, dict[str, Any] | None]:
    """``probe scan --no-cache --json ARGS``: the run and its report (None when it printed none)."""
    r = run_probe("scan", "--no-cache", "--json", *args, timeout=timeout)
    return r, (json.loads(r.out) if r.out.strip().startswith("{") else None)


def file_errors(report: dict[str, Any]) -> dict[str, str]:
    """A scan report's file errors by the last part of each path (inside an image / wheel: the member)."""
    return {f["path"].split("!")[-1]: f["error"] for f in report["files"] if f["error"]}
