"""The runner against real misbehaving children (no GPU needed)."""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

import pytest

from probe.cells import CellSpec
from probe.outcomes import Outcome
from probe.sandbox import procs
from probe.sandbox.runner import run_cells
from tests.sandbox.conftest import M, run_pids


def spec(name: str, target: str | None = None, **kw) -> CellSpec:
    kw.setdefault("timeout_s", 30)
    return CellSpec(id=name, kind="fixture", target=M + (target or name), **kw)


def one(cfg, s: CellSpec):
    rep = run_cells([s], cfg)
    assert len(rep.results) == 1 and not rep.not_run
    return rep.results[0]


def gone(pid: int, wait: float = 3.0) -> bool:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not procs.pid_alive(pid):
            return True
        time.sleep(0.05)
    return not procs.pid_alive(pid)


@pytest.mark.parametrize("isolate", [False, True])
def test_ok_cell_records_probe_result(cfg, isolate):
    r = one(cfg, spec("ok", params={"x": 7}, isolate=isolate))
    assert r.outcome is Outcome.OK
    assert r.phase == "forward"
    assert r.timings == {"forward_ms_b1": 1.5}
    assert r.details["param"] == 7
    assert r.ref_error == 0.0
    assert r.worker == ("isolated" if isolate else "warm")
    assert "hello from" in (r.log_excerpt or "")
    assert r.peak_rss_mb and r.peak_rss_mb > 1
    assert r.started_at


@pytest.mark.parametrize("isolate", [False, True])
def test_segfault(cfg, isolate):
    r = one(cfg, spec("segfault", isolate=isolate, params={"phase": "process_weights"}))
    assert r.outcome is Outcome.CRASHED
    assert r.signal == "SIGSEGV"
    assert r.exit_code == -signal.SIGSEGV
    assert r.phase == "process_weights"  # from the phase pipe, not from stdout
    assert r.details["notes"]["kernel"] == "planted_null_deref"
    assert "Segmentation fault" in (r.root_cause or "")


def test_segfault_phase_survives_output_flood(cfg):
    r = one(cfg, spec("segfault", params={"phase": "process_weights", "noise_mb": 64}))
    assert r.outcome is Outcome.CRASHED and r.signal == "SIGSEGV"
    assert r.phase == "process_weights"
    assert r.details["output_bytes"] >= 64 << 20


def test_abort(cfg):
    r = one(cfg, spec("abort"))
    assert r.outcome is Outcome.CRASHED
    assert r.signal == "SIGABRT"
    assert r.phase == "process_weights"
    assert "SIGABRT" in (r.root_cause or "") or "Aborted" in (r.root_cause or "")


def test_exit_255_without_output(cfg):
    r = one(cfg, spec("exit255"))
    assert r.outcome is Outcome.CRASHED
    assert r.exit_code == 255 and r.signal is None
    assert r.phase == "process_weights"
    assert "255" in r.root_cause


def test_exit_0_without_result_is_a_crash(cfg):
    r = one(cfg, spec("exit0"))
    assert r.outcome is Outcome.CRASHED
    assert r.exit_code == 0
    assert "before reporting a result" in r.root_cause


def test_exception_with_traceback_is_classified(cfg):
    r = one(cfg, spec("raise_unsupported"))
    assert r.outcome is Outcome.UNSUPPORTED
    assert r.root_cause.startswith("ValueError: FooAttentionBackend does not support")
    assert r.phase == "build"
    assert r.details["exception"]["type"] == "ValueError"
    assert "Traceback (most recent call last)" in r.log_excerpt
    r2 = one(cfg, spec("raise_plain"))
    assert r2.outcome is Outcome.CRASHED and r2.root_cause == "RuntimeError: something odd happened"


def test_cuda_error_in_log_beats_exit_code_and_benign_lines(cfg):
    r = one(cfg, spec("cuda_fault_log"))
    assert r.outcome is Outcome.DEVICE_FAULT
    assert r.root_cause == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert r.exit_code == 1
    assert r.degraded is False  # degraded only marks runs that succeeded


