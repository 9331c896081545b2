"""The cross-process GPU lock: writer priority, no nesting, no-op without the runner's variable."""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest

from probe.sandbox import gpulock


def _hold(lock_dir: str, kind: str, start_after: float, hold: float, q: mp.Queue) -> None:
    import os

    os.environ[gpulock.ENV_VAR] = lock_dir
    time.sleep(start_after)
    cm = gpulock.gpu_shared() if kind == "shared" else gpulock.gpu_exclusive()
    with cm:
        t0 = time.time()
        time.sleep(hold)
        q.put((kind, start_after, t0, time.time()))


@pytest.mark.slow
def test_writer_priority(tmp_path):
    """A timed loop waiting for a running shared phase goes before a shared phase that asks later."""
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()
    plan = [("shared", 0.0, 1.0), ("exclusive", 0.3, 0.3), ("shared", 0.6, 0.1)]
    procs = [ctx.Process(target=_hold, args=(str(tmp_path), k, s, h, q)) for k, s, h in plan]
    for p in procs:
        p.start()
    got = sorted((q.get(timeout=30) for _ in procs), key=lambda r: r[1])
    for p in procs:
        p.join(timeout=10)
    (_, _, _, a1), (_, _, x0, x1), (_, _, b0, _) = got
    assert x0 >= a1 - 0.01, "the timed loop started while a shared phase was running"
    assert b0 >= x1 - 0.01, "a later shared phase jumped ahead of the waiting timed loop"


def test_nesting_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(gpulock.ENV_VAR, str(tmp_path))
    refused = pytest.raises(RuntimeError, match="while shared is held")
    with gpulock.gpu_shared(), refused, gpulock.gpu_exclusive():
        pass
    with gpulock.gpu_exclusive() as waited:  # released properly after the refusal
        assert waited >= 0.0


def test_without_the_variable_it_does_nothing(monkeypatch, tmp_path):
    monkeypatch.delenv(gpulock.ENV_VAR, raising=False)
    with gpulock.gpu_shared() as w1:
        assert w1 == 0.0
    with gpulock.gpu_exclusive() as w2:
        assert w2 == 0.0
    assert not list(tmp_path.iterdir())


def _hold_alive(folder: str, q: mp.Queue, release: mp.Event) -> None:  # type: ignore[type-arg]
    import os

    os.environ[gpulock.ENV_VAR] = folder
    with gpulock.gpu_shared():
        pass
    q.put("joined")
    release.wait(30)


def _aged(folder, seconds: float = 3600.0) -> None:
    import os

    t = time.time() - seconds
    os.utime(folder, (t, t))


def test_sweep_removes_only_stale_folders(tmp_path):
    """Stale: named like a lock folder, old, and nobody holds its ``alive`` file. A folder a live
    process uses, a young one and a folder of another name stay."""
    stale = tmp_path / f"{gpulock.PREFIX}dead-1"
    (stale / "gate").parent.mkdir()
    (stale / "gate").write_text("")
    young = tmp_path / f"{gpulock.PREFIX}young-1"
    young.mkdir()
    other = tmp_path / "not-a-lock-folder"
    other.mkdir()
    held = tmp_path / f"{gpulock.PREFIX}live-1"
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()
    release = ctx.Event()
    p = ctx.Process(target=_hold_alive, args=(str(held), q, release))
    p.start()
    try:
        assert q.get(timeout=30) == "joined"
        for f in (stale, held, other):
            _aged(f)
        removed = gpulock.sweep_stale(str(tmp_path))
        assert removed == [str(stale)]
        assert held.is_dir() and young.is_dir() and other.is_dir() and not stale.exists()
    finally:
        release.set()
        p.join(timeout=30)
    _aged(held)
    assert gpulock.sweep_stale(str(tmp_path)) == [str(held)]  # its process is gone: stale now


@pytest.mark.slow
def test_lock_folder_of_a_killed_run_is_swept(tmp_path):
    """``probe run -j 2`` killed with SIGKILL leaves its lock folder; once its workers are gone, the
    sweep (which the next run's children do on their own) removes it."""
    import os
    import signal
    import subprocess
    import sys
    import tempfile
    import uuid
    from pathlib import Path

    from tests.sandbox.conftest import run_pids

    root = Path(__file__).resolve().parents[2]
    run_id = f"g{uuid.uuid4().hex[:10]}"
    before = set(Path(tempfile.gettempdir()).glob(f"{gpulock.PREFIX}{run_id}-*"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.sandbox.children.prober", str(tmp_path / "j.jsonl"), "20", run_id, "2"],
        cwd=root,
        env=dict(os.environ, PYTHONPATH=str(root)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not set(Path(tempfile.gettempdir()).glob(f"{gpulock.PREFIX}{run_id}-*")) - before:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = set(Path(tempfile.gettempdir()).glob(f"{gpulock.PREFIX}{run_id}-*"))
    assert left, "the killed run left no lock folder (nothing to sweep)"
    while run_pids(run_id) and time.monotonic() < deadline + 30:
        time.sleep(0.1)
    removed = gpulock.sweep_stale(min_age_s=0)
    assert {Path(p) for p in removed} >= left
    assert not any(p.exists() for p in left)
