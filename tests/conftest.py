"""Fixtures every test folder uses (``probe_cli``: the CLI as a user runs it; ``data_dir``: the committed
fixture matrices), and the session's end: what the whole suite leaves behind is cleaned up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "matrix" / "data"  # the committed fixture matrices


def run_probe(
    *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env.pop("GITHUB_ACTIONS", None)
    full_env.pop("GITHUB_STEP_SUMMARY", None)
    full_env.pop("PROBE_MATRICES", None)
    full_env.pop("PROBE_REPORTS", None)
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "probe", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def probe_cli():
    return run_probe


@pytest.fixture
def data_dir() -> Path:
    return DATA


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Lock folders of ``probe run -j N`` runs that tests killed with SIGKILL (the runner cannot
    remove its own then): removed once nothing uses them (``probe.sandbox.gpulock.sweep_stale``)."""
    from probe.sandbox import gpulock

    gpulock.sweep_stale(min_age_s=0)
