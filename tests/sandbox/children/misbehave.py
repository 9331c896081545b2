"""Probe targets that misbehave on purpose (run inside the sandboxed child by the runner tests)."""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_SLEEPER = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(1)\n"


def ok(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("forward")
    print("hello from", os.getpid(), flush=True)
    return {
        "timings": {"forward_ms_b1": 1.5},
        "details": {"pid": os.getpid(), "param": params.get("x")},
        "ref_error": 0.0,
    }


def env(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {
        "details": {
            "value": os.environ.get(params["var"]),
            "pid": os.getpid(),
            "gmu_env": os.environ.get("PROBE_GPU_MEMORY_UTILIZATION"),
            "gmu_param": params.get("gpu_memory_utilization"),
            "ctx_gmu": ctx.gpu_memory_utilization,
        }
    }


def report(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"outcome": params["outcome"], "ref_error": 0.7, "root_cause": params.get("why")}


def segfault(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase(params.get("phase", "forward"))
    ctx.note("kernel", "planted_null_deref")
    if params.get("noise_mb"):
        chunk = b"x" * 1023 + b"\n"
        for _ in range(params["noise_mb"] * 1024):
            os.write(1, chunk)
    sys.stdout.flush()
    ctypes.string_at(0)
    return {}


def abort(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("process_weights")
    os.abort()


def exit255(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("process_weights")
    os._exit(255)


def exit0(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    os._exit(0)


def raise_unsupported(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("build")
    raise ValueError("FooAttentionBackend does not support head_size=999 on this device")


def raise_plain(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("forward")
    raise RuntimeError("something odd happened")


def cuda_fault_log(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("forward")
    print(
        "INFO 05-10 12:00:00 [fused_moe.py:668] Using default MoE config. Performance might be sub-optimal!"
    )
    print("RuntimeError: CUDA error: an illegal memory access was encountered", file=sys.stderr)
    print(
        "Warning: CUDA warning: an illegal memory access was encountered (function ~CUDAEvent)",
        file=sys.stderr,
    )
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(1)


def hang(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("forward")
    print("about to spin", flush=True)
    while True:
        pass


def ignore_term_and_hang(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Spawn a grandchild that ignores SIGTERM (optionally in its own session), then hang ourselves
    while ignoring SIGTERM too."""
    gc = subprocess.Popen([sys.executable, "-c", _SLEEPER], start_new_session=bool(params.get("setsid")))
    Path(params["pidfile"]).write_text(str(gc.pid))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ctx.phase("forward")
    while True:
        time.sleep(0.1)


def leave_orphan(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Return ok, leaving a setsid'ed, SIGTERM-ignoring grandchild behind."""
    gc = subprocess.Popen(
        [sys.executable, "-c", _SLEEPER],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    Path(params["pidfile"]).write_text(str(gc.pid))
    return {"details": {"grandchild": gc.pid}}


def memory_hog_rlimit(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    limit = params.get("limit_mb", 512) << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    ctx.phase("weights")
    hoard = []
    while True:
        hoard.append(bytearray(16 << 20))


def memory_hog_slow(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("weights")
    hoard = []
    for _ in range(params.get("mb", 2048) // 16):
        b = bytearray(16 << 20)
        for i in range(0, len(b), 4096):
            b[i] = 1
        hoard.append(b)
        time.sleep(0.02)
    return {"details": {"held_mb": len(hoard) * 16}}


def flood(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("forward")
    chunk = (b"flood " * 170 + b"flood\n")[: 1 << 10].ljust(1023, b"!") + b"\n"
    chunk = chunk * 1024  # 1 MiB of 1 KiB lines
    for _ in range(params.get("mb", 1024)):
        os.write(1, chunk)
    print("RuntimeError: CUDA error: no kernel image is available for execution on the device", flush=True)
    os._exit(1)


def close_stdio(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    print("closing stdout now", flush=True)
    os.close(1)
    if params.get("both"):
        os.close(2)
    time.sleep(0.3)
    if params.get("crash"):
        ctypes.string_at(0)
    return {"details": {"closed": True}}


def sleepy(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("forward")
    t0 = time.time()
    time.sleep(params.get("s", 0.1))
    return {"details": {"pid": os.getpid(), "t0": t0, "t1": time.time()}}


def gpu_locked(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """A shared phase (set-up) then an exclusive one (a timed loop), like the MoE probe under -j N."""
    from probe.sandbox import gpulock

    spans: dict[str, list[float]] = {}
    with gpulock.gpu_shared():
        t0 = time.time()
        time.sleep(params.get("shared_s", 0.2))
        spans["shared"] = [t0, time.time()]
    with gpulock.gpu_exclusive():
        t0 = time.time()
        time.sleep(params.get("exclusive_s", 0.2))
        spans["exclusive"] = [t0, time.time()]
    return {"details": {"spans": spans, "lock_dir": os.environ.get(gpulock.ENV_VAR)}}


def fake_torch_cell(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Stands a fake ``torch`` with an initialised CUDA in sys.modules, as a real probe leaves it."""
    import types

    log = Path(params["log"])

    def rec(name: str, value: Any = None) -> Any:
        with log.open("a") as f:
            f.write(name + "\n")
        return value

    cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        max_memory_allocated=lambda: rec("max_memory_allocated", int(params["peak_bytes"])),
        empty_cache=lambda: rec("empty_cache"),
        reset_peak_memory_stats=lambda: rec("reset_peak_memory_stats"),
    )
    sys.modules["torch"] = types.SimpleNamespace(cuda=cuda)  # type: ignore[assignment]
    if params.get("fail"):
        raise RuntimeError("cell failed after touching the GPU")
    return {"details": {"pid": os.getpid()}}
