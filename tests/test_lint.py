"""The tree is ruff-clean with the repository's configuration (pyproject.toml [tool.ruff])."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_clean():
    ruff = shutil.which("ruff")
    cmd = [ruff] if ruff else [sys.executable, "-m", "ruff"]
    try:
        r = subprocess.run(
            [*cmd, "check", "probe", "tests", "benchmarks", "scripts"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except FileNotFoundError:
        pytest.skip("ruff is not installed (it is in the [test] extra)")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
