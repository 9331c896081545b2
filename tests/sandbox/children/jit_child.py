"""Probe targets that compile (a fake compiler process) for the runner's JIT-budget tests."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any


def _fake_compiler(name: str) -> Path:
    sleep = shutil.which("sleep")
    assert sleep is not None
    path = Path(tempfile.mkdtemp(prefix="probe-jit-")) / name
    path.symlink_to(sleep)
    return path


def compiles(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Run a process named like a compiler (``ninja``) for ``compile_s`` seconds, then report ok."""
    ctx.phase("process_weights")
    print("[1/1] /usr/local/cuda/bin/nvcc -c fused_moe_90.cu -o fused_moe_90.cuda.o", flush=True)
    subprocess.run([str(_fake_compiler("ninja")), str(params.get("compile_s", 3))], check=True)
    return {"details": {"compiled": True}}


def hangs(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """No compiler: just sleeps (a hang for the runner)."""
    ctx.phase("forward")
    subprocess.run(["sleep", str(params.get("sleep_s", 30))], check=True)
    return {}


def driver_jit(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """In-process compiling (the CUDA driver's PTX JIT): no process, no log line; the probe declares it."""
    import time

    ctx.note("jit", "driver JIT of compute_80 PTX (fixture)")
    ctx.phase("jit")
    time.sleep(float(params.get("jit_s", 3)))
    ctx.phase("forward")
    return {"details": {"compiled": True}}


_NVCC = """import sys, time
from pathlib import Path
time.sleep(float(sys.argv[1]))
Path(sys.argv[sys.argv.index("-o") + 1]).write_bytes(b"")
"""


def builds(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """A module of ``units`` translation units built one after another by a process named ``nvcc``
    (``step_s`` each), with the ``build.ninja`` beside the objects as FlashInfer's JIT writes it; the
    link is the last step. ``build_dir``: where (default a new temporary folder); objects already
    there are not built again (an interrupted build goes on)."""
    import sys

    ctx.phase("build")
    print("[flashinfer] Compiling module (fixture)", flush=True)
    out = Path(params.get("build_dir") or tempfile.mkdtemp(prefix="probe-jit-build-"))
    out.mkdir(parents=True, exist_ok=True)
    units = int(params.get("units", 4))
    objs = [out / f"k{i}.cuda.o" for i in range(units)]
    lines = ["rule cuda_compile", "  command = nvcc -c $in -o $out", "rule link"]
    lines.append("  command = c++ $in -o $out")
    lines += [f"build {o}: cuda_compile /src/k{i}.cu" for i, o in enumerate(objs)]
    lines.append(f"build {out / 'module.so'}: link " + " ".join(map(str, objs)))
    (out / "build.ninja").write_text("\n".join(lines) + "\n")
    if params.get("name_build_file", True):  # as the JIT pre-pass names FlashInfer's module
        ctx.note("jit_build_file", str(out / "build.ninja"))
    nvcc = Path(tempfile.mkdtemp(prefix="probe-jit-")) / "nvcc"
    nvcc.write_text(f"#!{sys.executable}\n{_NVCC}")
    nvcc.chmod(0o755)
    for i, o in enumerate(objs):
        if not o.exists():
            step = str(params.get("step_s", 0.5))
            subprocess.run([str(nvcc), step, "-c", f"k{i}.cu", "-o", str(o)], check=True)
    (out / "module.so").write_bytes(b"")
    ctx.phase("forward")
    return {"details": {"built": units}}
