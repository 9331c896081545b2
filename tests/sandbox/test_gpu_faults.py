"""GPU fault fixtures built with nvcc at test time, run through the sandbox runner.

Run on a GPU machine:  python3 -m pytest -q -s -m gpu tests/sandbox/test_gpu_faults.py
Each test prints what it saw (outcome, root cause, degraded). Expected on sm_90 (H100/H200):
sm_80-only SASS -> no_kernel_image; sm_90a SASS -> ok; PTX-only compute_80 -> ok + degraded (JIT);
planted illegal address -> device_fault; planted __trap() -> device_fault; a kernel that never
finishes -> timeout, with the Python stack of the hung cell in the root cause.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from probe.cells import CellSpec
from probe.outcomes import Outcome
from probe.sandbox.runner import RunnerConfig, run_cells

pytestmark = pytest.mark.gpu
SRC = Path(__file__).parent / "cuda" / "fault.cu"


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next((str(p) for p in Path("/usr/local").glob("cuda*/bin/nvcc")), None)


def _device_cc() -> int | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout.split()
        major, minor = out[0].split(".")
        return int(major) * 10 + int(minor)
    except (OSError, subprocess.TimeoutExpired, IndexError, ValueError):
        return None


CC = _device_cc()
NVCC = _nvcc()
needs_gpu = pytest.mark.skipif(CC is None, reason="no NVIDIA GPU visible (nvidia-smi)")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = tmp_path_factory.mktemp("cuda")

    def _build(name: str, gencode: list[str]) -> Path:
        exe = out / name
        if not exe.exists():
            cmd = [NVCC, "-O2", "-o", str(exe), str(SRC), *gencode]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
            assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
        return exe

    return _build


def _run(exe: Path, mode: str, timeout_s: float = 180):
    cell = CellSpec(
        id=f"{exe.name}/{mode}",
        kind="fixture",
        target="tests.sandbox.cuda.fixture:run",
        params={"exe": str(exe), "mode": mode},
        timeout_s=timeout_s,
        isolate=True,
    )
    rep = run_cells([cell], RunnerConfig(run_id=f"g{uuid.uuid4().hex[:8]}", grace_s=2))
    r = rep.results[0]
    print(
        f"\n[gpu sm_{CC}] {cell.id}: outcome={r.outcome.value} degraded={r.degraded} {r.degraded_reasons} "
        f"root_cause={r.root_cause!r}"
    )
    return r


def native(cc: int) -> list[str]:
    return ["-gencode", f"arch=compute_{cc},code=sm_{cc}"]


@needs_gpu
@needs_nvcc
def test_sm80_sass_only_is_no_kernel_image(build):
    if CC == 80:
        pytest.skip("the device is sm_80: sm_80 SASS loads here")
    r = _run(build("sm80", ["-gencode", "arch=compute_80,code=sm_80"]), "ok")
    assert r.outcome is Outcome.NO_KERNEL_IMAGE, r.root_cause
    assert "no kernel image" in r.root_cause or "NoKernelImage" in r.root_cause


@needs_gpu
@needs_nvcc
def test_sm90a_sass_runs_ok(build):
    if CC != 90:
        pytest.skip(f"sm_90a SASS only loads on sm_90 (device is sm_{CC})")
    r = _run(build("sm90a", ["-gencode", "arch=compute_90a,code=sm_90a"]), "ok")
    assert r.outcome is Outcome.OK and not r.degraded


@needs_gpu
@needs_nvcc
def test_ptx_only_runs_via_jit_and_is_degraded(build):
    r = _run(build("ptx80", ["-gencode", "arch=compute_80,code=compute_80"]), "ok")
    assert r.outcome is Outcome.OK
    if CC > 80:
        assert r.degraded, r.log_excerpt
        assert any("PTX" in x for x in r.degraded_reasons)


@needs_gpu
@needs_nvcc
@pytest.mark.parametrize("mode", ["illegal", "trap"])
def test_planted_fault_is_device_fault(build, mode):
    r = _run(build(f"native{CC}", native(CC)), mode)
    assert r.outcome is Outcome.DEVICE_FAULT, (r.root_cause, r.log_excerpt)


@needs_gpu
@needs_nvcc
def test_kernel_that_never_finishes_is_a_timeout_with_its_stack(build):
    r = _run(build(f"native{CC}", native(CC)), "spin", timeout_s=15)
    assert r.outcome is Outcome.TIMEOUT, (r.root_cause, r.log_excerpt)
    assert "stuck at " in r.root_cause
    assert any("fixture.py" in f and " in run" in f for f in r.details["stack_at_timeout"])
