"""build_matrix / collect_provenance / static_from_scan on real inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from probe.cells import CellResult
from probe.errors import BadInputError
from probe.matrix.build import (
    build_matrix,
    collect_provenance,
    predicted_cells,
    static_from_scan,
    write_matrix,
)
from probe.matrix.io import load_matrix
from probe.outcomes import Outcome

ROOT = Path(__file__).resolve().parents[2]
PREBUILT = ROOT / "tests" / "fixtures" / "cuda" / "prebuilt"


def test_collect_provenance_imports_no_torch(tmp_path):
    code = (
        "import sys, json; from probe.matrix.build import collect_provenance;"
        "p = collect_provenance('img:1');"
        "bad = [m for m in ('torch', 'vllm', 'flashinfer') if m in sys.modules];"
        "print(json.dumps({'p': p, 'bad': bad}))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60, check=True
    )
    out = json.loads(r.stdout)
    assert out["bad"] == []
    p = out["p"]
    assert p["image"] == "img:1" and p["host"] and p["created_at"].endswith("Z")
    assert p["versions"]["python"].count(".") == 2
    assert "vllm" in p["versions"] and "flash_attn" in p["versions"]


def test_provenance_env_image(monkeypatch):
    monkeypatch.setenv("PROBE_IMAGE", "ghcr.io/x/y:1")
    monkeypatch.setenv("IMAGE_DIGEST", "sha256:" + "a" * 64)
    p = collect_provenance(None)
    assert p["image"] == "ghcr.io/x/y:1" and p["image_digest"].startswith("sha256:")


def _prov(**extra):
    base = {
        "host": "h",
        "created_at": "2026-11-22T00:00:00Z",
        "probe_version": "0.1.0",
        "versions": {"vllm": None},
        "gpu": None,
    }
    base.update(extra)
    return base


def test_build_merges_child_facts_and_normalises_params(tmp_path):
    results = [
        CellResult(
            id="import",
            kind="import",
            outcome=Outcome.OK,
            details={
                "versions": {"vllm": "0.26.0", "flashinfer-python": "0.6.13"},
                "gpu": {"name": "NVIDIA H100 80GB HBM3", "cc": [9, 0], "total_memory": 85e9},
            },
        ),
        CellResult(
            id="m1",
            kind="moe",
            outcome=Outcome.OK,
            params={
                "backend": "marlin",
                "quant": "nvfp4",
                "experts": 256,
                "hidden": 3072,
                "intermediate": 512,
                "top_k": 8,
                "tp": 2,
                "model": "Qwen3.5-122B-A10B",
            },
            timings={"forward_ms_b1": 0.3},
        ),
        CellResult(
            id="e1",
            kind="engine",
            outcome=Outcome.WRONG_OUTPUT,
            params={"model": "x", "moe_backend": "cutlass", "attention_backend": "TRITON_ATTN"},
        ),
    ]
    m = build_matrix(results, provenance=_prov(), cells_planned=5)
    assert m.provenance.gpu.sm == 90 and m.provenance.gpu.cc == "9.0" and m.provenance.gpu.memory_gib == 79.2
    assert m.provenance.versions.vllm == "0.26.0"
    assert m.run.status == "partial"
    moe = m.cells[1]
    assert (moe.backend, moe.moe_backend, moe.experts, moe.intermediate, moe.tp) == (
        "marlin",
        "marlin",
        256,
        512,
        2,
    )
    assert moe.vllm_version == "0.26.0"
    assert m.cells[2].backend == "cutlass+TRITON_ATTN"
    path = write_matrix(m, tmp_path / "m.json")
    assert load_matrix(path) == m


def test_build_infra_failure_and_inconsistency():
    m = build_matrix([], provenance=_prov(), infra_error="worker could not start")
    assert m.run.status == "infra_failed"
    dup = [
        CellResult(id="a", kind="moe", outcome=Outcome.OK),
        CellResult(id="a", kind="moe", outcome=Outcome.OK),
    ]
    with pytest.raises(BadInputError, match="duplicate cell id"):
        build_matrix(dup, provenance=_prov())


def test_static_shapes_dict_and_list():
    d = {
        "backends": {
            "marlin": {"sm_110": {"verdict": "ptx-jit", "reason": "compute_80 only", "via": "compute_80"}}
        },
        "files": [
            {
                "path": "a.so",
                "sass": ["sm_90a"],
                "ptx": ["compute_80"],
                "kernels": [{"name": "k", "targets": ["sm_90a"]}],
            }
        ],
    }
    s = static_from_scan(d)
    assert s.files[0].arches == ["compute_80", "sm_90a"] and s.files[0].kernels[0].arches == ["sm_90a"]
    assert s.backends["marlin"]["sm_110"].verdict == "ptx-jit"
    s2 = static_from_scan(
        {"backends": [{"backend": "FA3", "target": "sm_110", "verdict": "none", "reason": "r"}]}
    )
    cells = predicted_cells(s2)
    assert (
        cells[0].kind == "attention"
        and cells[0].fa_version == 3
        and cells[0].outcome == Outcome.NO_KERNEL_IMAGE
    )
    assert cells[0].gpu_sm == 110 and cells[0].evidence == "predicted"


@pytest.mark.skipif(
    not PREBUILT.is_dir(), reason="tests/fixtures/cuda/prebuilt (the scan engineer's cubins) absent"
)
def test_static_from_a_real_probe_scan(tmp_path):
    out = tmp_path / "scan.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "probe",
            "scan",
            "--backends",
            "--kernels",
            "--json",
            "--target",
            "sm_90",
            "--target",
            "sm_110a",
            "--no-cache",
            str(PREBUILT),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert r.returncode in (0, 5), r.stderr
    scan = json.loads(out.read_text())
    s = static_from_scan(scan)
    by_name = {Path(f.path).name: f for f in s.files}
    assert "sm_90a" in by_name["sm_90a.cubin"].arches
    assert s.targets == ["sm_90", "sm_110"]
    assert s.backends, "the backend table of probe scan --backends was not read"
    m = build_matrix([], provenance=_prov(), static=scan, include_predicted=True)
    assert any(c.evidence == "predicted" for c in m.cells)


@pytest.mark.parametrize(
    ("line", "sm", "mem", "integrated"),
    [
        ("NVIDIA Thor, 11.0, [N/A], 580.00", 110, 122.0, True),  # unified memory: nvidia-smi shows none
        ("NVIDIA H100 80GB HBM3, 9.0, 81559, 570.124.06", 90, 79.6, False),
    ],
)
def test_provenance_from_nvidia_smi(tmp_path, monkeypatch, line, sm, mem, integrated):
    """A stand-in nvidia-smi on PATH (a real process) prints what the real one prints on that GPU."""
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\necho '{line}'\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    p = collect_provenance(None)
    gpu = p["gpu"]
    assert (gpu["sm"], gpu["cc"], gpu["memory_gib"], gpu["integrated"]) == (
        sm,
        f"{sm // 10}.{sm % 10}",
        mem,
        integrated,
    )
    assert p["versions"]["driver"] == line.rsplit(", ", 1)[1]
    m = build_matrix([], provenance=p)
    assert m.provenance.gpu.sm == sm
