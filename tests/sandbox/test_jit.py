"""probe.sandbox.jit: compile activity of a cell (processes + JIT log lines), deadlines, caches."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from probe.sandbox import jit


class FakeProcs:
    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.argv: dict[int, list[str]] = {}

    def comm(self, pid: int) -> str | None:
        return self.names.get(pid)

    def cmdline(self, pid: int) -> list[str]:
        return self.argv.get(pid, [])


def _watch(fp: FakeProcs, **kw) -> jit.CompileWatch:
    return jit.CompileWatch(read_comm=fp.comm, read_cmdline=fp.cmdline, clock=lambda: 0.0, **kw)


def test_compiler_processes_count_as_compile_time_and_stretch_the_deadline():
    fp = FakeProcs()
    fp.names = {10: "python3", 11: "ninja", 12: "nvcc", 13: "cicc"}
    fp.argv = {
        11: ["ninja", "-v", "-C", "/r/.cache/flashinfer/0.6.14/90/cached_ops/fused_moe_90", "-f", "x.ninja"],
        12: ["nvcc", "-c", "/x/csrc/fused_moe/cutlass_fused_moe_kernels.cu", "-o", "k.cuda.o"],
        13: ["cicc", "--orig_src_file_name", "k.cu"],
    }
    w = _watch(fp, jit_timeout_s=100.0)
    assert w.sample([10], now=0.0) is False
    assert w.sample([10, 11, 12, 13], now=1.0) is True
    assert w.sample([10, 11, 12], now=31.0) is True
    # an interval counts when either end saw a compiler (generous: a build is never cut short)
    assert w.compile_seconds() == pytest.approx(31.0)
    assert w.deadline(300.0) == pytest.approx(331.0)
    assert "fused_moe_90" in w.what and "cutlass_fused_moe_kernels.cu" in w.what
    assert w.last_activity().startswith("ninja, nvcc building")
    cause = w.stopped_cause()
    assert cause is not None and cause.startswith("compile budget exceeded after 31 s, units built unknown")
    assert "JIT-compiling fused_moe_90" in cause
    assert w.details() == {
        "compile_s": 31.0,
        "jit_tools": ["cicc", "ninja", "nvcc"],
        "jit_targets": ["fused_moe_90", "cutlass_fused_moe_kernels.cu", "k.cu"],
    }


def test_compile_budget_is_capped_by_jit_timeout():
    fp = FakeProcs()
    fp.names = {5: "ptxas"}
    w = _watch(fp, jit_timeout_s=60.0)
    for t in range(0, 200, 10):
        w.sample([5], now=float(t))
    assert w.compile_seconds() == pytest.approx(190.0)
    assert w.deadline(300.0) == pytest.approx(360.0)
    assert w.budget_spent()
    assert "JIT time limit of 60 s was spent" in (w.stopped_cause() or "")


def test_no_compiler_no_extension_and_no_cause():
    fp = FakeProcs()
    fp.names = {1: "python3", 2: "pt_main_thread"}
    w = _watch(fp)
    for t in range(5):
        assert w.sample([1, 2], now=float(t)) is False
    assert w.compile_seconds() == 0.0
    assert w.deadline(300.0) == 300.0
    assert w.stopped_cause() is None and w.details() == {}


def test_jit_log_lines_count_while_they_are_recent():
    w = _watch(FakeProcs(), linger_s=10.0)
    w.sample([], now=0.0)
    # a line split over two reads, with a logger prefix
    w.feed_output(b"2026-11-23 10:00:01,000 - INFO - core.py:1 - flashinfer.jit: Loading JIT", now=1.0)
    w.feed_output(b" ops: batch_prefill_with_kv_cache_dtype_q_bf16\nother line\n", now=1.0)
    assert w.lines == 1
    assert w.last_line == "flashinfer.jit: Loading JIT ops: batch_prefill_with_kv_cache_dtype_q_bf16"
    assert w.sample([], now=5.0) is True
    cause = w.stopped_cause() or ""
    assert "(JIT-compiling flashinfer.jit: Loading JIT ops: batch_prefill" in cause
    assert w.sample([], now=30.0) is False  # the line is 29 s old: no longer compiling
    assert w.compile_seconds() == pytest.approx(30.0)  # 0->5 s (line seen at 1 s) and 5->30 s (was compiling)
    assert w.stopped_cause() is None
    assert w.details()["jit_log_lines"] == 1


def test_ninja_progress_and_unrelated_lines():
    w = _watch(FakeProcs())
    w.feed_output(b"[1/4] /usr/local/cuda/bin/nvcc -c a.cu -o a.cuda.o\n[2/4] c++ -c b.cpp\n", now=0.0)
    w.feed_output(b"[1/4] step one of the test suite\nLoading weights took 0.1 s\n", now=0.0)
    assert w.lines == 2


def test_compile_target():
    assert jit.compile_target("ninja", ["ninja", "-C", "/a/b/mod_x"]) == "mod_x"
    assert jit.compile_target("ninja", ["ninja", "-f", "/a/tmp/flashinfer_jit.ninja"]) == "tmp"
    assert jit.compile_target("nvcc", ["nvcc", "-O3", "x/y/kern.cu", "-o", "kern.o"]) == "kern.cu"
    assert jit.compile_target("ptxas", ["ptxas", "-arch=sm_90a"]) is None


def test_a_real_descendant_named_like_a_compiler_is_seen(tmp_path: Path):
    sleep = shutil.which("sleep")
    if sleep is None:
        pytest.skip("no sleep binary")
    fake = tmp_path / "ninja"
    os.symlink(sleep, fake)
    # a shell child that starts the "compiler": a grandchild of this test process
    proc = subprocess.Popen(["sh", "-c", f"{fake} 30 & wait"])
    try:
        w = jit.CompileWatch(linger_s=0.0)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not w.sample(jit.descendants(os.getpid())):
            time.sleep(0.05)
        assert w.tools == {"ninja"}
        assert proc.pid in jit.descendants(os.getpid())
    finally:
        subprocess.run(["pkill", "-P", str(proc.pid)], check=False)
        proc.kill()
        proc.wait()


def test_cache_dirs_follow_the_libraries_env_vars(tmp_path: Path):
    env = {"HOME": str(tmp_path), "TRITON_CACHE_DIR": str(tmp_path / "tc"), "USER": "u"}
    d = jit.cache_dirs(env)
    assert d["flashinfer"] == tmp_path / ".cache" / "flashinfer"
    assert d["triton"] == tmp_path / "tc"
    assert d["deep_gemm"] == tmp_path / ".deep_gemm"
    assert d["torch_inductor"] == Path("/tmp/torchinductor_u")
    assert d["cuda_driver"] == tmp_path / ".nv" / "ComputeCache"
    env["FLASHINFER_WORKSPACE_BASE"] = "/ws"
    assert jit.cache_dirs(env)["flashinfer"] == Path("/ws/.cache/flashinfer")


def test_cache_report_sizes(tmp_path: Path):
    ops = tmp_path / ".cache" / "flashinfer" / "0.6.14" / "90" / "cached_ops" / "m"
    ops.mkdir(parents=True)
    (ops / "m.so").write_bytes(b"x" * 1000)
    (ops / "build.ninja").write_text("rule")
    rep = jit.cache_report({"HOME": str(tmp_path), "USER": "nobody-probe-test"})
    assert rep["flashinfer"]["exists"] and rep["flashinfer"]["files"] == 2
    assert rep["flashinfer"]["bytes"] == 1004
    want = {"path": str(tmp_path / ".triton" / "cache"), "exists": False, "bytes": 0, "files": 0}
    assert rep["triton"] == want


def test_update_reads_new_capture_bytes_and_rate_limits_proc_reads():
    from probe.sandbox.capture import HeadTail

    fp = FakeProcs()
    fp.names = {7: "nvcc"}
    reads: list[int] = []

    def comm(pid: int) -> str | None:
        reads.append(pid)
        return fp.comm(pid)

    w = jit.CompileWatch(read_comm=comm, read_cmdline=fp.cmdline, clock=lambda: 0.0, min_interval_s=1.0)
    cap = HeadTail(head=16, tail=64)
    cap.feed(b"starting\n[1/2] /usr/bin/nvcc -c a.cu -o a.o\n")
    w.update([7], cap, now=0.0)
    w.update([7], cap, now=0.5)  # no new bytes, /proc not read again yet
    assert w.lines == 1 and reads == [7]
    cap.feed(b"x" * 200 + b"\n[2/2] c++ -shared a.o -o m.so\n")  # more than the tail keeps
    w.update([7], cap, now=1.5)
    assert w.lines == 2 and reads == [7, 7]
    assert w.compile_seconds() == pytest.approx(1.5)
    assert w.deadline(10.0) == pytest.approx(11.5)


def test_cells_keep_driver_ptx_jit_results_unless_the_caller_sized_the_cache():
    from probe.sandbox.config import RunnerConfig
    from probe.sandbox.worker_parent import DRIVER_JIT_CACHE_BYTES, _child_env

    env = _child_env(RunnerConfig(base_env={"PATH": "/bin"}), {}, "tok")
    assert env["CUDA_CACHE_MAXSIZE"] == DRIVER_JIT_CACHE_BYTES == str(4 << 30)
    mine = _child_env(RunnerConfig(base_env={"CUDA_CACHE_MAXSIZE": "1024"}), {}, "tok")
    assert mine["CUDA_CACHE_MAXSIZE"] == "1024"
