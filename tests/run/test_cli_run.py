"""``probe run`` flags of a budgeted run: --budget, --dry-run, --estimates, --reuse (real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.run.conftest import FAKE_GPU_BIN
from tests.sandbox.conftest import M

ROOT = Path(__file__).resolve().parents[2]


def _probe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = f"{FAKE_GPU_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    env = dict(os.environ, PATH=path, PYTHONPATH=str(ROOT), PROBE_CACHE_DIR=str(cwd / "cache"))
    cmd = [sys.executable, "-m", "probe", "run", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def _plan(tmp_path: Path) -> str:
    cells = [
        {"id": f"moe/marlin/{i}", "kind": "moe", "target": M + "ok", "params": {"backend": "marlin"}}
        for i in range(3)
    ]
    slow = {"backend": "triton", "s": 60}
    cells.append({"id": "moe/triton/slow", "kind": "moe", "target": M + "sleepy", "params": slow})
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(cells))
    return str(path)


@pytest.mark.slow
def test_dry_run_prints_the_order_the_estimates_and_the_cut(tmp_path):
    journal = tmp_path / "earlier.jsonl"
    row = {"id": "moe/triton/slow", "kind": "moe", "params": {"backend": "triton"}, "outcome": "ok"}
    rows = [{"probe_journal": 1, "run_id": "r0"}, {**row, "wall_s": 50.0}]
    journal.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ("--budget", "40s", "--dry-run", "--estimates", str(journal), "--models", "122b")
    r = _probe("--plan-file", _plan(tmp_path), *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    slow = next(x for x in lines if x.rstrip().endswith("moe/triton/slow"))
    assert " 50.0s  journal " in slow and "Triton kernels" in slow
    assert " 1.0s  default " in next(x for x in lines if x.rstrip().endswith("moe/marlin/0"))
    assert any("the budget ends about here" in x for x in lines)
    assert "4 cells to run" in lines[-1] and "budget 40 s" in lines[-1]
    assert not (tmp_path / "probe-journal.jsonl").exists()  # nothing ran


@pytest.mark.slow
def test_a_budgeted_run_exits_0_with_every_cell_measured_or_not_run(tmp_path):
    plan, matrix = _plan(tmp_path), str(tmp_path / "m.json")
    args = ("--budget", "20s", "--grace", "1", "--journal", str(tmp_path / "j.jsonl"), "-o", matrix)
    r = _probe("--plan-file", plan, *args, "--heartbeat", "2", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 cell(s) not_run (unknown, not failures): 1 run budget spent" in r.stdout
    assert "moe/triton/slow: running " in r.stderr  # a heartbeat while it ran
    assert "of 20s] moe/marlin/0: ok" in r.stderr
    cells = {c["id"]: c for c in json.loads(Path(matrix).read_text())["cells"]}
    assert cells["moe/triton/slow"]["outcome"] == "not_run" and cells["moe/marlin/2"]["outcome"] == "ok"
    assert cells["moe/marlin/2"]["details"]["reuse"]["inputs"]["gpu"] == "NVIDIA H200 (9.0)"

    args = ("--budget", "12s", "--grace", "1", "--journal", str(tmp_path / "j2.jsonl"), "--reuse", matrix)
    again = _probe("--plan-file", plan, *args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "reuse: 3 cells copied from run" in again.stderr
    assert "reuse: running 1 not measured in the baseline (not_run)" in again.stderr


def test_a_bad_budget_is_a_usage_error(tmp_path):
    r = _probe("--plan-file", _plan(tmp_path), "--budget", "ten minutes", "--dry-run", cwd=tmp_path)
    assert r.returncode == 2 and "not a duration" in r.stderr


def test_a_budget_under_a_minute_fits_nothing(probe_cli):
    r = probe_cli("run", "--models", "35b", "--budget", "30s", "--dry-run")
    assert r.returncode == 2
    assert "--budget: 30 s fits nothing" in r.stderr and "at least 1m" in r.stderr
    assert "Traceback" not in r.stderr
