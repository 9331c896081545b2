"""`probe run` stopped from outside (Ctrl-C, SIGTERM from `timeout` or a CI cancel): the cell in flight is
killed and left out of the journal — never recorded as a crash — and what was measured is still written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probe.sandbox.journal import read_journal
from tests.sandbox.conftest import M

REPO = Path(__file__).resolve().parents[2]

# a real `probe run` stopped mid-cell: about 4 s per signal
pytestmark = pytest.mark.slow


def _plan(path: Path) -> None:
    cells = [
        {"id": "first-ok", "kind": "fixture", "target": M + "ok", "timeout_s": 60},
        *({"id": f"hang-{i}", "kind": "fixture", "target": M + "hang", "timeout_s": 300} for i in range(3)),
    ]
    path.write_text(json.dumps(cells))


def _wait_for(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stopped_run_keeps_results_and_records_no_crash(tmp_path: Path, signum: int) -> None:
    plan, journal, matrix = tmp_path / "plan.json", tmp_path / "j.jsonl", tmp_path / "m.json"
    _plan(plan)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "probe", "run", "--plan-file", str(plan), "--journal", str(journal),
           "-o", str(matrix), "-j", "3"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        # the hang cell is running once its child prints; the ok cell is journaled by then
        assert _wait_for(lambda: journal.exists() and "first-ok" in journal.read_text(), 60)
        time.sleep(2.0)  # three warm workers spin in the hang cells (three chances to catch a race)
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    assert "interrupted" in out
    _, results, _ = read_journal(journal)
    assert [r.id for r in results] == ["first-ok"]  # the hang cells are not crashes, just not run
    m = json.loads(matrix.read_text())
    assert [c["id"] for c in m["cells"]] == ["first-ok"]
    assert m["run"]["status"] == "partial"
