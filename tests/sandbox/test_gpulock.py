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
