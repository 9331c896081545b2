from __future__ import annotations

import time
import uuid

import pytest

from probe.sandbox import procs
from probe.sandbox.runner import RunnerConfig

M = "tests.sandbox.children.misbehave:"


def run_pids(run_id: str) -> list[int]:
    """Live processes started by the runner for ``run_id`` (by the token in their environment)."""
    return procs.token_pids(f"{run_id}-", prefix=True)


@pytest.fixture
def cfg():
    """A runner config with a unique run id; after the test, nothing of that run may be alive."""
    c = RunnerConfig(run_id=f"t{uuid.uuid4().hex[:10]}", grace_s=1.0)
    yield c
    left = run_pids(c.run_id)
    deadline = time.monotonic() + 3
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = run_pids(c.run_id)
    assert not left, f"orphaned processes of run {c.run_id}: {left}"
