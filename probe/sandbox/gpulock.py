"""A cross-process reader/writer lock that keeps timed GPU loops clean when cells run in parallel.

With ``probe run -j N`` several children share one GPU. Their set-up (imports, JIT compiles, weight
repacking) overlaps freely, which is where the speed-up of ``-j`` comes from, but a timed loop must
not share the GPU with another cell's kernels: kernels of different processes time-slice the device
and would inflate the medians. So:

- short, pure GPU work (creating and quantizing weights, the torch reference) runs under
  :func:`gpu_shared` (many holders at once, never beside a timed loop);
- a timed loop runs under :func:`gpu_exclusive` (one holder, no shared holder);
- phases that may JIT-compile for many seconds of CPU time (weight repacking, a backend's first
  call) take no lock: holding one there stalled every timed loop of the run behind the compiles
  (H200, -j 4: 713 of 1,244 cell-seconds were lock waits), and a compile barely touches the GPU.

Writers have priority (a "turnstile"): an exclusive request closes ``gate`` first, so new shared
holders queue behind it and the timed loop waits only for the shared phases already running.
Both are ``flock(2)`` locks on two files in the directory named by ``$PROBE_GPU_LOCK`` (set by the
runner when ``-j`` > 1); the kernel drops them when a child dies, so a crashed cell never leaves the
lock held. Without the variable both context managers do nothing (``-j 1``: nothing to guard).
Standard library only; imported inside the sandboxed child.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

ENV_VAR = "PROBE_GPU_LOCK"

_held: list[str] = []  # what this process holds now ("shared" / "exclusive"), to refuse nesting
_fds: dict[str, int] = {}


def _fd(name: str) -> int | None:
    root = os.environ.get(ENV_VAR)
    if not root:
        return None
    key = f"{root}/{name}"
    fd = _fds.get(key)
    if fd is None:
        Path(root).mkdir(parents=True, exist_ok=True)
        fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o600)
        _fds[key] = fd
    return fd


@contextlib.contextmanager
def _hold(kind: str) -> Iterator[float]:
    if _held:
        raise RuntimeError(f"gpu lock: {kind} requested while {_held[-1]} is held by this process")
    gate, rw = _fd("gate"), _fd("rw")
    _held.append(kind)
    try:
        if gate is None or rw is None:
            yield 0.0
            return
        exclusive = kind == "exclusive"
        t0 = time.perf_counter()
        fcntl.flock(gate, fcntl.LOCK_EX)  # the turnstile: a waiting exclusive holder keeps it closed
        try:
            fcntl.flock(rw, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        except BaseException:
            fcntl.flock(gate, fcntl.LOCK_UN)
            raise
        if not exclusive:  # a shared holder lets the next one through at once
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield time.perf_counter() - t0
        finally:
            fcntl.flock(rw, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)
    finally:
        _held.pop()


def gpu_shared() -> contextlib.AbstractContextManager[float]:
    """GPU work that may run beside other cells' work; yields the seconds waited for the lock."""
    return _hold("shared")


def gpu_exclusive() -> contextlib.AbstractContextManager[float]:
    """A timed loop: the GPU holds no other cell's shared phase; yields the seconds waited."""
    return _hold("exclusive")
