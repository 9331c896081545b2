"""benchmarks/gpu_session_issue11.py: its plan files are valid cells, and its steps never hang."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

from probe.cells import CellSpec

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "gpu_session_issue11", ROOT / "benchmarks" / "gpu_session_issue11.py"
)
assert _spec is not None and _spec.loader is not None
gs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gs)


def test_plans_are_valid_unique_cells(tmp_path: Path):
    paths = gs.write_plans(tmp_path)
    ids: list[str] = []
    for name, path in paths.items():
        cells = [CellSpec.model_validate(c) for c in json.loads(path.read_text())]
        assert cells, name
        ids += [c.id for c in cells]
    assert len(ids) == len(set(ids))
    attn = json.loads(paths["attention"].read_text()) + json.loads(paths["attention-fi"].read_text())
    assert {c["params"]["head_dim"] for c in attn} == {64, 128, 256}
    assert all(c["params"]["sinks"] for c in attn if c["params"]["model"] == "gpt-oss-120b")
    assert {c["params"]["fa_version"] for c in attn if c["params"]["backend"] == "FLASH_ATTN"} == {2, 3, 4}
    assert all(c["params"]["backend"] == "FLASHINFER" for c in json.loads(paths["attention-fi"].read_text()))
    moe = json.loads(paths["moe"].read_text())
    assert {c["params"]["quant"] for c in moe} == set(gs.QUANTS)
    assert all(c["timeout_s"] >= 1200 for c in moe)
    assert all(c["params"]["mla"] for c in json.loads(paths["mla"].read_text()))


def test_dry_run_writes_plans_and_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert gs.main(["--dry-run", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "plans" / "plan-moe.json").is_file()
    assert not (tmp_path / "session.json").exists()
    assert "warm: " in capsys.readouterr().out


def test_a_step_is_stopped_at_its_cap_and_recorded(tmp_path: Path):
    s = gs.Session(tmp_path / "out", tmp_path / "work", budget_s=60, reserve_s=0)
    t = time.monotonic()
    rc = s.step(
        "sleepy", [sys.executable, "-c", "import time; print('hi', flush=True); time.sleep(60)"], cap_s=1.5
    )
    assert time.monotonic() - t < 20 and rc is not None and rc != 0
    entry = s.record["steps"][-1]
    assert entry["step"] == "sleepy" and entry["timed_out"] is True
    assert "hi" in (tmp_path / "out" / "sleepy.log").read_text()
    assert json.loads((tmp_path / "out" / "session.json").read_text())["steps"][-1]["step"] == "sleepy"


def test_no_time_left_skips_the_step(tmp_path: Path):
    s = gs.Session(tmp_path / "out", tmp_path / "work", budget_s=10, reserve_s=10)
    assert s.step("late", [sys.executable, "-c", "pass"], cap_s=5) is None
    assert "skipped" in s.record["steps"][-1]


def test_probe_run_resumes_the_kept_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    s = gs.Session(tmp_path / "out", tmp_path / "work", budget_s=60, reserve_s=0)
    (tmp_path / "work" / "moe.jsonl").write_text("{}\n")
    seen: list[list[str]] = []
    monkeypatch.setattr(s, "step", lambda name, argv, cap_s, min_s=30.0: seen.append(argv) or 0)
    monkeypatch.setattr(s, "supports", lambda flag: flag == "--jit-timeout")
    s.probe_run("moe", tmp_path / "plan.json", cap_s=10, jobs=2)
    argv = seen[0]
    assert "--resume" in argv and argv[argv.index("-j") + 1] == "2"
    assert argv[argv.index("--jit-timeout") + 1] == "1200"
    assert (tmp_path / "out" / "moe.jsonl").read_text() == "{}\n"
