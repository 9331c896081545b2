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

Stale folders: the runner removes its lock folder when it ends, but a runner killed with
``kill -9`` cannot. Every process that uses a lock folder holds a shared lock on its ``alive`` file
for as long as it lives (the kernel drops it when the process dies, however it dies); a folder
named ``probe-gpulock-*`` in the temporary folder, this user's, older than
:data:`STALE_AFTER_S`, whose ``alive`` nobody holds, is stale. :func:`sweep_stale` removes such
folders; a child sweeps once when it first takes a lock. Removing the folder of a run whose
children have not taken a lock yet costs nothing: the folder is made again on first use.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ENV_VAR = "PROBE_GPU_LOCK"
PREFIX = "probe-gpulock-"  # the runner's lock folders: tempfile.mkdtemp(prefix=PREFIX + run id)
ALIVE = "alive"
STALE_AFTER_S = 60.0

_held: list[str] = []  # what this process holds now ("shared" / "exclusive"), to refuse nesting
_fds: dict[str, int] = {}


def _join(root: str) -> None:
    """Hold a shared lock on ``root/alive`` for the life of this process (see the module docstring);
    the file is checked to be the one in the folder after the lock is taken (a sweep may have
    removed the folder in between: then it is made again)."""
    while True:
        Path(root).mkdir(mode=0o700, parents=True, exist_ok=True)
        path = f"{root}/{ALIVE}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            same = os.fstat(fd).st_ino == Path(path).stat().st_ino
        except FileNotFoundError:
            same = False
        if same:
            _fds[path] = fd
            return
        os.close(fd)


def _fd(name: str) -> int | None:
    root = os.environ.get(ENV_VAR)
    if not root:
        return None
    key = f"{root}/{name}"
    fd = _fds.get(key)
    if fd is None:
        if f"{root}/{ALIVE}" not in _fds:
            _join(root)
            sweep_stale(keep=(root,))
        fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o600)
        _fds[key] = fd
    return fd


def sweep_stale(
    parent: str | None = None, *, min_age_s: float = STALE_AFTER_S, keep: tuple[str, ...] = ()
) -> list[str]:
    """Remove the stale lock folders under ``parent`` (default: the temporary folder); the paths
    removed. A folder is taken only while its ``alive`` file is locked exclusively here, so no
    process using it can be (or start) using it."""
    parent = parent or tempfile.gettempdir()
    removed: list[str] = []
    now = time.time()
    kept = {os.path.realpath(k) for k in keep}
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for ent in entries:
        if not ent.name.startswith(PREFIX) or os.path.realpath(ent.path) in kept:
            continue
        try:
            st = ent.stat(follow_symlinks=False)
        except OSError:
            continue
        if not ent.is_dir(follow_symlinks=False) or st.st_uid != os.getuid() or now - st.st_mtime < min_age_s:
            continue
        if _remove_if_unused(ent.path):
            removed.append(ent.path)
    return removed


def _remove_if_unused(folder: str) -> bool:
    try:
        fd = os.open(f"{folder}/{ALIVE}", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: a process still uses the folder
        os.close(fd)
        return False
    try:
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        os.close(fd)
    return True


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