def test_probe_reported_outcome(cfg):
    r = one(cfg, spec("report", params={"outcome": "wrong_output", "why": "max rel err 0.7 vs torch"}))
    assert r.outcome is Outcome.WRONG_OUTPUT
    assert r.root_cause == "max rel err 0.7 vs torch"
    assert r.ref_error == 0.7


@pytest.mark.slow
def test_infinite_loop_times_out(cfg):
    r = one(cfg, spec("hang", timeout_s=1.5))
    assert r.outcome is Outcome.TIMEOUT
    assert r.signal == "SIGTERM"
    assert r.phase == "forward"
    assert r.wall_s >= 1.5
    # the worker's Python stack, dumped on the runner's SIGUSR1 before the kill, says where it hung
    assert (
        "stuck at " in r.root_cause and "misbehave.py" in r.root_cause and r.root_cause.endswith(" in hang")
    )
    assert r.details["stack_at_timeout"][0].endswith(" in hang")
    assert any(" in _run_cell" in f for f in r.details["stack_at_timeout"])


@pytest.mark.slow
@pytest.mark.parametrize("setsid", [False, True])
def test_grandchild_ignoring_sigterm_is_killed(cfg, tmp_path, setsid):
    pidfile = tmp_path / "gc.pid"
    r = one(
        cfg, spec("ignore_term_and_hang", timeout_s=2, params={"pidfile": str(pidfile), "setsid": setsid})
    )
    assert r.outcome is Outcome.TIMEOUT
    assert r.signal == "SIGKILL"  # the child ignored SIGTERM too: killed after the grace period
    gc = int(pidfile.read_text())
    assert gone(gc), f"grandchild {gc} survived"
    if setsid:
        assert r.details.get("strays_killed", 0) >= 1


@pytest.mark.parametrize("isolate", [False, True])
def test_orphan_left_by_a_successful_cell_is_killed(cfg, tmp_path, isolate):
    pidfile = tmp_path / "gc.pid"
    r = one(cfg, spec("leave_orphan", isolate=isolate, params={"pidfile": str(pidfile)}))
    assert r.outcome is Outcome.OK
    gc = int(pidfile.read_text())
    assert gone(gc), f"setsid grandchild {gc} survived"
    assert r.details["strays_killed"] == 1


def test_memory_hog_under_rlimit_as(cfg):
    r = one(cfg, spec("memory_hog_rlimit", isolate=True, params={"limit_mb": 512}))
    assert r.outcome is Outcome.OOM
    assert "MemoryError" in r.root_cause
    assert r.phase == "weights"


@pytest.mark.slow
def test_rss_cap_kills_memory_hog(cfg):
    cfg.rss_cap_bytes = 300 << 20
    r = one(cfg, spec("memory_hog_slow", params={"mb": 4096}))
    assert r.outcome is Outcome.OOM
    assert "exceeded" in r.root_cause
    assert r.peak_rss_mb >= 300


def _vm_hwm_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.slow
def test_one_gigabyte_flood_keeps_parent_bounded(cfg):
    before = _vm_hwm_kb()
    r = one(cfg, spec("flood", params={"mb": 1024}, timeout_s=120))
    grew_mb = (_vm_hwm_kb() - before) / 1024
    assert r.details["output_bytes"] >= 1 << 30
    assert r.outcome is Outcome.NO_KERNEL_IMAGE  # the line after the flood is in the tail buffer
    assert "omitted" in r.log_excerpt or len(r.log_excerpt) <= cfg.excerpt_chars
    assert grew_mb < 100, f"parent peak RSS grew by {grew_mb:.0f} MiB while capturing 1 GiB"


