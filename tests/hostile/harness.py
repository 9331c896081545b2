"""Run ``probe`` on a hostile input as a whole process: exit code, output, wall time and the child's
peak RSS (``os.wait4``: the maximum resident set of that child and what it waited for), under a
time limit (the process group is killed past it: a hang fails the test, it never blocks the run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the memory ceiling every input is held to (the issue's bound: 512 MB)
MAX_RSS_MB = 512


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
    *args: str, timeout: float = 120.0, cwd: Path | None = None, env: dict[str, str] | None = None
) -> Run:
    """``python -m probe ARGS`` in a child of its own session; killed (with its group) at ``timeout``."""
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.setdefault("PROBE_CACHE_DIR", tempfile.mkdtemp(prefix="probe-hostile-cache-"))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = subprocess.Popen(
            [sys.executable, "-m", "probe", *args],
            cwd=cwd or ROOT,
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
            _, status, usage = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        return Run(
            p.returncode,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            wall,
            usage.ru_maxrss / 1024,
            killed.is_set(),
        )
