"""Session-wide hooks: what the whole suite leaves behind is cleaned up at its end."""

from __future__ import annotations

import pytest


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Lock folders of ``probe run -j N`` runs that tests killed with SIGKILL (the runner cannot
    remove its own then): removed once nothing uses them (``probe.sandbox.gpulock.sweep_stale``)."""
    from probe.sandbox import gpulock

    gpulock.sweep_stale(min_age_s=0)
