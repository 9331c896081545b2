"""The real vLLM 0.33.0 venv the slow oracle tests run against (CPU only); they are skipped with the
reason when it is absent.

Build the venv once: python3 -m venv ~/.cache/probe-tests/venv-vllm-0.33.0 &&
~/.cache/probe-tests/venv-vllm-0.33.0/bin/pip install vllm==0.33.0   (or $PROBE_VLLM033_PYTHON)
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PY = Path(
    os.environ.get("PROBE_VLLM033_PYTHON", Path.home() / ".cache/probe-tests/venv-vllm-0.33.0/bin/python")
)
HAS_VLLM = PY.exists() and any((PY.parent.parent / "lib").glob("python3*/site-packages/vllm/__init__.py"))
#: a module's pytestmark: slow (the real vLLM is imported), skipped without the venv
MARKS = [
    pytest.mark.skipif(not HAS_VLLM, reason=f"no vLLM 0.33.0 venv at {PY} (see tests/oracle/real_vllm.py)"),
    pytest.mark.slow,
]