@pytest.mark.parametrize("params", [{}, {"both": True}, {"both": True, "crash": True}])
def test_stdout_closed_early(cfg, params):
    r = one(cfg, spec("close_stdio", params=params))
    if params.get("crash"):
        assert r.outcome is Outcome.CRASHED and r.signal == "SIGSEGV"
    else:
        assert r.outcome is Outcome.OK
        assert r.details["closed"] is True
    assert "closing stdout now" in r.log_excerpt


def test_env_is_merged_per_cell(cfg):
    r = one(cfg, spec("env", params={"var": "PROBE_TEST_VAR"}, env={"PROBE_TEST_VAR": "hello"}))
    assert r.details["value"] == "hello"
    assert os.environ.get("PROBE_TEST_VAR") is None


def test_warm_worker_crash_containment(cfg):
    """A crash in cell 3 of 6: cell 3 recorded as crashed, cells 4-6 run in a fresh warm worker."""
    specs = [spec(f"c{i}", "sleepy", params={"s": 0.01}) for i in (1, 2)]
    specs.append(spec("c3", "segfault"))
    specs += [spec(f"c{i}", "sleepy", params={"s": 0.01}) for i in (4, 5, 6)]
    rep = run_cells(specs, cfg)
    by = {r.id: r for r in rep.results}
    assert [r.id for r in rep.results] == ["c1", "c2", "c3", "c4", "c5", "c6"]
    assert by["c3"].outcome is Outcome.CRASHED and by["c3"].worker == "warm" and by["c3"].signal == "SIGSEGV"
    for i in (1, 2, 4, 5, 6):
        assert by[f"c{i}"].outcome is Outcome.OK and by[f"c{i}"].worker == "warm"
    pids = {i: by[f"c{i}"].details["pid"] for i in (1, 2, 4, 5, 6)}
    assert pids[1] == pids[2], "cells 1-2 share one warm worker"
    assert pids[4] == pids[5] == pids[6], "cells 4-6 share the fresh worker"
    assert pids[4] != pids[1]
    assert rep.worker_restarts == 1


def test_cells_grouped_by_env_and_isolate_flag(cfg):
    specs = [
        spec("a1", "env", params={"var": "V"}, env={"V": "a"}),
        spec("b1", "env", params={"var": "V"}, env={"V": "b"}),
        spec("a2", "env", params={"var": "V"}, env={"V": "a"}),
        spec("i1", "env", params={"var": "V"}, env={"V": "a"}, isolate=True),
        spec("b2", "env", params={"var": "V"}, env={"V": "b"}),
    ]
    rep = run_cells(specs, cfg)
    by = {r.id: r for r in rep.results}
    assert {k: v.details["value"] for k, v in by.items()} == {
        "a1": "a",
        "b1": "b",
        "a2": "a",
        "i1": "a",
        "b2": "b",
    }
    assert by["a1"].details["pid"] == by["a2"].details["pid"]
    assert by["b1"].details["pid"] == by["b2"].details["pid"]
    assert by["i1"].worker == "isolated" and by["i1"].details["pid"] not in (by["a1"].details["pid"],)


def test_confirm_crashes_reruns_isolated(cfg):
    cfg.confirm_crashes = True
    r = one(cfg, spec("segfault"))
    assert r.worker == "isolated" and r.outcome is Outcome.CRASHED
    assert r.details["warm_result"]["signal"] == "SIGSEGV"


def test_restart_cap_falls_back_to_isolated(cfg):
    cfg.max_restarts = 1
    rep = run_cells([spec("s1", "segfault"), spec("s2", "segfault"), spec("k", "sleepy")], cfg)
    by = {r.id: r for r in rep.results}
    assert by["s1"].worker == "warm"
    assert by["s2"].worker == "isolated" and by["k"].worker == "isolated"
    assert by["k"].outcome is Outcome.OK


