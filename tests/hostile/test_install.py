"""The README's first command, for real: ``python3 -m pip install .`` (not editable) of a copy of the
checkout into a fresh virtual environment, then ``probe recommend --model 122b`` from a folder
outside the checkout answers from the published matrices shipped as package data.

Needs PyPI (the build backend and the dependencies are installed into the fresh environment)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: what ``pip install .`` needs of the checkout (probe/data/matrices links to matrices/)
PARTS = ("pyproject.toml", "README.md", "probe", "matrices")


@pytest.mark.slow
@pytest.mark.network
def test_installed_package_answers_outside_the_checkout(tmp_path):
    src = tmp_path / "checkout"
    src.mkdir()
    for part in PARTS:
        p = ROOT / part
        if p.is_dir():
            shutil.copytree(p, src / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(p, src / part)
    assert (src / "probe" / "data" / "matrices").is_symlink()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python3"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PROBE_MATRICES", "VIRTUAL_ENV")}
    install = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "."],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    shutil.rmtree(src)  # nothing may be read from the checkout any more
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run(
        [str(venv / "bin" / "probe"), "recommend", "--model", "122b"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "--moe-backend" in r.stdout and "--attention-backend" in r.stdout, r.stdout
    assert "Traceback" not in r.stderr
