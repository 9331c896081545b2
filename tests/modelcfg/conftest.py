"""An interpreter whose vLLM is the fake 0.33 tree (for ``--ask-vllm`` and ``probe predict --python``)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from tests.oracle.conftest import assemble


@pytest.fixture(scope="session")
def fake_vllm_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An interpreter whose vLLM is the fake 0.33 tree: this Python with the tree put first on its path
    (what ``--ask-vllm`` and ``probe predict --python`` are given for an image's Python)."""
    root = tmp_path_factory.mktemp("fake_vllm_python")
    site = assemble("v033", root / "site")
    exe = root / "python"
    exe.write_text(
        f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} "$@"\n'
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    assert os.access(exe, os.X_OK)
    return str(Path(exe))