@pytest.mark.slow
def test_parallel_jobs_respect_memory_budget(cfg):
    from probe.sandbox.memory import MemoryPolicy

    cfg.jobs = 3
    cfg.memory = MemoryPolicy(budget_gib=10, worker_overhead_gib=0)
    specs = [spec(f"m{i}", "sleepy", params={"s": 0.3, "mem_gib": 6}) for i in range(3)]
    specs += [spec(f"n{i}", "sleepy", params={"s": 0.3, "mem_gib": 1}) for i in range(3)]
    rep = run_cells(specs, cfg)
    assert len(rep.results) == 6 and all(r.outcome is Outcome.OK for r in rep.results)
    spans = {r.id: (r.details["t0"], r.details["t1"]) for r in rep.results}
    big = sorted(v for k, v in spans.items() if k.startswith("m"))
    for (_, end), (start, _) in itertools.pairwise(big):
        assert start >= end, "two 6-GiB cells ran at once under a 10-GiB budget"
    # the small cells did run alongside the big ones (-j 3 is used)
    small = [v for k, v in spans.items() if k.startswith("n")]
    assert any(s0 < e1 and s1 < e0 for (s0, e0) in small for (s1, e1) in big)


def test_budget_counts_a_per_worker_overhead():
    from probe.sandbox.memory import MemoryPolicy

    pol = MemoryPolicy(budget_gib=140, worker_overhead_gib=6)
    assert pol.fits(56, 0, 0)  # alone: always
    assert pol.fits(56, 56, 1)  # 56 + 56 + 2 x 6 = 124
    assert not pol.fits(20, 112, 2)  # 112 + 20 + 3 x 6 = 150 > 140
    assert pol.fits(2, 112, 2)  # 112 + 2 + 18 = 132
    assert not MemoryPolicy(budget_gib=140, worker_overhead_gib=0).fits(30, 112, 2)


def test_unified_memory_limits_from_meminfo():
    from probe.sandbox.memory import GIB, MemoryPolicy

    pol = MemoryPolicy(
        unified=True,
        reserve_gib=8,
        reserve_frac=0.15,
        meminfo={"MemTotal": 122 * GIB, "MemAvailable": 100 * GIB},
    )
    lim = pol.unified_limits(None, free_slots=1, running=0)
    assert lim is not None
    reserve = max(8, 0.15 * 122)
    assert lim.host_reserve_gib == pytest.approx(reserve, abs=0.01)
    assert lim.mem_share_gib == pytest.approx(100 - reserve, abs=0.01)
    assert lim.gpu_memory_utilization <= (122 - reserve) / 122
    assert lim.rss_cap_bytes == pytest.approx((100 - reserve) * GIB, rel=1e-3)
    assert list(lim.as_dict()) == [
        "mem_share_gib",
        "gpu_memory_utilization",
        "host_available_gib",
        "host_reserve_gib",
        "rss_cap_bytes",
        "host_critical_bytes",
    ]
    two = pol.unified_limits(None, free_slots=2, running=0)
    assert two is not None and two.mem_share_gib == pytest.approx((100 - reserve) / 2, abs=0.01)
    # a cell that needs more than its share waits while others run, runs anyway when alone
    assert pol.unified_limits(90.0, free_slots=1, running=1) is None
    assert pol.unified_limits(90.0, free_slots=1, running=0) is not None


def test_unified_memory_share_reaches_the_probe(cfg):
    from probe.sandbox.memory import GIB, MemoryPolicy

    cfg.memory = MemoryPolicy(
        unified=True,
        reserve_gib=1,
        reserve_frac=0.0,
        meminfo={"MemTotal": 64 * GIB, "MemAvailable": 33 * GIB},
    )
    r = one(cfg, spec("env", params={"var": "X", "gpu_memory_utilization": 0.9}))
    want = 0.5  # (33 - 1) / 64
    assert r.details["gmu_param"] == want and r.details["ctx_gmu"] == want
    assert r.details["gmu_env"] == str(want)
    assert r.params == {"var": "X", "gpu_memory_utilization": 0.9}  # the recorded spec is untouched


def test_duplicate_ids_refused(cfg):
    from probe.errors import UsageError

    with pytest.raises(UsageError):
        run_cells([spec("ok"), spec("ok")], cfg)


