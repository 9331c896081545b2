"""Tensor-parallel-like cells on CPU: every rank process of a cell is gone after a timeout, and the
after-cell GPU check (``probe.sandbox.gpu_procs``) against a fake ``nvidia-smi`` finds, kills and
records a process that escaped both the process group and the cell token."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from probe.cells import CellSpec
from probe.outcomes import Outcome
from probe.sandbox import gpu_procs, procs
from probe.sandbox.runner import run_cells

R = "tests.sandbox.children.ranks:"

FAKE_SMI = """#!/bin/sh
# a fake nvidia-smi: -L lists $FAKE_SMI_GPUS GPUs; --query-compute-apps lists the live pids of $FAKE_SMI_PIDS
if [ "$1" = "-L" ]; then
  i=0; while [ $i -lt "${FAKE_SMI_GPUS:-2}" ]; do echo "GPU $i: Fake GPU (UUID: GPU-$i)"; i=$((i+1)); done
  exit 0
fi
[ -f "$FAKE_SMI_PIDS" ] || exit 0
while read pid; do
  [ -n "$pid" ] || continue
  if [ -r /proc/$pid/status ] && ! grep -q '^State:.*[ZX]' /proc/$pid/status; then
    echo "$pid, python3, 1234 MiB"
  fi
done < "$FAKE_SMI_PIDS"
"""


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake ``nvidia-smi`` first on PATH; the pids it lists are read from the returned file."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "nvidia-smi"
    exe.write_text(FAKE_SMI)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    pids = tmp_path / "gpu_pids.txt"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_SMI_PIDS", str(pids))
    return pids


def _pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _all_gone(pids: list[int], wait_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + wait_s
    alive = [p for p in pids if procs.pid_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if procs.pid_alive(p)]
    return alive


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_timeout_kills_every_rank_including_a_setsid_one(cfg, tmp_path: Path, method: str) -> None:
    pidfile, gpu_file = tmp_path / "ranks.txt", tmp_path / "gpu.txt"
    spec = CellSpec(
        id=f"ranks/{method}",
        kind="fixture",
        target=R + "two_ranks_hang",
        params={"pidfile": str(pidfile), "gpu_file": str(gpu_file), "method": method, "gpus": 2},
        timeout_s=8 if method == "spawn" else 4,
        isolate=True,
    )
    rep = run_cells([spec], cfg)
    res = rep.results[0]
    ranks = _pids(pidfile)
    assert len(ranks) == 2, f"the ranks did not start: {res.log_excerpt}"
    assert res.outcome is Outcome.TIMEOUT and res.phase == "collective"
    assert not _all_gone(ranks), "a rank survived the cell's teardown"
    assert res.details.get("strays_killed", 0) >= 1  # the setsid rank, found by its inherited token
    assert "gpu_check" in res.details  # a multi-GPU cell records its after-teardown check (skipped here)


@pytest.mark.slow
def test_a_process_nvidia_smi_does_not_list_is_no_gpu_leftover(cfg, tmp_path: Path, fake_smi: Path) -> None:
    pidfile = tmp_path / "escaper.txt"
    spec = CellSpec(
        id="escaper",
        kind="fixture",
        target=R + "escaper_then_ok",
        params={"pidfile": str(pidfile), "gpus": 2},
        timeout_s=20,
        isolate=True,
    )
    try:
        rep = run_cells([spec], cfg)
        res = rep.results[0]
        escaper = _pids(pidfile)
        assert len(escaper) == 1
        assert res.outcome is Outcome.OK
    finally:
        for pid in _pids(pidfile):
            procs.signal_pids([pid], 9)
    # nvidia-smi listed nothing during the check: clean, nothing recorded as a leftover
    assert res.details["gpu_check"] == {"clean": True, "leftovers": 0}
    assert "gpu_leftovers" not in res.details


@pytest.mark.slow
def test_escaped_leftover_listed_by_nvidia_smi_is_killed(cfg, tmp_path: Path, fake_smi: Path) -> None:
    pidfile = tmp_path / "escaper.txt"
    os.symlink(pidfile, fake_smi)  # nvidia-smi lists whatever the escaper wrote: the escaper itself
    spec = CellSpec(
        id="escaper",
        kind="fixture",
        target=R + "escaper_then_ok",
        params={"pidfile": str(pidfile), "gpus": 2},
        timeout_s=20,
        isolate=True,
    )
    try:
        res = run_cells([spec], cfg).results[0]
        escaper = _pids(pidfile)
    finally:
        for pid in _pids(pidfile):
            procs.signal_pids([pid], 9)
    assert res.outcome is Outcome.OK
    assert [a["pid"] for a in res.details["gpu_leftovers"]] == escaper
    assert res.details["gpu_leftovers"][0]["used_memory"] == "1234 MiB"
    assert res.details["gpu_check"]["clean"] is False
    assert "still_listed" not in res.details["gpu_check"]
    assert not _all_gone(escaper)


def test_check_skips_without_nvidia_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    check = gpu_procs.check_after_cell({os.getpid()}, "tok")
    assert check.skipped == "nvidia-smi not found on PATH"
    assert check.details() == {"skipped": "nvidia-smi not found on PATH"}
    assert gpu_procs.visible_gpu_count() is None


def test_unrelated_gpu_processes_are_left_alone(fake_smi: Path) -> None:
    fake_smi.write_text(f"{os.getpid()}\n")  # this test process: no token of the cell, not in its tree
    check = gpu_procs.check_after_cell({1_999_999}, "t-nope")
    assert check.clean and procs.pid_alive(os.getpid())


def test_parse_compute_apps() -> None:
    text = "123, /usr/bin/python3, 40514 MiB\n\nbad line\n456, VLLM::Worker_TP1, 1 MiB\n"
    apps = gpu_procs.parse_compute_apps(text)
    assert [(a.pid, a.process_name, a.used_memory) for a in apps] == [
        (123, "/usr/bin/python3", "40514 MiB"),
        (456, "VLLM::Worker_TP1", "1 MiB"),
    ]


@pytest.mark.parametrize(("cvd", "want"), [(None, 4), ("0,1", 2), ("1", 1), ("", 0), ("0,-1,2", 1)])
def test_visible_gpu_count(
    fake_smi: Path, monkeypatch: pytest.MonkeyPatch, cvd: str | None, want: int
) -> None:
    monkeypatch.setenv("FAKE_SMI_GPUS", "4")
    if cvd is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
    assert gpu_procs.visible_gpu_count() == want
