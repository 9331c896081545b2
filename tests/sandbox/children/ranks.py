"""Probe targets that start "rank" processes the way vLLM's multiprocessing executor does (one per
tensor-parallel rank, by ``multiprocessing`` fork or spawn), for the runner's process-tree tests.

Each rank writes its pid to ``params["pidfile"]`` (one line per rank) and "holds the GPU" (a file it
keeps open, ``params["gpu_file"]``) until killed. No torch, no GPU.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_ESCAPER = (
    "import os, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "time.sleep(float(sys.argv[2]))\n"
    "os.setsid()\n"
    "with open(sys.argv[1], 'a') as f: f.write(f'{os.getpid()}\\n')\n"
    "while True: time.sleep(1)\n"
)


def _rank_main(rank: int, pidfile: str, gpu_file: str, setsid: bool) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a rank stuck in a collective ignores SIGTERM
    if setsid:
        os.setsid()
    held = Path(gpu_file).open("a")  # noqa: SIM115 (held until the process dies)
    held.write(f"rank {rank} pid {os.getpid()}\n")
    held.flush()
    with Path(pidfile).open("a") as f:
        f.write(f"{os.getpid()}\n")
    while True:
        time.sleep(1)


def _wait_lines(path: str, n: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        p = Path(path)
        if p.exists() and len(p.read_text().split()) >= n:
            return
        time.sleep(0.05)
    raise RuntimeError(f"ranks did not start: {path}")


def two_ranks_hang(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Rank 0 by ``params["method"]`` (fork / spawn), rank 1 the same but in its own session; then hang
    (the cell times out, like an all-reduce that never completes)."""
    ctx.phase("distributed_init")
    mp = multiprocessing.get_context(params.get("method", "spawn"))
    procs = [
        mp.Process(target=_rank_main, args=(r, params["pidfile"], params["gpu_file"], r == 1), daemon=True)
        for r in range(2)
    ]
    for p in procs:
        p.start()
    _wait_lines(params["pidfile"], 2)
    ctx.phase("collective")
    while True:
        time.sleep(1)


def escaper_then_ok(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Start a process that later leaves the group (``setsid``) with a cleared environment (no cell
    token), so neither the group kill nor the token sweep finds it; then report ok and exit."""
    ctx.phase("forward")
    subprocess.Popen(
        [sys.executable, "-c", _ESCAPER, params["pidfile"], str(params.get("delay_s", 0.8))],
        env={"PATH": os.environ.get("PATH", "")},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_lines(params["pidfile"], 1)
    return {"details": {"escaper_started": True}}
