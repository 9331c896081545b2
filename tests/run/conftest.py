"""Fake package trees (site-packages with ``*.dist-info/RECORD``), a fake nvidia-smi, fixture cells."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from probe.cells import CellSpec
from tests.sandbox.conftest import M

FAKE_GPU_BIN = Path(__file__).resolve().parents[1] / "fixtures" / "fake-gpu"


def write_dist(
    site: Path,
    name: str,
    version: str,
    files: dict[str, str] | None = None,
    meta: dict[str, str] | None = None,
) -> Path:
    """A pip-installed distribution: its files and a RECORD listing them (path, sha256 marker, size)."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    rows = []
    for rel, text in (files or {f"{name.replace('-', '_')}/__init__.py": f"# {name} {version}\n"}).items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
        rows.append(f"{rel},sha256={hashlib.sha256(text.encode()).hexdigest()},{len(text)}")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    for fname, text in (meta or {}).items():  # e.g. direct_url.json
        (info / fname).write_text(text)
    return info


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """vLLM, torch (built for CUDA 13.0), a CUDA library, FlashInfer, Triton."""
    s = tmp_path / "site-packages"
    write_dist(s, "vllm", "0.26.0")
    write_dist(s, "torch", "2.11.0", {"torch/__init__.py": "", "torch/version.py": "cuda = '13.0'\n"})
    write_dist(s, "nvidia-cublas-cu13", "13.1.0.3")
    write_dist(s, "flashinfer-python", "0.6.14", {"flashinfer/__init__.py": "v = 1\n"})
    write_dist(s, "triton", "3.6.0")
    return s


@pytest.fixture
def fake_gpu(monkeypatch) -> None:
    """nvidia-smi answers for an H200 (tests/fixtures/fake-gpu/nvidia-smi)."""
    monkeypatch.setenv("PATH", f"{FAKE_GPU_BIN}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.fixture(autouse=True)
def digest_cache(tmp_path: Path, monkeypatch) -> Path:
    """A private digest cache (never the user's)."""
    monkeypatch.setenv("PROBE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def cell(cid: str, kind: str, target: str = "ok", **params: object) -> CellSpec:
    """A cell of ``kind`` (its parameters decide what it depends on) run by a fixture target."""
    return CellSpec.model_validate(
        {"id": cid, "kind": kind, "target": M + target, "params": params, "timeout_s": 60}
    )
