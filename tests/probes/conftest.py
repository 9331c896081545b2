"""Fixtures for the probe tests: a fake minimal vLLM module tree per version on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

FAKE = Path(__file__).parent / "fake_vllm"


def _purge_vllm() -> None:
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]


@pytest.fixture(params=["v026", "v033"])
def fake_vllm(request, monkeypatch):
    """Put tests/probes/fake_vllm/<version> first on sys.path; yields (tag, root path)."""
    root = FAKE / request.param
    _purge_vllm()
    monkeypatch.syspath_prepend(str(root))
    yield request.param, root
    _purge_vllm()


@pytest.fixture
def fake_vllm_tree(monkeypatch):
    """Factory: activate one named fake tree (v016 / v026 / v033)."""

    def activate(tag: str) -> Path:
        root = FAKE / tag
        _purge_vllm()
        monkeypatch.syspath_prepend(str(root))
        return root

    yield activate
    _purge_vllm()
