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