def test_no_process_of_the_run_survives(cfg):
    run_cells([spec("hang", timeout_s=0.5), spec("ok")], cfg)
    assert run_pids(cfg.run_id) == []


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.mark.slow
def test_exclusive_cells_have_the_gpu_to_themselves(cfg):
    """Engine-sized cells (``params.exclusive``) never run beside another cell, even under -j 3."""
    cfg.jobs = 3
    specs = [spec(f"s{i}", "sleepy", params={"s": 0.3}) for i in range(4)]
    specs.insert(2, spec("x0", "sleepy", params={"s": 0.3, "exclusive": True}))
    specs.append(spec("x1", "sleepy", params={"s": 0.3, "exclusive": True}))
    rep = run_cells(specs, cfg)
    assert len(rep.results) == 6 and all(r.outcome is Outcome.OK for r in rep.results)
    spans = {r.id: (r.details["t0"], r.details["t1"]) for r in rep.results}
    for x in ("x0", "x1"):
        others = [v for k, v in spans.items() if k != x]
        assert not any(_overlap(spans[x], o) for o in others), f"{x} shared the GPU"
    small = [v for k, v in spans.items() if k.startswith("s")]
    assert any(_overlap(a, b) for a, b in itertools.combinations(small, 2)), "-j 3 ran nothing in parallel"


@pytest.mark.slow
def test_timed_sections_exclude_other_cells_gpu_phases(cfg):
    """Under -j N the runner hands children a GPU lock: shared phases overlap, a timed loop is alone."""
    cfg.jobs = 3
    specs = [spec(f"g{i}", "gpu_locked", params={"shared_s": 0.3, "exclusive_s": 0.15}) for i in range(6)]
    rep = run_cells(specs, cfg)
    assert all(r.outcome is Outcome.OK for r in rep.results), [r.root_cause for r in rep.results]
    assert all(r.details["lock_dir"] for r in rep.results)
    assert not Path(rep.results[0].details["lock_dir"]).exists(), "lock directory left behind"
    spans = [(r.id, name, tuple(v)) for r in rep.results for name, v in r.details["spans"].items()]
    for cid, name, span in spans:
        if name != "exclusive":
            continue
        clash = [(c, n) for c, n, s in spans if c != cid and _overlap(span, s)]
        assert not clash, f"timed loop of {cid} overlapped {clash}"
    shared = [s for _, n, s in spans if n == "shared"]
    assert any(_overlap(a, b) for a, b in itertools.combinations(shared, 2)), "shared phases never overlapped"


def test_single_job_gets_no_gpu_lock(cfg):
    r = one(cfg, spec("g", "gpu_locked", params={"shared_s": 0.01, "exclusive_s": 0.01}))
    assert r.outcome is Outcome.OK and r.details["lock_dir"] is None


def test_warm_worker_hands_back_the_cuda_cache_after_each_cell(cfg, tmp_path):
    """After a cell that used CUDA the worker empties torch's cache (success or failure) and records
    the cell's peak allocation; the next cell starts from fresh peak statistics."""
    log = tmp_path / "calls.txt"
    ok = {"log": str(log), "peak_bytes": 3 * 2**30}
    rep = run_cells(
        [
            spec("a", "fake_torch_cell", params=ok),
            spec("b", "fake_torch_cell", params={**ok, "fail": True}),
        ],
        cfg,
    )
    by = {r.id: r for r in rep.results}
    assert by["a"].outcome is Outcome.OK and by["a"].details["gpu_peak_gib"] == 3.0
    assert by["b"].outcome is not Outcome.OK and by["b"].worker == "warm"
    calls = log.read_text().split()
    # cell a: settle (peak, empty, reset); cell b: reset at start, then settle after the failure
    assert calls.count("empty_cache") == 2
    assert calls.count("max_memory_allocated") == 2
    assert calls[-3:] == ["max_memory_allocated", "empty_cache", "reset_peak_memory_stats"]
