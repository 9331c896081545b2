"""procs: the token scan sees every process carrying the token, also one caught inside ``execve``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from probe.sandbox import procs

SLEEP = [sys.executable, "-c", "import time; time.sleep(30)"]


def _token_env() -> tuple[str, dict[str, str]]:
    token = f"t{uuid.uuid4().hex[:10]}"
    return token, dict(os.environ, **{procs.TOKEN_VAR: token})


def test_a_process_inside_execve_is_read_again(monkeypatch):
    """``Popen`` returns once the child's close-on-exec pipe closes, before the kernel sets the new
    image's environment pointers: ``/proc/<pid>/environ`` then reads empty (6 % of reads right after
    ``Popen`` on this box). The scan reads such a young process again instead of missing it (a
    setsid'ed stray of a cell would survive the cell)."""
    token, env = _token_env()
    p = subprocess.Popen(SLEEP, env=env, start_new_session=True)
    real = procs._read_environ
    reads: list[int] = []

    def first_read_empty(pid: int) -> bytes | None:
        if pid == p.pid:
            reads.append(pid)
            if len(reads) == 1:
                return b""  # the exec window
        return real(pid)

    monkeypatch.setattr(procs, "_read_environ", first_read_empty)
    try:
        assert procs.token_pids(token) == [p.pid]
        assert len(reads) >= 2
    finally:
        p.kill()
        p.wait()


def test_an_old_process_without_environment_does_not_stall_the_scan():
    p = subprocess.Popen(SLEEP, env={}, start_new_session=True)
    try:
        time.sleep(0.3)
        t0 = time.monotonic()
        assert procs.token_pids("nothing-carries-this", young_s=0.2, exec_wait_s=5.0) == []
        assert time.monotonic() - t0 < 2.0
    finally:
        p.kill()
        p.wait()


@pytest.mark.slow
def test_token_scan_sees_processes_right_after_popen():
    token, env = _token_env()
    missed = []
    for _ in range(40):
        p = subprocess.Popen(SLEEP, env=env, start_new_session=True)
        try:
            if procs.token_pids(token) != [p.pid]:
                missed.append(p.pid)
        finally:
            p.kill()
            p.wait()
    assert missed == []
