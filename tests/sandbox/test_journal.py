"""Journal: fsync'ed JSON lines, torn-line tolerance, resume after kill -9 of the prober."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from probe.cells import CellResult
from probe.errors import BadInputError, UsageError
from probe.outcomes import Outcome
from probe.sandbox.journal import Journal, plan_hash, read_journal
from tests.sandbox.children.prober import plan
from tests.sandbox.conftest import run_pids

ROOT = Path(__file__).resolve().parents[2]


def result(cid: str) -> CellResult:
    return CellResult(id=cid, kind="fixture", outcome=Outcome.OK)


def test_new_journal_has_header_and_rows(tmp_path):
    p = tmp_path / "j.jsonl"
    with Journal.open(p, resume=False, run_meta={"run_id": "r1", "plan_hash": "abc", "image": "img"}) as j:
        j.append(result("a"))
        j.append(result("b"))
        j.append(result("a"))  # a duplicate is never written
    lines = p.read_text().splitlines()
    head = json.loads(lines[0])
    assert head["probe_journal"] == 1 and head["run_id"] == "r1" and head["plan_hash"] == "abc"
    assert head["image"] == "img" and head["started_at"] and head["probe_version"]
    assert [json.loads(x)["id"] for x in lines[1:]] == ["a", "b"]


def test_a_not_run_row_is_superseded_when_the_cell_runs_later(tmp_path):
    """A cell the budget left ``not_run`` is not done: a resumed run runs it and the new row wins; rows
    copied from an earlier run go in with one write."""
    p = tmp_path / "j.jsonl"
    skipped = CellResult(id="b", kind="fixture", outcome=Outcome.NOT_RUN, root_cause="run budget spent")
    with Journal.open(p, resume=False, run_meta={"run_id": "r1"}) as j:
        j.extend([result("a"), skipped, result("c")])
        assert j.done_ids == {"a", "c"}
    with Journal.open(p, resume=True) as j:
        assert j.done_ids == {"a", "c"} and [r.id for r in j.results] == ["a", "b", "c"]
        j.append(result("b"))
        assert j.done_ids == {"a", "b", "c"}
        assert [(r.id, r.outcome.value) for r in j.results] == [("a", "ok"), ("c", "ok"), ("b", "ok")]
    with Journal.open(p, resume=True) as j:
        assert [(r.id, r.outcome.value) for r in j.results] == [("a", "ok"), ("c", "ok"), ("b", "ok")]


def test_existing_journal_needs_resume(tmp_path):
    p = tmp_path / "j.jsonl"
    Journal.open(p, resume=False).close()
    with pytest.raises(UsageError):
        Journal.open(p, resume=False)


def test_torn_last_line_is_dropped_and_truncated(tmp_path):
    p = tmp_path / "j.jsonl"
    with Journal.open(p, resume=False, run_meta={"run_id": "r"}) as j:
        j.append(result("a"))
    whole = p.read_bytes()
    p.write_bytes(whole + b'{"id": "b", "kind": "fix')  # kill -9 in the middle of a write
    headers, results, good = read_journal(p)
    assert [r.id for r in results] == ["a"] and good == len(whole)
    with Journal.open(p, resume=True) as j:
        assert j.done_ids == {"a"} and j.run_id == "r"
        j.append(result("b"))
    headers, results, _ = read_journal(p)
    assert [r.id for r in results] == ["a", "b"]
    assert len(headers) == 2 and "resumed_at" in headers[1]
    for line in p.read_text().splitlines():
        json.loads(line)  # every line intact


def test_corrupt_middle_line_is_an_input_error(tmp_path):
    p = tmp_path / "j.jsonl"
    p.write_text('{"probe_journal": 1}\nnot json\n{"probe_journal": 1}\n')
    with pytest.raises(BadInputError):
        read_journal(p)


def test_plan_hash_is_stable():
    assert plan_hash(plan(5)) == plan_hash(plan(5)) != plan_hash(plan(6))


def _prober(path: Path, n: int, run_id: str, jobs: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.sandbox.children.prober", str(path), str(n), run_id, str(jobs)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_resume_after_kill_9_loses_nothing_and_duplicates_nothing(tmp_path, jobs):
    """SIGKILL the prober at random points (fixed seed), resume until done: every cell exactly once."""
    rng = random.Random(1234 + jobs)
    n = 30
    path = tmp_path / "run.jsonl"
    run_id = f"k{uuid.uuid4().hex[:10]}"
    kills = 0
    for _ in range(6):
        # kill at a random point defined by progress (so the test does not depend on machine speed):
        # after k more rows are journaled, plus a random extra delay that lands mid-cell
        _, results, _ = read_journal(path)
        target = min(n - 1, len(results) + rng.randint(0, 3))
        proc = _prober(path, n, run_id, jobs)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if len(read_journal(path)[1]) >= target:
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.15))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        _, results, _ = read_journal(path)
        ids = [r.id for r in results]
        assert len(ids) == len(set(ids)), "duplicate rows after a kill"
    assert kills >= 3
    for _ in range(5):  # finish
        proc = _prober(path, n, run_id, jobs)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()[-2000:]
        _, results, _ = read_journal(path)
        if len(results) == n:
            break
    headers, results, good = read_journal(path)
    assert good == path.stat().st_size
    ids = [r.id for r in results]
    assert sorted(ids) == sorted(s.id for s in plan(n)), "every cell exactly once"
    by = {r.id: r for r in results}
    for s in plan(n):
        want = Outcome.CRASHED if s.target.endswith(":segfault") else Outcome.OK
        assert by[s.id].outcome is want, (s.id, by[s.id].outcome, by[s.id].root_cause)
    assert all(h.get("run_id") in (run_id, None) for h in headers)
    # the workers of killed probers took themselves down (parent-death watch)
    deadline = time.monotonic() + 5
    while run_pids(run_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run_pids(run_id) == []
